"""Where tool bodies run. Scheduling, retries, timeouts, confirmation and persistence stay in
the runtime; an executor only calls the function.

The default :class:`LocalExecutor` awaits async tools on the loop and runs sync tools in its
own DAEMON worker threads. Python cannot kill a thread: a sync tool that times out or is
cancelled keeps running in its thread, so

* the runtime treats its outcome as unknown (unsafe tools go ``in_doubt``), and keeps the
  step's slot, serial key and pool units until the body has really returned
  (:meth:`LocalExecutor.submit` gives it a :class:`Pending` to wait on);
* the thread is a daemon: a body that never returns does not keep the process alive once
  the run has settled (the standard library's executors join their threads at exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

if TYPE_CHECKING:
    from chainlab.tools import CallContext, Tool

__all__ = ["AWAITS_ON_LOOP", "BodyBaseException", "Executor", "LocalExecutor", "Pending",
           "SubmittingExecutor"]


class BodyBaseException(Exception):
    """A sync tool body raised a BaseException that is not KeyboardInterrupt/SystemExit
    (GeneratorExit, CancelledError, a custom subclass). It travels back as an ordinary
    Exception: a GeneratorExit re-raised through a future would end the awaiting coroutine
    whatever it catches. ``.original`` is what the body raised."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


@runtime_checkable
class Executor(Protocol):
    """Runs one tool call. Cancellation of the awaiting task must reach the call (or, for a
    body that cannot be stopped, abandon it). An executor whose bodies run elsewhere must
    start a body at most once per attempt (``ctx``: run, step, kind, attempt, epoch), even
    when its own machinery starts it again (DESIGN §20; :mod:`chainlab.dask` claims each
    attempt on the scheduler), and report a body it lost as a ``TransientError``."""

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any: ...


@runtime_checkable
class SubmittingExecutor(Executor, Protocol):
    """An executor that can also start a sync body and hand back a :class:`Pending`: a body
    that outlives its timeout then keeps its step's slot and keys until it really returns
    (without it, a timed-out body is abandoned at once)."""

    def submit(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Pending: ...


class Pending:
    """A sync tool body running in a worker thread.

    ``await result()`` gives its return value (or raises its exception); cancelling that
    wait leaves the body running. ``await finished_wait()`` returns once the body has
    returned, whatever it returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._future: asyncio.Future[Any] = loop.create_future()

    @property
    def finished(self) -> bool:
        return self._future.done()

    async def result(self) -> Any:
        return await asyncio.shield(self._future)

    async def finished_wait(self) -> None:
        await asyncio.wait([self._future])

    def _settle(self, ok: bool, value: Any) -> None:
        if self._future.done():
            return
        if ok:
            self._future.set_result(value)
        else:
            self._future.set_exception(value)
            self._future.exception()  # retrieved: an abandoned body's error is not "lost"

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            value, ok = fn(), True
        except (KeyboardInterrupt, SystemExit) as exc:
            value, ok = exc, False
        except Exception as exc:  # handed to the loop, classified there
            value, ok = exc, False
        except BaseException as exc:
            value, ok = BodyBaseException(exc), False
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle, ok, value)


class _DaemonThreads:
    """A small pool of daemon threads that grows up to ``max_threads`` (a stuck body holds
    one thread; the others go on). A thread idle for ``idle_s`` ends, and :meth:`close`
    ends the idle ones at once, so a process that makes many runtimes does not keep a
    thread per past body; the pool grows again on the next :meth:`submit`."""

    def __init__(self, max_threads: int, idle_s: float = 30.0):
        self.max_threads = max_threads
        self.idle_s = idle_s
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._retire = 0  # busy threads that end after their body (close() was called)
        self._backlog = 0  # jobs queued while every thread was busy and none could start

    @property
    def threads(self) -> int:
        """How many worker threads are alive (busy or idle)."""
        return self._threads

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = False
            if self._idle > 0:
                self._idle -= 1  # an idle thread takes it
            elif self._threads < self.max_threads:
                self._threads += 1
                spawn = True
            else:  # queued until a busy thread is free
                self._backlog += 1
        self._queue.put(job)
        if spawn:
            threading.Thread(target=self._loop, name="chainlab-tool", daemon=True).start()

    def close(self) -> None:
        """End the idle threads now and the busy ones once their body returned (a thread
        hands its result to the loop before it counts itself idle, so a body that just
        returned may still count as busy here)."""
        with self._lock:
            retire, self._idle = self._idle, 0
            self._threads -= retire
            self._retire = self._threads
        for _ in range(retire):
            self._queue.put(None)

    def _loop(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle == 0:  # every idle thread is promised a queued job
                        continue
                    self._idle -= 1
                    self._threads -= 1
                return
            if job is None:  # close(): counted out already
                return
            job()
            del job
            with self._lock:
                if self._backlog > 0:  # a queued job is this thread's next
                    self._backlog -= 1
                    continue
                if self._retire > 0:
                    self._retire -= 1
                    self._threads -= 1
                    return
                self._idle += 1


class LocalExecutor:
    """Async tools on the event loop, sync tools in daemon worker threads."""

    def __init__(self, max_threads: int = 64):
        self._threads = _DaemonThreads(max_threads)

    def close(self) -> None:
        """End the idle worker threads (the runtime that made this executor calls it from
        ``aclose``; a later call starts threads again)."""
        self._threads.close()

    def submit(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Pending:
        """Start a SYNC tool body in a worker thread (asyncio only)."""
        pending = Pending(asyncio.get_running_loop())
        self._threads.submit(partial(pending._run, partial(tool.fn, **kwargs)))
        return pending

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        if tool.is_async:
            return await tool.fn(**kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: its own worker threads
            return await anyio.to_thread.run_sync(partial(tool.fn, **kwargs),
                                                  abandon_on_cancel=True)
        return await self.submit(tool, kwargs, ctx).result()


#: ``type(executor).call is AWAITS_ON_LOOP``: the executor's ``call`` of an ASYNC body only
#: awaits it on the running loop (a :class:`LocalExecutor`'s, not overridden), so the one
#: seam that calls tools (:func:`~chainlab.runtime.engine.attempt.call.seam.call_tool`) awaits
#: the body itself. An executor that runs bodies elsewhere (Dask) or wraps them is called.
AWAITS_ON_LOOP = LocalExecutor.call
