"""The loop every MCP client session lives on: one daemon thread running an asyncio loop,
started on first use. A session is an anyio context that must be entered and left by one
task, yet it is shared by every run of a toolbox, whatever loop (a notebook's kernel, a CLI's
``anyio.run``, a test's) drives the run, and it is opened from plain synchronous code too
(``toolbox.add_mcp(...)`` lists the server's tools). So the sessions stay here and callers
hand coroutines over: :func:`call_soon` from a loop (cancelling the caller cancels the
coroutine here, which makes the SDK send ``notifications/cancelled``), :func:`run_blocking`
from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["call_soon", "mcp_loop", "on_mcp_loop", "run_blocking"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def mcp_loop() -> asyncio.AbstractEventLoop:
    """The MCP sessions' loop (started now if it is not running)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            _thread = threading.Thread(target=serve, name="chainlab-mcp", daemon=True)
            _thread.start()
            ready.wait()
            _loop = loop
        return _loop


def on_mcp_loop() -> bool:
    return _thread is not None and threading.current_thread() is _thread


async def call_soon(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` run on the MCP loop, from a coroutine on any asyncio loop."""
    if on_mcp_loop():
        return await coro
    future = asyncio.run_coroutine_threadsafe(coro, mcp_loop())
    return await asyncio.wrap_future(future)


def run_blocking(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the MCP loop and wait for it, from synchronous code (never from the
    MCP loop itself). Raises TimeoutError after ``timeout`` seconds (the coroutine is
    cancelled)."""
    if on_mcp_loop():
        coro.close()
        raise RuntimeError("run_blocking called on the MCP loop (await the coroutine instead)")
    future = asyncio.run_coroutine_threadsafe(coro, mcp_loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout} s") from None
