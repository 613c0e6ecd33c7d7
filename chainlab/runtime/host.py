"""``Host``: what a :class:`~chainlab.runtime.Runtime` is made of and how long it lives, the
part its other parts hold (issue 44: the Runtime is a facade over its parts, the way
Temporal's ``Worker`` holds its activity and workflow workers).

* its parts: the toolbox, the store, the executor, the clock, the chains usable as
  sub-chains, how run ids are made, its identity and liveness as a driver
  (:class:`~chainlab.runtime.coordination.liveness.Liveness`), the caches of compiled chains
  (:class:`~chainlab.runtime.preparing.Prepared`) and the durations seen (``history``);
* its lifetime: the task group or asyncio tasks its runs are driven in (``spawn``), store
  calls off the event loop (``run_io``), ``aclose``;
* the runs it drives: their handles (``driven``, ``active``, ``get_run``), and driving a run:
  ``launch``, the one tail every run's drive begins with (a start, a resume, a fork, a
  rollback, a worker's claim), and ``release``;
* what every new drive is made of: its kernel (``new_kernel``), its handle (``handle``), its
  release order (``order``) and the head of its log (``open_log``).

Every way a new run begins is in :mod:`chainlab.runtime.starts`, every way a stored run is
taken up in :mod:`chainlab.runtime.takeovers`; both hold a Host and nothing else of the
runtime. A handle made here holds the Runtime that owns this Host (``owner``): front ends
reach the whole runtime through ``run.runtime``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import weakref
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import StaleEpochError
from chainlab.events import RUN_TERMINAL, EventKind, RunState, RunStatus
from chainlab.events.status import DrivePhase
from chainlab.plan.schema import Chain
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.compile import compile_chain
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.history.estimates import budget_estimates, estimate, history
from chainlab.runtime.preparing import Prepared
from chainlab.runtime.run import Run, RunOwner
from chainlab.tools import Toolbox, default_toolbox

if TYPE_CHECKING:
    from chainlab.plan.schema import RunOptions
    from chainlab.runtime.engine.compile import Graph
    from chainlab.runtime.history.estimates import Estimate, History
    from chainlab.store.base import RunRecord, Store
    from chainlab.tracing.tracer import Tracing

__all__ = ["Host", "new_run_id"]


def new_run_id() -> str:
    """A new run id: the time it was made and six random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class Host:
    """A runtime's parts, its lifetime and the runs it drives (the arguments are
    :class:`~chainlab.runtime.Runtime`'s, which says what they mean; ``owner`` is that
    Runtime, the one the handles made here hold)."""

    def __init__(
        self,
        owner: RunOwner,
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
        self.owner = owner
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
        #: compiled chains and release orders, cached
        self.prepared = Prepared()
        self._tasks: set[Any] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        #: durations seen, for the release order and budgets (read when first needed)
        self.history: History | None = None
        #: how its runs are traced (set by the Runtime; None: not traced)
        self.tracing: Tracing | None = None

    @property
    def chains(self) -> ChainMap[str, Chain]:
        """Chains usable as sub-chains: those given here (assignments land here) over the
        toolbox's (read live)."""
        return ChainMap(self._chains, self.toolbox.chains)

    # ------------------------------------------------------------------ lifetime
    async def enter(self) -> None:
        """Open the task group the runs are driven in (``async with runtime``)."""
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()

    async def exit(self, *exc: Any) -> bool | None:
        """Stop every run (:meth:`aclose`) and close the task group."""
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

    # ------------------------------------------------------------------ the runs it holds
    def driven(self, run_id: str) -> Run | None:
        """The handle of ``run_id`` if this runtime drives it right now, else None."""
        run = self._active.get(run_id)
        return run if run is not None and run.driving else None

    def active(self, run_id: str) -> Run | None:
        """The handle of ``run_id`` if this runtime holds it live (driven, or at rest here
        with its kernel: suspended, or taken over after it ended), else None."""
        return self._active.get(run_id)

    def known(self, run_id: str) -> Run | None:
        """The handle this runtime made for ``run_id``: held live, or finished here while
        someone still holds it; else None."""
        return self._active.get(run_id) or self._finished.get(run_id)

    def keep(self, run: Run) -> None:
        """Hold ``run`` live without driving it (a run taken over after it ended: its
        rollback may still be asked for)."""
        self._active[run.run_id] = run

    def get_run(self, run_id: str) -> Run:
        """See :meth:`chainlab.runtime.Runtime.get_run`."""
        live = self.known(run_id)
        if live is not None and not live.fenced:  # a fenced handle is nobody's live run
            return live
        record = self.store.get_run(run_id)
        return Run(self.owner, Chain.from_dict(record.chain), None, record)

    # ------------------------------------------------------------------ driving
    def launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background: the one way every run begins (a
        start, a resume, a fork, a rollback, a worker's claim). Marked as driven before this
        returns, so a control call in between never starts a second driver; nothing here
        awaits."""
        kernel = run._kernel
        assert kernel is not None
        self._active[run.run_id] = run
        if self.tracing is not None:  # a subscriber on this side: spans from its events
            from chainlab.tracing.spans import attach

            attach(self.tracing, run.run_id, run.record, kernel.state, self.store,
                   kernel.subscribers, taken_up=phase != DrivePhase.START)
        kernel.prepare_drive()
        self.spawn(lambda: self._drive(run, phase))

    async def _drive(self, run: Run, phase: DrivePhase) -> None:
        kernel = run._kernel
        assert kernel is not None
        with anyio.CancelScope() as scope:
            self._scopes[run.run_id] = scope  # release() stops this drive alone
            try:
                async with self.liveness.attend(run):  # beat, mailbox
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
        """See :meth:`chainlab.runtime.Runtime.release`."""
        run = self._active.get(run_id)
        scope = self._scopes.get(run_id)
        kernel = run._kernel if run is not None else None
        if kernel is None or scope is None or kernel.state.status != RunStatus.SUSPENDED \
                or kernel.background or kernel.sched.running or kernel.timers:
            return False
        scope.cancel()
        return True

    # ------------------------------------------------------------------ a drive's making
    def new_kernel(
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
        """The kernel of a run this runtime is about to drive, over its parts."""
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

    def handle(self, chain: Chain, kernel: Kernel, record: RunRecord) -> Run:
        """The live handle of a run this runtime is about to drive (it holds the owner)."""
        return Run(self.owner, chain, kernel, record)

    async def order(self, graph: Graph, chain_name: str, opts: RunOptions
                    ) -> tuple[Callable[[str], float] | None, dict[str, Any]]:
        """The release order of a new run, and what ``run_started`` records of it (with a
        budget: what each step is expected to spend)."""
        if (opts.priority != "declaration" or opts.budget is not None) \
                and self.history is None:
            self.history = await self.run_io(history, self.store)
        priority, order = self.prepared.release_order(graph, chain_name, opts.priority,
                                                      self.history)
        if opts.budget is not None:  # what each step is expected to spend, recorded
            order = {**order, "budget_estimates": budget_estimates(graph.nodes, chain_name,
                                                                   self.history)}
        return priority, order

    def open_log(self, kernel: Kernel, chain: Chain, graph: Graph, record: RunRecord,
                 order: dict[str, Any], lineage: Mapping[str, Any] | None = None) -> None:
        """Emit ``run_started`` (a new run's first event), and learn the run's durations
        when it ends (before ``wait()`` returns, so the next start knows them)."""
        if self.history is not None:
            learned, state = self.history, kernel.state
            kernel.on_end = lambda: learned.add_run(chain.name, state.attempts)
        kernel.emit(
            EventKind.RUN_STARTED,
            payload={
                "chain": chain.name,
                "steps": len(graph.nodes),
                "context_keys": sorted(record.context),
                "options": record.options,
                **order,
                **(lineage or {}),
                **self.liveness.signature(),
            },
            run_status=RunStatus.RUNNING,
        )

    def estimates(self, chain: Chain) -> list[Estimate]:
        """The expected duration of each step of ``chain`` (see
        :meth:`chainlab.runtime.Runtime.estimates`); a blocking read of the history the
        first time."""
        if self.history is None:
            self.history = history(self.store)
        graph = compile_chain(chain, self.toolbox, self.chains, chain.options)
        return list(estimate(graph.nodes, chain.name, self.history).values())
