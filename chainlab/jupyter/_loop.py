"""Run control coroutines from synchronous code on the kernel's event loop.

Magics and button handlers are synchronous, yet they run ON the kernel's asyncio loop (every
cell and every comm message is handled there), so they can neither ``await`` nor block on
the loop. The runtime's control coroutines (``run.approve``, ``run.step``, ``runtime.start``
...) do their state change synchronously and then, at most, await a store flush.

:func:`eager` therefore runs a coroutine right away up to its first real suspension (like
Python 3.12's eager tasks): a mistake raises at once, in the caller, where the magic can turn
it into a ``UsageError`` and a button can show it; the state change is visible immediately
(a test can ``button.click()`` and assert). Whatever is left (the flush) continues as an
asyncio Task that we keep a strong reference to; an error there goes to ``on_error``.

Widget callbacks may arrive on ANOTHER thread: JupyterLab >= 4.4 sends comm messages to a
kernel subshell (setting ``commsOverSubshells``, default ``perCommTarget``) and ipykernel >=
7 handles a subshell's messages in its own thread, with its own asyncio loop. A run's
bookkeeping and its anyio events belong to the loop that drives it, and an event set from
another thread does not wake that loop (the step would start only when something else
woke it, e.g. the next cell). :func:`call_on` hands such a call over to the run's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["RUN_ON_TIMEOUT_S", "Eager", "call_on", "eager", "home_loop", "pending_tasks",
           "run_on"]

T = TypeVar("T")

_TASKS: set[asyncio.Task[Any]] = set()  # asyncio keeps only weak references to tasks


def pending_tasks() -> set[asyncio.Task[Any]]:
    """Tasks started by :func:`eager` that have not finished (tests await them)."""
    return {t for t in _TASKS if not t.done()}


class Eager(Generic[T]):
    """The outcome of :func:`eager`: finished (``done``, ``value``) or continuing in ``task``."""

    __slots__ = ("done", "task", "value")

    def __init__(self, value: T | None = None, task: asyncio.Task[T] | None = None):
        self.done = task is None
        self.value = value
        self.task = task

    async def result(self) -> T:
        """The coroutine's result (awaits the task if it had to continue in the background)."""
        if self.task is None:
            return self.value  # type: ignore[return-value]
        return await self.task


@types.coroutine
def _adopt(coro: Coroutine[Any, Any, T], pending: Any) -> Generator[Any, Any, T]:
    """Continue a coroutine that was started by hand, inside a Task: first hand the Task the
    future the coroutine is waiting on, then delegate the rest (``yield from``)."""
    try:
        yield pending
    except BaseException as exc:
        try:
            pending = coro.throw(exc)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        return (yield from _adopt(coro, pending))
    return (yield from coro.__await__())


def eager(coro: Coroutine[Any, Any, T], *,
          on_error: Callable[[BaseException], None] | None = None) -> Eager[T]:
    """Run ``coro`` now until it finishes or first suspends; continue it as a Task after that.

    Raises whatever the coroutine raises before it first suspends. An error raised after
    that goes to ``on_error`` (default: printed to stderr, which Jupyter shows under the
    cell that started it). Needs a running asyncio loop only when the coroutine suspends.
    """
    try:
        pending = coro.send(None)
    except StopIteration as stop:
        return Eager(stop.value)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        coro.close()
        raise RuntimeError(
            "this needs a running asyncio event loop (a Jupyter kernel has one); from a plain "
            "script use the async API: `await run.approve(...)` inside `anyio.run(...)`"
        ) from None

    async def finish() -> T:
        return await _adopt(coro, pending)

    task = loop.create_task(finish())
    _TASKS.add(task)

    def done(t: asyncio.Task[T]) -> None:
        _TASKS.discard(t)
        if t.cancelled():
            coro.close()  # cancelled before it resumed: run its finally blocks now
            return
        exc = t.exception()
        if exc is not None:
            (on_error or _print_error)(exc)

    task.add_done_callback(done)
    return Eager(None, task)


def home_loop() -> asyncio.AbstractEventLoop | None:
    """The loop runs are driven on: the kernel's main loop (where cells run), else the loop
    running in this thread, else None (plain Python)."""
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    if kernelbase is not None and kernelbase.Kernel.initialized():
        loop = getattr(getattr(kernelbase.Kernel.instance(), "io_loop", None),
                       "asyncio_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_closed():
            return loop
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_on(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., Any], *args: Any,
            **kwargs: Any) -> bool:
    """Hand ``fn(*args, **kwargs)`` over to ``loop`` when we are not running on it (a widget
    callback in a subshell thread); returns True if it was handed over, False if the caller
    should just call it (same loop, or no loop at all)."""
    if loop is None or loop.is_closed():
        return False
    try:
        if asyncio.get_running_loop() is loop:
            return False
    except RuntimeError:
        pass

    async def in_a_task() -> None:
        # inside a Task, not a bare callback: anyio needs a current task to know its loop
        # (Step starting a new worker raised NoEventLoopError and the step did not start)
        fn(*args, **kwargs)

    def start() -> None:
        task = loop.create_task(in_a_task())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    loop.call_soon_threadsafe(start)
    return True


#: how long a thread waits for another loop to answer :func:`run_on` (a control call
#: answers in milliseconds; only an async tool that blocks the loop makes it wait)
RUN_ON_TIMEOUT_S = 30.0


def run_on(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., T], *args: Any,
           timeout: float = RUN_ON_TIMEOUT_S) -> T:
    """``fn(*args)`` on ``loop``'s thread (inside a Task: anyio needs one) and its result or
    exception; the calling thread waits. Called on that loop (or with no loop), it simply
    calls. Raises RuntimeError when the loop does not answer within ``timeout`` seconds
    (the call still happens later)."""
    if loop is None or loop.is_closed():
        return fn(*args)
    try:
        if asyncio.get_running_loop() is loop:
            return fn(*args)
    except RuntimeError:
        pass

    async def in_a_task() -> T:
        return fn(*args)

    future = asyncio.run_coroutine_threadsafe(in_a_task(), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise RuntimeError(
            f"chainlab's run loop did not answer within {timeout:g} s: something blocks it "
            "(an async tool that calls time.sleep or blocking I/O? make it a sync tool, "
            "which runs in a worker thread)") from None


def _print_error(exc: BaseException) -> None:
    print(f"chainlab: {type(exc).__name__}: {exc}", file=sys.stderr)
