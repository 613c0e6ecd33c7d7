"""``chainlab tools``: the tools of a toolbox (``--tools``) and of MCP servers (``--mcp``),
each with its signature, side-effect contract and where it comes from."""

from __future__ import annotations

import json

import anyio
import typer

from chainlab.cli.common import reporting_errors
from chainlab.cli.driving import Output
from chainlab.cli.loading import load_tools
from chainlab.cli.options import JsonOpt, McpOpt, ToolsOpt
from chainlab.tools import SchemaTool, Tool

__all__ = ["contract_text", "register"]


def contract_text(tool: Tool) -> str:
    """``side effects, idempotent, needs confirmation`` (or ``read-only``)."""
    parts = ["side effects" if tool.side_effects else "read-only"]
    if tool.side_effects and tool.idempotent:
        parts.append("idempotent")
    if tool.requires_confirmation:
        parts.append("needs confirmation" if tool.requires_confirmation is True
                     else "confirmation by args")
    return ", ".join(parts)


def _params(tool: Tool) -> str:
    schema = tool.input_schema()
    required = set(schema.get("required") or ())
    return ", ".join(p if p in required else f"{p}?" for p in schema.get("properties") or {})


def register(app: typer.Typer) -> None:
    """Add ``tools`` to ``app``."""

    @app.command()
    def tools(tools: ToolsOpt = None, mcp: McpOpt = None, as_json: JsonOpt = False) -> None:
        """List the tools of --tools and --mcp servers: signature, contract, origin."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            toolbox = load_tools(tools, mcp, "tools")
            if as_json:
                typer.echo(json.dumps(toolbox.describe(), indent=2, ensure_ascii=False))
            else:
                for tool in toolbox:
                    origin = tool.origin if isinstance(tool, SchemaTool) and tool.origin \
                        else "Python"
                    first = tool.description.strip().split("\n", 1)[0]
                    io.out.print(f"{tool.name}({_params(tool)})  [{contract_text(tool)}]  "
                                 f"{origin}", markup=False, soft_wrap=True)
                    if first:
                        io.out.print(f"    {first}", markup=False, soft_wrap=True)
            anyio.run(toolbox.aclose)  # the MCP servers' sessions
