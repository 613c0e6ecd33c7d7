"""``Hosting``: the base of :class:`~chainlab.runtime.runtime.Runtime` that holds its parts
(toolbox, store, executor, clock, the chains usable as sub-chains, its identity and
liveness as a driver) and its lifetime: the task group or asyncio tasks its runs are driven
in, store calls off the event loop (``run_io``), the runs it drives, and ``aclose``.

These are the :class:`~chainlab.runtime.run.RuntimeParts` a run's handle and a
driver's liveness use (a Hosting is exactly that), and most of the
:class:`~chainlab.runtime.coordination.Host` members coordination code uses (with
``resume``, from :mod:`chainlab.runtime.resuming`). Every way a run begins is in
:mod:`chainlab.runtime.launching`; reading runs and deciding on them in
:mod:`chainlab.runtime.runtime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import weakref
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self, cast

import anyio

from chainlab.errors import StaleEpochError
from chainlab.events import RUN_TERMINAL, RunState, RunStatus
from chainlab.events.status import DrivePhase
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.preparing import Prepared
from chainlab.runtime.run import Run, RunOwner
from chainlab.tools import Toolbox, default_toolbox

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain, RunOptions
    from chainlab.runtime.history.estimates import History
    from chainlab.store.base import RunRecord, Store

__all__ = ["Hosting", "new_run_id"]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class Hosting:
    """A runtime's parts and lifetime (the constructor of
    :class:`~chainlab.runtime.runtime.Runtime`, which says what its arguments mean)."""

    def __init__(
        self,
        toolbox: Toolbox | None = None,
        store: Store | None = None,
        *,
        executor: Executor | None = None,
        clock: Clock | None = None,
        chains: Mapping[str, Chain] | None = None,
        id_factory: Callable[[], str] = new_run_id,
        heartbeat_s: float = 2.0,
        stale_after_s: float = 10.0,
        mailbox_poll_s: float = 0.15,
    ):
        self.toolbox = toolbox if toolbox is not None else default_toolbox
        if store is None:
            from chainlab.store.sqlite import SQLiteStore

            store = SQLiteStore()
        self.store = store
        self.executor = executor or LocalExecutor()
        self._own_executor = executor is None  # made here: its idle threads end at aclose
        self.clock = clock or SystemClock()
        self._chains: dict[str, Chain] = dict(chains or {})
        self.id_factory = id_factory
        # this runtime as a driver: heartbeats, mailbox, who counts as alive (DESIGN §13)
        self.liveness = Liveness(heartbeat_s=heartbeat_s, stale_after_s=stale_after_s,
                                 poll_s=mailbox_poll_s)
        # runs that may still move (strongly held) and finished ones (only while someone
        # else holds the handle: a long-lived runtime must not keep every run in memory)
        self._active: dict[str, Run] = {}
        self._finished: weakref.WeakValueDictionary[str, Run] = weakref.WeakValueDictionary()
        self._scopes: dict[str, anyio.CancelScope] = {}  # each driven run's drive
        self._prepared = Prepared()  # compiled chains and release orders, cached
        self._tasks: set[Any] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._history: History | None = None  # durations seen, for the release order

    @property
    def chains(self) -> ChainMap[str, Chain]:
        """Chains usable as sub-chains: those given here (assignments land here) over the
        toolbox's (read live)."""
        return ChainMap(self._chains, self.toolbox.chains)

    # ------------------------------------------------------------------ hosting
    async def __aenter__(self) -> Self:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        await self.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        result = await self._tg_cm.__aexit__(*exc)
        self._tg = None
        return result

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run ``coro_fn()`` in the background in this runtime (its task group, or a task on
        the running asyncio loop); :meth:`aclose` stops it."""
        if self._tg is not None:
            self._tg.start_soon(coro_fn)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "this event loop is not asyncio: use `async with Runtime(...) as runtime:` so "
                "runs have a task group to live in"
            ) from None
        task = loop.create_task(coro_fn())
        self._tasks.add(task)  # asyncio keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop driving every run of this runtime (their state stays in the store). A
        decision being answered is answered first (its requester waits for that answer)."""
        await self.liveness.answers_sent()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self._active.clear()
        await self.toolbox.aclose()  # its MCP sessions (they reopen on the next call)
        if self._own_executor and isinstance(self.executor, LocalExecutor):
            self.executor.close()  # idle worker threads end (they start again when needed)

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``, a store read or write: in a worker thread when the store's
        calls block on I/O (``store.blocking``), else right here."""
        if self.store.blocking:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    def driven(self, run_id: str) -> Run | None:
        """The handle of ``run_id`` if this runtime drives it right now, else None."""
        run = self._active.get(run_id)
        return run if run is not None and run.driving else None

    # ------------------------------------------------------------------ driving
    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background: the one way every run begins (a
        start, a resume, a fork, a rollback, a worker's claim). Marked as driven before this
        returns, so a control call in between never starts a second driver; nothing here
        awaits."""
        kernel = run._kernel
        assert kernel is not None
        self._active[run.run_id] = run
        kernel.prepare_drive()
        self.spawn(lambda: self._drive(run, phase))

    async def _drive(self, run: Run, phase: DrivePhase) -> None:
        kernel = run._kernel
        assert kernel is not None
        with anyio.CancelScope() as scope:
            self._scopes[run.run_id] = scope  # release() stops this drive alone
            try:
                async with self.liveness.attend(self, run):  # beat, mailbox
                    await kernel.drive(phase)
            finally:
                if self._scopes.get(run.run_id) is scope:
                    del self._scopes[run.run_id]
        if self._active.get(run.run_id) is not run:
            return
        if isinstance(kernel.error, StaleEpochError) or scope.cancelled_caught:
            del self._active[run.run_id]  # fenced, or released: get_run reads the store
        elif kernel.state.status in RUN_TERMINAL:
            del self._active[run.run_id]
            self._finished[run.run_id] = run

    def release(self, run_id: str) -> bool:
        """Stop driving ``run_id`` here while it is suspended (it waits for a person and
        holds nothing: no call, no timer), leaving it in the store for whoever takes it up
        next (its driver row goes, so a decision on it is left to the store). A fleet
        worker releases every run that suspends: a suspended run holds no worker. Returns
        False (and does nothing) when the run is not driven here or not suspended."""
        run = self._active.get(run_id)
        scope = self._scopes.get(run_id)
        kernel = run._kernel if run is not None else None
        if kernel is None or scope is None or kernel.state.status != RunStatus.SUSPENDED \
                or kernel.background or kernel.sched.running or kernel.timers:
            return False
        scope.cancel()
        return True

    def _new_kernel(
        self,
        run_id: str,
        graph: Any,
        state: RunState,
        opts: RunOptions,
        context: dict[str, Any],
        *,
        epoch: int,
        priority: Callable[[str], float] | None = None,
    ) -> Kernel:
        return Kernel(
            run_id=run_id,
            graph=graph,
            state=state,
            options=opts,
            context=context,
            store=self.store,
            executor=self.executor,
            clock=self.clock,
            epoch=epoch,
            toolbox=graph.toolbox,  # the runtime's, or its overlay with the run's agent
            priority=priority,
        )

    def _handle(self, chain: Chain, kernel: Kernel, record: RunRecord) -> Run:
        """The live handle of a run this runtime is about to drive. (A Hosting is always a
        Runtime, its one subclass at the end, which is the :class:`RunOwner` the handle
        holds: Runtime.get_run makes handles of itself, checked there.)"""
        return Run(cast(RunOwner, self), chain, kernel, record)
