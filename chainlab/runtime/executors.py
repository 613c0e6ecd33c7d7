"""Where tool bodies run. Scheduling, retries, timeouts, confirmation and persistence stay in
the runtime; an executor only calls the function.

The default :class:`LocalExecutor` awaits async tools on the loop and runs sync tools in
worker threads (``anyio.to_thread``) limited to the run's concurrency. A sync tool that
times out or is cancelled keeps running in its abandoned thread (Python cannot kill a
thread); the runtime treats its outcome as unknown, which is why unsafe tools go ``in_doubt``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

if TYPE_CHECKING:
    from chainlab.tools import CallContext, Tool

__all__ = ["Executor", "LocalExecutor"]


@runtime_checkable
class Executor(Protocol):
    """Runs one tool call. Cancellation of the awaiting task must reach the call."""

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any: ...


class LocalExecutor:
    """Async tools on the event loop, sync tools in threads."""

    def __init__(self, max_threads: int = 64):
        self._limiter: anyio.CapacityLimiter | None = None
        self._max_threads = max_threads

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        if tool.is_async:
            return await tool.fn(**kwargs)
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._max_threads)
        return await anyio.to_thread.run_sync(
            partial(tool.fn, **kwargs), abandon_on_cancel=True, limiter=self._limiter
        )
