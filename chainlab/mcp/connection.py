"""One client session per MCP server (:class:`MCPConnection`): opened when first needed,
shared by every run of the toolbox, closed with the runtime (``toolbox.aclose()``), restarted
(a stdio server's process) or reconnected (a streamable-HTTP server) on the next call after it
died. Every failure is mapped here, once, onto chainlab's errors:

* the server cannot be reached or started -> :class:`~chainlab.errors.MCPServerError` (naming
  the server and the fix) when listing tools; during a call, a
  :class:`~chainlab.errors.TransientError` with ``before_effect=True``: nothing was sent;
* the connection is lost after the request was sent -> TransientError, ``before_effect=False``
  (a read-only or idempotent tool is retried, any other becomes ``in_doubt``);
* a JSON-RPC error answer -> a ToolError (``before_effect`` when the server refused the
  request as such: unknown tool, invalid params).

Before every call the session is checked (no round trip: has the SDK seen the end of a
stdio server's output?), and before a call that is not safe to repeat an HTTP server is
checked to accept a connection: a server that died while idle is restarted (reconnected)
*before* the request goes out, so its death does not leave a step in doubt. A server that
dies between that check and the request still does (the outcome is then truly unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chainlab.errors import MCPServerError, ToolError, TransientError
from chainlab.mcp._loop import call_soon, run_blocking

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPToolSpec

__all__ = ["MCPConnection"]

_CONNECTION_CLOSED = -32000
_REFUSED = (-32601, -32602)  # method not found, invalid params: the call never ran


class MCPConnection:
    """The client side of one MCP server: ``command`` (argv of a stdio server; a leading
    ``python`` means this interpreter) or ``url`` (a streamable-HTTP endpoint).

    ``env`` is added to the environment a stdio server starts with: the MCP SDK's safe
    default (PATH, HOME, ...) plus ``PYTHONPATH`` when set, never the whole environment
    (a server is not handed your secrets unless you pass them). ``init_timeout_s`` bounds
    the start and the MCP handshake; ``label`` names the server in errors (default: the
    command or URL); badges show the server's own name once connected.
    """

    def __init__(self, command: Sequence[str] | str | None = None, *, url: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 label: str | None = None, init_timeout_s: float = 20.0):
        if (command is None) == (url is None):
            raise MCPServerError(repr(command or url), "give exactly one of command=[...] "
                                 "(a stdio server) and url=... (a streamable-HTTP server)",
                                 "for example add_mcp(command=['python', '-m', 'myserver'])")
        if isinstance(command, str):
            command = shlex.split(command)
        given = shlex.join(command) if command is not None else None
        self.command = _interpreter(list(command)) if command is not None else None
        if self.command is not None and not self.command:
            raise MCPServerError("''", "the command is empty", "pass the server's argv")
        self.url = url
        self.env = dict(env or {})
        self.cwd = cwd
        self.init_timeout_s = init_timeout_s
        self.label = label or given or str(url)
        self.server_name: str | None = None
        self.server_version: str | None = None
        #: how many times a session was opened (1 after the first; more after restarts)
        self.opened = 0
        self._client: Client | None = None
        self._broken = False
        self._closing: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._stderr: Any = None
        self._garbage: str | None = None  # the first thing the server said that is not MCP

    @property
    def where(self) -> str:
        """The command or URL (what identifies the server to a person)."""
        return shlex.join(self.command) if self.command else str(self.url)

    # ------------------------------------------------------------------ public API
    def list_tools(self) -> list[MCPToolSpec]:
        """The server's tools (opens the session; blocking: call it from synchronous code).
        Raises MCPServerError naming the server and the fix."""
        try:
            return run_blocking(self._list_tools(), self.init_timeout_s + 30)
        except TimeoutError:
            raise MCPServerError(self.label, "did not list its tools within "
                                 f"{self.init_timeout_s + 30:g} s", _FIX_HANG) from None

    async def call_tool(self, name: str, args: dict[str, Any], *,
                        unsafe: bool = False) -> CallToolResult:
        """Call tool ``name`` (from any asyncio loop). ``unsafe``: the call must not be
        repeated (an HTTP server is checked to be reachable first). Raises
        TransientError/ToolError as described in the module."""
        return await call_soon(self._call(name, args, unsafe))

    async def aclose(self) -> None:
        """Close the session (a stdio server's process ends); the next call opens a new one."""
        await call_soon(self._shutdown())

    def close(self) -> None:
        """:meth:`aclose` from synchronous code."""
        with contextlib.suppress(TimeoutError):
            run_blocking(self._shutdown(), 10)

    def __repr__(self) -> str:
        state = "open" if self._client is not None and not self._broken else "closed"
        return f"<MCPConnection {self.label!r} {state}>"

    # ------------------------------------------------------------------ on the MCP loop
    async def _list_tools(self) -> list[MCPToolSpec]:
        client = await self._session()
        tools: list[MCPToolSpec] = []
        cursor = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return tools
        except Exception as exc:
            self._broken = True
            raise MCPServerError(self.label, f"failed to list its tools: {_why(exc)}",
                                 _FIX_RUN) from None

    async def _call(self, name: str, args: dict[str, Any], unsafe: bool) -> CallToolResult:
        client = await self._available()
        if _closed(client) or (unsafe and self.url is not None and not await self._listens()):
            # died while idle: restart (reconnect) before anything is sent
            self._broken = True
            client = await self._available()
        try:
            return await client.call_tool(name, args)
        except Exception as exc:
            code = _error_code(exc)
            if code is not None and code != _CONNECTION_CLOSED:
                raise ToolError(f"MCP server {self.label!r} refused the call of {name!r}: "
                                f"{_why(exc)}", before_effect=code in _REFUSED) from None
            if code is None and not _transport_failure(exc):
                # the server answered, the SDK could not use the answer (an output that
                # does not fit the tool's output schema)
                raise ToolError(f"the answer of MCP tool {name!r} cannot be used: "
                                f"{_why(exc)}") from None
            self._broken = True
            raise TransientError(
                f"connection to MCP server {self.label!r} lost during the call of {name!r} "
                f"(after the request was sent): {_why(exc)}", before_effect=False) from None

    async def _listens(self) -> bool:
        """Does the HTTP server accept a connection (one TCP connect, no request)?"""
        from urllib.parse import urlsplit

        where = urlsplit(str(self.url))
        port = where.port or (443 if where.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(where.hostname, port), 5)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return True

    async def _available(self) -> Client:
        """The open session, for a call: a server that cannot be started is a transient
        failure before any effect."""
        try:
            return await self._session()
        except MCPServerError as exc:
            raise TransientError(f"MCP server {self.label!r} is not available: {exc.problem}",
                                 before_effect=True) from None

    async def _session(self) -> Client:
        client = self._client
        if client is not None and not self._broken:
            return client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None or self._broken:
                await self._shutdown()
                await self._open()
            assert self._client is not None
            return self._client

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        self._closing = asyncio.Event()
        self._owner = loop.create_task(self._own(ready, self._closing))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.init_timeout_s)
        except TimeoutError:
            ready.cancel()
            await self._shutdown()
            said = f"; it printed what is not MCP: {self._garbage}" if self._garbage else ""
            raise MCPServerError(self.label, "did not answer the MCP handshake within "
                                 f"{self.init_timeout_s:g} s{said}{self._stderr_tail()}",
                                 _FIX_HANG) from None
        except MCPServerError:
            await self._shutdown()
            raise
        except Exception as exc:
            await self._shutdown()
            raise self._startup_error(exc) from None
        self.opened += 1

    async def _own(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """The task that enters and leaves the SDK's session (anyio contexts must be left by
        the task that entered them); it holds the session until :meth:`_shutdown`."""
        from mcp import Client
        from mcp.types import Implementation

        try:
            transport = self._transport()
            info = Implementation(name="chainlab", version="0.1.0")
            self._garbage = None
            async with Client(transport, client_info=info, cache=None,
                              message_handler=self._on_message) as client:
                server = client.server_info
                self.server_name = server.name if server else None
                self.server_version = server.version if server else None
                self._client, self._broken = client, False
                ready.set_result(client)
                await closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception)
                                    else RuntimeError(_why(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._broken = True
            self._client = None

    async def _on_message(self, message: Any) -> None:
        """The SDK hands unparsable input here (a server printing other text on stdout)."""
        if isinstance(message, Exception) and self._garbage is None:
            from pydantic import ValidationError

            errors = message.errors() if isinstance(message, ValidationError) else []
            said = errors[0].get("input") if errors else None
            self._garbage = repr(said)[:200] if isinstance(said, str) else str(message)[:200]

    def _transport(self) -> Any:
        if self.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.url)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.command is not None
        if self._stderr is None:
            # the server's stderr, kept for error messages (closed with the connection object)
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115
                "w+", encoding="utf-8", errors="replace")
        self._stderr.seek(0)
        self._stderr.truncate()
        env = {k: v for k, v in os.environ.items() if k == "PYTHONPATH"} | self.env
        params = StdioServerParameters(command=self.command[0], args=self.command[1:],
                                       env=env, cwd=os.fspath(self.cwd) if self.cwd else None)
        return stdio_client(params, errlog=self._stderr)

    async def _shutdown(self) -> None:
        owner, self._owner = self._owner, None
        if self._closing is not None:
            self._closing.set()
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(owner), 5)
            except (TimeoutError, Exception):
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner
        self._client = None

    # ------------------------------------------------------------------ errors
    def _startup_error(self, exc: BaseException) -> MCPServerError:
        leaf = _leaf(exc)
        if isinstance(leaf, FileNotFoundError | PermissionError) and self.command:
            return MCPServerError(self.label, f"cannot start {self.command[0]!r}: {leaf}",
                                  "check the command: is it installed and on PATH?")
        if self.url is not None:
            return MCPServerError(self.label, f"cannot connect to {self.url}: {_why(exc)}",
                                  "check that the server runs and that the URL is its MCP "
                                  "endpoint (often .../mcp)")
        return MCPServerError(self.label, f"ended before the MCP handshake ({_why(exc)})"
                              f"{self._stderr_tail()}", _FIX_RUN)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(Exception):
            self._stderr.flush()
            self._stderr.seek(0)
            lines = [ln for ln in self._stderr.read().splitlines() if ln.strip()]
            if lines:
                return "; its stderr ends with: " + " | ".join(lines[-3:])[-600:]
        return ""


