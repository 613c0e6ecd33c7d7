"""A toolbox with a Python tool and the test MCP server's tools, importable by a driver
subprocess (``tests.mcp.desk_tools:toolbox``); the server logs to ``CHAINLAB_MCP_LOG``."""

from __future__ import annotations

import os
import sys

from chainlab import Toolbox

toolbox = Toolbox("desk")


@toolbox.tool
def shorten(text: str, limit: int = 12) -> str:
    """Cut ``text`` to ``limit`` characters."""
    return text[:limit]


toolbox.add_mcp([sys.executable, "-m", "chainlab.testing.mcp_server"], prefix="desk",
                env={"CHAINLAB_MCP_LOG": os.environ.get("CHAINLAB_MCP_LOG", os.devnull)})
