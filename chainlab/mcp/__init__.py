"""Tools from Model Context Protocol servers (DESIGN §16): the only package importing the
``mcp`` SDK (``pip install "chainlab[mcp]"``).

    toolbox.add_mcp(command=["python", "-m", "chainlab.testing.mcp_server"], prefix="demo")
    toolbox.add_mcp(url="http://127.0.0.1:8765/mcp", include=["lookup"])
    toolbox = Toolbox.from_mcp("python -m myserver")

Every tool the server lists becomes a :class:`~chainlab.tools.schema_tool.SchemaTool` whose
side-effect contract comes from its annotations (the table in :mod:`chainlab.mcp.mapping`);
all of a server's tools share one client session (:class:`MCPConnection`).

* :mod:`.connection`: the session, its restarts, and the mapping of failures;
* :mod:`.mapping`: MCP tool -> chainlab tool; result -> output or ToolError;
* :mod:`._loop`: the thread whose loop the sessions live on.

What the tools are registered into is typed as :class:`Registers` (a
:class:`~chainlab.tools.Toolbox` is one), not as the Toolbox: ``Toolbox.add_mcp`` loads this
package on demand, so this package naming the Toolbox would close an import circle
(tests/test_layering.py lists ``add_mcp`` as a ``CONVENIENCE``, which may form none).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from chainlab._text import safe_repr
from chainlab.errors import MCPServerError, MissingExtraError, ToolDefinitionError
from chainlab.mcp.connection import MCPConnection
from chainlab.mcp.mapping import contract_of, hints_of, output_of, schema_tool

if TYPE_CHECKING:
    from chainlab.tools.schema_tool import SchemaTool

__all__ = ["MCPConnection", "Registers", "add_mcp", "contract_of", "hints_of", "output_of",
           "parse_spec", "schema_tool"]


class Registers(Protocol):
    """What :func:`add_mcp` registers a server's tools into: a named set of tools that can
    add one and close a resource with itself (:class:`~chainlab.tools.Toolbox` is one). A
    protocol, not the Toolbox, because the Toolbox loads this package on demand
    (``Toolbox.add_mcp``): naming it here would close an import circle."""

    name: str

    def __contains__(self, name: object) -> bool:
        """Whether a tool of that name is registered."""

    def add(self, tool: SchemaTool) -> object:
        """Register ``tool`` (raises ToolDefinitionError for a name already taken)."""

    def own(self, resource: Any) -> None:
        """Close ``resource`` (its ``async aclose()``) when the set is closed."""


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtraError("mcp", "mcp", "tools from MCP servers") from None


def parse_spec(spec: str) -> dict[str, Any]:
    """``"http(s)://..."`` -> ``{"url": ...}``; anything else is a command line ->
    ``{"command": [...]}`` (split like a shell would)."""
    spec = spec.strip()
    if spec.startswith(("http://", "https://")):
        return {"url": spec}
    return {"command": spec}


def add_mcp(toolbox: Registers, command: Sequence[str] | str | None = None, *,
            url: str | None = None, prefix: str | None = None,
            include: Iterable[str] | None = None, exclude: Iterable[str] = (),
            confirm: bool | Mapping[str, bool] | None = None,
            overrides: Mapping[str, Mapping[str, Any]] | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            label: str | None = None, init_timeout_s: float = 20.0) -> list[SchemaTool]:
    """Register the tools of one MCP server in ``toolbox`` (see ``Toolbox.add_mcp``).

    ``prefix``: register each tool as ``PREFIX__name``. ``include`` / ``exclude``: MCP tool
    names to keep / leave out. ``confirm``: override requires-confirmation for every tool
    (a bool) or per MCP tool name (a mapping). ``overrides``: per MCP tool name, Tool
    keywords replacing what its hints say (``{"delete": {"idempotent": True}}``). ``label``
    names the server in errors (default: its command or URL). ``env``, ``cwd`` and
    ``init_timeout_s``: see :class:`MCPConnection`.

    Raises MCPServerError (naming the server and the fix) when the server does not start,
    speaks no MCP, hangs, or lists a tool with an invalid schema; ToolDefinitionError when a
    tool's name would shadow a tool the toolbox has (pass ``prefix``). Either way nothing of
    this server is registered and the toolbox keeps working.
    """
    _require_sdk()
    connection = MCPConnection(command, url=url, env=env, cwd=cwd, label=label,
                               init_timeout_s=init_timeout_s)
    try:
        specs = connection.list_tools()
        tools = _tools(toolbox, connection, specs, prefix=prefix, include=include,
                       exclude=exclude, confirm=confirm, overrides=overrides or {})
    except BaseException:
        connection.close()
        raise
    for tool in tools:  # (checked above: no name is taken, none is listed twice)
        toolbox.add(tool)
    toolbox.own(connection)
    return tools


def _tools(toolbox: Registers, connection: MCPConnection, specs: list[Any], *,
           prefix: str | None, include: Iterable[str] | None, exclude: Iterable[str],
           confirm: bool | Mapping[str, bool] | None,
           overrides: Mapping[str, Mapping[str, Any]]) -> list[SchemaTool]:
    listed = {spec.name for spec in specs}
    keep = set(include) if include is not None else None
    unknown = sorted(((keep or set()) | set(exclude) | set(overrides)
                      | (set(confirm) if isinstance(confirm, Mapping) else set())) - listed)
    if unknown:
        raise MCPServerError(connection.label, f"has no tool named {', '.join(map(repr, unknown))}"
                             f" (it lists {', '.join(sorted(listed)) or 'none'})",
                             "check include=/exclude=/confirm=/overrides=")
    twice = sorted({spec.name for spec in specs if [s.name for s in specs].count(spec.name) > 1})
    if twice:
        raise MCPServerError(connection.label, f"lists the tool name {safe_repr(twice[0])} "
                             "more than once, so a step could not say which one it calls",
                             "fix the server (each tool name once); nothing of it was "
                             "registered")
    out: list[SchemaTool] = []
    for spec in specs:
        if (keep is not None and spec.name not in keep) or spec.name in set(exclude):
            continue
        local = f"{prefix}__{spec.name}" if prefix else spec.name
        if local in toolbox:
            raise ToolDefinitionError(
                f"MCP server {connection.label!r} has a tool {spec.name!r}, which would shadow "
                f"the tool {local!r} toolbox {toolbox.name!r} already has; pass prefix=... "
                f"(its tools become PREFIX__name) or exclude=[{spec.name!r}]")
        meta = dict(overrides.get(spec.name, {}))
        if isinstance(confirm, bool):
            meta.setdefault("requires_confirmation", confirm)
        elif isinstance(confirm, Mapping) and spec.name in confirm:
            meta.setdefault("requires_confirmation", bool(confirm[spec.name]))
        try:
            out.append(schema_tool(spec, connection, name=local, overrides=meta))
        except ToolDefinitionError as exc:
            raise MCPServerError(connection.label, f"its tool {spec.name!r} cannot be used: "
                                 f"{exc}", f"fix the server, or pass exclude=[{spec.name!r}] "
                                 "to register the others") from None
    return out


