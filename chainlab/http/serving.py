"""Serving the app with uvicorn (the only module importing it): the address rules (loopback
by default; any other address only with a token file), the token (generated, or read from /
written to ``--token-file``), and one line once the server listens."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from chainlab.errors import UsageError

__all__ = ["is_loopback", "read_token_file", "serve"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def read_token_file(path: Path) -> tuple[str, bool]:
    """The token in ``path`` (``(token, False)``), or a new one written there, readable by
    its owner only (``(token, True)``). Raises UsageError for an empty or unreadable file."""
    from chainlab.http import new_token

    if not path.exists():
        token = new_token()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(token + "\n")
        except OSError as exc:
            raise UsageError(f"--token-file {str(path)!r}: cannot write a new token there: "
                             f"{exc}") from None
        return token, True
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {str(path)!r}: cannot read it: {exc}") from None
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"--token-file {str(path)!r} must hold one token (one line, no "
                         "spaces)", hint="delete it and a new token is written there")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"--token-file {str(path)!r} can be read by other users",
                         hint=f"chmod 600 {path}")
    return token, False


def check_address(host: str, token_file: Path | None) -> None:
    """Refuse a non-loopback address without a token file (a token printed on a terminal
    is for one person on this machine). Raises UsageError."""
    if not is_loopback(host) and token_file is None:
        raise UsageError(f"refusing to listen on {host!r} (not a loopback address) without "
                         "a token file",
                         hint="pass --token-file FILE (a token is written there if the file "
                              "does not exist) and give that token to the clients; or keep "
                              "the default --host 127.0.0.1")


def serve(app: Any, host: str, port: int, *, announce: Callable[[str], None],
          access_log: bool = True, log_level: str = "info") -> None:
    """Serve ``app`` on ``host:port`` (port 0: any free port) until interrupted; calls
    ``announce(url)`` once the server accepts connections. Raises UsageError when the
    address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and without it every response on a kept-alive connection waits ~40 ms for the
    # client's delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port (0: any free one)") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                            lifespan="on", server_header=False,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            announce(f"http://{shown}:{bound}")
        await task

    try:
        asyncio.run(main())
    finally:
        sock.close()
