"""A real MCP server for tests, demos and docs, built on the MCP SDK's server side
(``pip install "chainlab[mcp]"``)::

    python -m chainlab.testing.mcp_server              # stdio
    python -m chainlab.testing.mcp_server --http 8765  # streamable HTTP on 127.0.0.1:8765/mcp

A small ticket desk whose tools cover every annotation case:

=================  =========================================  ================================
tool               annotations                                chainlab contract
=================  =========================================  ================================
``lookup``         readOnly (output schema)                   no side effects
``search``         readOnly, openWorld                        no side effects
``create_ticket``  none                                       side effects, confirmation
``add_comment``    destructive: false                         side effects, no confirmation
``set_status``     destructive: false, idempotent             side effects, idempotent
``delete_ticket``  destructive, idempotent                    side effects, idempotent, confirm
``slow``           readOnly                                   sleeps ``seconds``
``slow_write``     destructive: false                         sleeps, then writes
``fail``           readOnly                                   answers ``isError``
``crash``          destructive: false                         the server process exits
``shout``          readOnly; HTML in its description          (untrusted-text checks)
=================  =========================================  ================================

Every call appends one JSON line ``{"pid", "tool", "phase": "start"|"done", "args"}`` to the
file named by ``CHAINLAB_MCP_LOG`` (when set), so a test can count calls across crashes and
find the process to kill.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["Entry", "Ticket", "build_server", "main"]

LOOKUP = {"python": "a programming language", "mcp": "the Model Context Protocol",
          "chainlab": "chains of tool calls as explicit DAGs"}


class Entry(BaseModel):
    """What ``lookup`` answers (its output schema)."""

    key: str
    value: str


class Ticket(BaseModel):
    """What ``create_ticket`` answers (its output schema)."""

    id: int
    title: str
    priority: str
    status: str


def _log(tool: str, phase: str, **args: Any) -> None:
    path = os.environ.get("CHAINLAB_MCP_LOG")
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "tool": tool, "phase": phase, "args": args})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def build_server(name: str = "chainlab-desk", *, version: str = "1.0.0",
                 bad_schema: bool = False) -> Any:
    """The server (an ``mcp.server.MCPServer``) with the tools of the module's table;
    ``bad_schema``: plus a tool ``broken`` whose input schema is not a valid JSON Schema."""
    import anyio
    from mcp.server import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer(name, version=version, log_level="WARNING",
                       instructions="A ticket desk for chainlab's tests and demos.")
    read_only = ToolAnnotations(read_only_hint=True)
    tickets: dict[int, dict[str, Any]] = {}

    @server.tool(annotations=read_only)
    def lookup(key: str) -> Entry:
        """Look a word up in the desk's glossary."""
        _log("lookup", "start", key=key)
        value = LOOKUP.get(key.lower(), "unknown")
        _log("lookup", "done", key=key)
        return Entry(key=key, value=value)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
                 structured_output=False)
    def search(query: str, limit: int = 3) -> str:
        """Search the glossary; the answer is plain text (no output schema)."""
        _log("search", "start", query=query)
        hits = [k for k in sorted(LOOKUP) if query.lower() in (k + LOOKUP[k]).lower()]
        return ", ".join(hits[:limit]) or "no match"

    @server.tool()
    def create_ticket(title: str, priority: Literal["low", "high"] = "low") -> Ticket:
        """Open a ticket (no annotations: chainlab asks for confirmation)."""
        _log("create_ticket", "start", title=title, priority=priority)
        ticket = Ticket(id=len(tickets) + 1, title=title, priority=priority, status="open")
        tickets[ticket.id] = ticket.model_dump()
        _log("create_ticket", "done", title=title)
        return ticket

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    def add_comment(ticket_id: int, text: str) -> str:
        """Add a comment to a ticket (not idempotent: each call adds one)."""
        _log("add_comment", "start", ticket_id=ticket_id, text=text)
        return f"comment added to #{ticket_id}"

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    def set_status(ticket_id: int, status: Literal["open", "done"]) -> str:
        """Set a ticket's status (idempotent)."""
        _log("set_status", "start", ticket_id=ticket_id, status=status)
        if ticket_id in tickets:
            tickets[ticket_id]["status"] = status
        return f"#{ticket_id} is {status}"

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    def delete_ticket(ticket_id: int) -> str:
        """Delete a ticket (destructive, idempotent)."""
        _log("delete_ticket", "start", ticket_id=ticket_id)
        tickets.pop(ticket_id, None)
        return f"#{ticket_id} deleted"

    @server.tool(annotations=read_only)
    async def slow(seconds: float) -> str:
        """Sleep, then answer (read-only)."""
        _log("slow", "start", seconds=seconds)
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():  # notifications/cancelled from the client
            _log("slow", "cancelled", seconds=seconds)
            raise
        _log("slow", "done", seconds=seconds)
        return f"slept {seconds:g} s"

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def slow_write(seconds: float, title: str) -> str:
        """Sleep, then write (side effects, not idempotent)."""
        _log("slow_write", "start", seconds=seconds, title=title)
        await anyio.sleep(seconds)
        _log("slow_write", "done", seconds=seconds, title=title)
        return f"wrote {title}"

    @server.tool(annotations=read_only)
    def fail(message: str) -> str:
        """Always fails (the result has isError set)."""
        from mcp.server.mcpserver.exceptions import ToolError

        _log("fail", "start", message=message)
        raise ToolError(message)  # the SDK sends a ToolError's message (others: hidden)

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    def crash() -> str:
        """Kill the server process."""
        _log("crash", "start")
        os._exit(17)

    @server.tool(annotations=read_only,
                 description='Shout <b onmouseover="alert(1)">text</b> <script>alert(2)'
                             '</script> back {{ context.x }}')
    def shout(text: str) -> str:
        _log("shout", "start", text=text)
        return text.upper() + " <img src=x onerror=alert(3)>"

    @server.tool(annotations=read_only)
    def wrong_shape() -> Entry:
        """Answers structured content that does not fit the output schema it lists."""
        _log("wrong_shape", "start")
        return Entry(key="k", value="v")

    listed = server._tool_manager._tools["wrong_shape"]  # no public way to set the schema
    listed.__dict__["output_schema"] = {"type": "object", "required": ["id"],
                                        "properties": {"id": {"type": "integer"}}}

    if bad_schema:
        def broken(n: int) -> int:
            return n

        server.add_tool(broken, description="Its input schema is invalid.")
        tools = server._tool_manager._tools  # the SDK keeps no public way to set a schema
        tools["broken"] = tools["broken"].model_copy(update={"parameters": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}})
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chainlab.testing.mcp_server",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--http", type=int, metavar="PORT",
                        help="serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio")
    parser.add_argument("--name", default="chainlab-desk", help="the server's name")
    parser.add_argument("--version", default="1.0.0", help="the server's version")
    parser.add_argument("--bad-schema", action="store_true",
                        help="add a tool whose input schema is invalid (for tests)")
    ns = parser.parse_args(argv)
    server = build_server(ns.name, version=ns.version, bad_schema=ns.bad_schema)
    if ns.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=ns.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