_FIX_RUN = "run the command in a terminal to see why it stops or what it prints"
_FIX_HANG = ("check that it is an MCP server speaking over stdio/streamable HTTP (not a "
             "program printing other text) or raise init_timeout_s when it starts slowly")


def _interpreter(command: list[str]) -> list[str]:
    """A leading ``python``/``python3`` means the interpreter chainlab runs in (the venv a
    notebook or the CLI uses), not whichever one comes first on PATH."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return command


def _closed(client: Client) -> bool:
    """Has the session seen its connection end (a stdio server's EOF)? The SDK keeps that in
    its dispatcher; an SDK without the flag reads as open (the call then finds out)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _transport_failure(exc: BaseException) -> bool:
    """A failure of the connection itself (a pipe, a socket, an HTTP client error)."""
    import anyio

    leaf = _leaf(exc)
    return isinstance(leaf, OSError | TimeoutError | anyio.ClosedResourceError
                      | anyio.BrokenResourceError | anyio.EndOfStream) \
        or type(leaf).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")


def _error_code(exc: BaseException) -> int | None:
    from mcp.shared.exceptions import MCPError

    leaf = _leaf(exc)
    return leaf.error.code if isinstance(leaf, MCPError) else None


def _why(exc: BaseException) -> str:
    leaf = _leaf(exc)
    from mcp.shared.exceptions import MCPError

    if isinstance(leaf, MCPError):
        return leaf.error.message
    return f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__
