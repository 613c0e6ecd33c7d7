"""Where a notebook's runs are driven: an asyncio loop on a thread of its own (issue 40).

Every cell runs on the kernel's main loop, and a cell that computes (a DataFrame, a plot,
Graphviz, the next ``%chain run``) holds that loop until it returns. A run driven there
waited for the notebook: its first step started 114-384 ms after ``run_started`` when five
runs were started by one Run All, a trivial step took 270-430 ms, and the widget's badge
said "succeeded" a second after the run ended. So the session's runtimes drive their runs
on :class:`RunLoop`, a daemon thread running its own asyncio loop: a run moves on while
the kernel executes later cells, and its widget is redrawn from that thread (ipykernel
sends a message from any thread through its IOPub thread, to the cell that started the
run: the context of the call that started it is kept).

One rule keeps this safe: **a run's state and its widget are changed only on the run's
loop**. :class:`LoopRuntime` (and the handles it makes, :class:`LoopRun`,
:class:`LoopWatchedRun`) hand every coroutine of the async API to the home loop when it is
awaited from another loop (``await run.wait()`` in a cell, ``await run.approve(...)``), the
synchronous calls that change a run (``set_breakpoints``) too, and ``spawn`` always
schedules there; the widgets hand the front end's clicks and slider moves over with
:func:`chainlab.jupyter._loop.call_on`; the magics wait for :meth:`RunLoop.call`. Nothing on
the run's loop ever waits for the kernel's main thread, so those waits cannot deadlock.

Outside a kernel (plain IPython, the Python API tests) the session drives runs on the
caller's loop, as any script does; ``NotebookSession(threaded=True)`` asks for the thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any, ClassVar, TypeVar

from chainlab.jupyter._loop import RUN_ON_TIMEOUT_S, run_on
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.runtime.host import Host
from chainlab.runtime.runtime import Run, Runtime

__all__ = ["LoopHost", "LoopRun", "LoopRuntime", "LoopWatchedRun", "RunLoop", "loop_of"]

T = TypeVar("T")


class RunLoop:
    """An asyncio event loop running forever on a daemon thread (``chainlab-runs``).

    :meth:`call` runs a function there and waits for it (from any other thread);
    :meth:`hop` awaits a coroutine there from another loop without blocking that loop.
    Called on the loop's own thread, both simply call."""

    _shared: ClassVar[RunLoop | None] = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "chainlab-runs"):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(ready,), name=name,
                                       daemon=True)
        self.thread.start()
        ready.wait()

    @classmethod
    def shared(cls) -> RunLoop:
        """The process's run loop (started on first use)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared.loop.is_closed():
                cls._shared = cls()
            return cls._shared

    def _main(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def here(self) -> bool:
        """True on the loop's own thread."""
        return threading.get_ident() == self.thread.ident

    def call(self, fn: Callable[..., T], *args: Any, timeout: float = RUN_ON_TIMEOUT_S) -> T:
        """``fn(*args)`` on the loop's thread and its result (:func:`run_on`): blocks the
        calling thread until then; called on the loop's own thread, simply calls."""
        if self.here():
            return fn(*args)
        return run_on(self.loop, fn, *args, timeout=timeout)

    async def hop(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Await ``make()`` on this loop from another one (cancelling the wait cancels it)."""
        if self.here():
            return await make()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), self.loop))

    def spawn(self, coro_fn: Callable[[], Coroutine[Any, Any, Any]],
              keep: set[Any]) -> None:
        """Run ``coro_fn()`` as a task of this loop (from any thread); ``keep`` holds it
        (asyncio keeps only weak references to tasks) until it ends."""
        def start() -> None:
            task = self.loop.create_task(coro_fn())
            keep.add(task)
            task.add_done_callback(keep.discard)

        if self.here():
            start()
        else:
            self.loop.call_soon_threadsafe(start)


def loop_of(run: Any) -> asyncio.AbstractEventLoop | None:
    """The loop ``run`` is driven on when its runtime is a :class:`LoopRuntime`, else None."""
    home = getattr(getattr(run, "runtime", None), "home", None)
    return home.loop if isinstance(home, RunLoop) else None


# --------------------------------------------------------------------------- handing over
def _home(obj: Any) -> RunLoop | None:
    home = getattr(obj, "home", None) or getattr(getattr(obj, "runtime", None), "home", None)
    return home if isinstance(home, RunLoop) else None


def _coroutine(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def on_home(self: Any, *args: Any, **kwargs: Any) -> Any:
        home = _home(self)
        if home is None or home.here():
            return await fn(self, *args, **kwargs)
        return await home.hop(lambda: fn(self, *args, **kwargs))

    return on_home


def _generator(fn: Callable[..., AsyncGenerator[Any, None]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def on_home(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        home = _home(self)
        source = fn(self, *args, **kwargs)
        if home is None or home.here():
            async for item in source:
                yield item
            return
        try:
            while True:
                try:
                    item = await home.hop(source.__anext__)  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await home.hop(source.aclose)

    return on_home


def _blocking(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def on_home(self: Any, *args: Any, **kwargs: Any) -> T:
        home = _home(self)
        if home is None:
            return fn(self, *args, **kwargs)
        return home.call(functools.partial(fn, self, *args, **kwargs))

    return on_home


def on_home_loop(*blocking: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: every public coroutine and async generator method (inherited ones
    too) runs on the instance's home loop when awaited from another loop; the synchronous
    methods named in ``blocking`` run there too (the caller waits)."""
    def decorate(cls: type[T]) -> type[T]:
        for name in dir(cls):
            if name.startswith("_"):
                continue
            attr = inspect.getattr_static(cls, name)
            if inspect.iscoroutinefunction(attr):
                setattr(cls, name, _coroutine(attr))
            elif inspect.isasyncgenfunction(attr):
                setattr(cls, name, _generator(attr))
            elif name in blocking:
                setattr(cls, name, _blocking(attr))
        return cls

    return decorate


@on_home_loop("set_breakpoints")
class LoopRun(Run):
    """A :class:`~chainlab.runtime.Run` driven on its runtime's :class:`RunLoop`: awaited
    from another loop (a cell), its coroutines run there."""


@on_home_loop("start", "stop")
class LoopWatchedRun(WatchedRun):
    """A :class:`~chainlab.runtime.coordination.watching.WatchedRun` followed on its
    runtime's :class:`RunLoop`."""


class LoopHost(Host):
    """The :class:`~chainlab.runtime.host.Host` of a :class:`LoopRuntime`: its background
    tasks (every run's drive, its liveness, a watched run's following) run on the runtime's
    ``home`` loop, whichever thread asks, and the live handles it makes are
    :class:`LoopRun`."""

    def __init__(self, owner: LoopRuntime, *args: Any, **kwargs: Any):
        super().__init__(owner, *args, **kwargs)
        self.home = owner.home

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run ``coro_fn()`` on the home loop, whichever thread asks."""
        self.home.spawn(coro_fn, self._tasks)

    def handle(self, chain: Any, kernel: Any, record: Any) -> Run:
        """A :class:`LoopRun`: its coroutines, awaited from a cell, run on the home loop."""
        return LoopRun(self.owner, chain, kernel, record)


@on_home_loop()
class LoopRuntime(Runtime):
    """A :class:`~chainlab.runtime.Runtime` whose runs are driven on ``home`` (a
    :class:`RunLoop`): ``start``, ``resume``, ``fork``, ``decide``... awaited from another
    loop run there, and the handles it makes are :class:`LoopRun` / :class:`LoopWatchedRun`
    (its host is a :class:`LoopHost`)."""

    host_type = LoopHost

    def __init__(self, *args: Any, home: RunLoop, **kwargs: Any):
        self.home = home  # (before the parts are made: the host drives runs there)
        super().__init__(*args, **kwargs)

    def watch_run(self, run_id: str) -> WatchedRun:
        """A :class:`LoopWatchedRun` (followed on the home loop)."""
        from chainlab.events import read_run

        record, events, state = read_run(self.store, run_id)
        return LoopWatchedRun(self.host, record, events, state)
