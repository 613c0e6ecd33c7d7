"""The kernel: the one async driver of a run around its :class:`Scheduler`.

One step's life::

    flow.unblocked   (:mod:`.flow`) dependencies done (scheduler.done): condition, args,
                     confirmation or ready
    driver worker    (:mod:`.driver`) a worker takes it from the scheduler (slot, serial
                     key, pool units)
    attempt.life.run (the :mod:`.attempt` package) the attempt's whole life: step_started,
                     the call (:mod:`.attempt.call`: write-ahead flush, timeout,
                     classification), its fate (:mod:`.attempt.fate`: retry, in_doubt,
                     failed), the outcome event, parking or the back-off timer
    flow.finished    a terminal state: the scheduler releases or skips its dependants
    Kernel.emit      every change is an event: folded into the run state, appended to the
                     store, handed to subscribers (widgets, progress, tests)
    Kernel.commit    the durability barrier (``store.flush``) for this run and epoch

* This class holds one run's state (its scheduler, args, timers, workers, the stop in
  progress) and is what the Runtime and ``Run`` call: :meth:`Kernel.drive` (the loop is
  :func:`.driver.drive`), :meth:`Kernel.apply`, the controls (pause, step, cancel,
  rollback) and the queries.
* A person's decisions (:mod:`.decisions`) come in through :meth:`Kernel.apply`, recovery
  (:mod:`.recovery`) through :mod:`.flow`; the saga (:mod:`.saga`) runs when the run stops.
* The first error that must stop the driver (StaleEpochError, a StoreError, a chainlab bug)
  is kept as ``error`` and ``run.wait()`` raises it, never a group of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunStateError, UnknownStepError
from chainlab.events import (
    RUN_END_KINDS,
    RUN_TERMINAL,
    Event,
    EventKind,
    RunState,
    RunStatus,
    StepStatus,
)
from chainlab.events.status import DrivePhase, StopReason
from chainlab.plan.schema import RunOptions
from chainlab.runtime.engine.compile import Graph, Node
from chainlab.runtime.engine.driver import drive, worker
from chainlab.runtime.engine.flow import finished, make_ready
from chainlab.runtime.engine.scheduler import Scheduler

if TYPE_CHECKING:
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.decisions import Decision
    from chainlab.runtime.engine.executors import Executor
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["Kernel"]

log = logging.getLogger("chainlab.runtime")
S = StepStatus
R = RunStatus
K = EventKind
_EMPTY: dict[str, Any] = {}
_new_event = tuple.__new__


class Kernel:
    """Drives one run. Created by :class:`chainlab.runtime.Runtime`; used through ``Run``."""

    def __init__(
        self,
        *,
        run_id: str,
        graph: Graph,
        state: RunState,
        options: RunOptions,
        context: dict[str, Any],
        store: Store,
        executor: Executor,
        clock: Clock,
        epoch: int,
        toolbox: Toolbox,
        priority: Callable[[str], float] | None = None,
    ):
        self.run_id = run_id
        self.graph = graph
        self.nodes = graph.nodes
        self.state = state
        self.steps = state.steps
        self.options = options
        self.context = context
        self.store = store
        self.executor = executor
        self.clock = clock
        self.epoch = epoch
        self.toolbox = toolbox
        self.seq = state.last_seq
        self.sched = Scheduler(
            graph.topology,
            max_concurrency=1 if options.mode == "sequential" else options.max_concurrency,
            pools=options.pools,
            breakpoints=options.breakpoints,
            priority=priority,
        )
        self.args: dict[str, dict[str, Any]] = {}
        self.workers = 0
        self.idle: list[anyio.Event] = []
        self.timers: dict[str, anyio.CancelScope] = {}
        self.jobs: dict[str, Any] = {}  # step id -> the waiter of a waiting remote job
        self.calls: dict[int, anyio.CancelScope] = {}  # worker scopes
        # one entry per timed-out body still running (a step retried twice has two)
        self.background: list[str] = []
        self.stopping: StopReason | None = None
        self.stop_reason: str = ""
        self.retry_failed = True  # a rollback retries compensations that failed before
        self.closing = False
        self.driving = False
        self.error: BaseException | None = None
        self.subscribers: list[Callable[[Event], None]] = []
        self.on_end: Callable[[], None] | None = None  # called once, when the run first ends
        self._changed = anyio.Event()
        self._settled = anyio.Event()
        self.settled_status: RunStatus | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self.drive_done = anyio.Event()
        self.drive_done.set()
        self.to_reconcile: list[Node] = []  # interrupted calls the driver reconciles
        self.deferred_timers: list[tuple[Node, float]] = []
        # what each step is expected to spend (cost, tokens, seconds), for options.budget
        self.budget_estimates: dict[str, dict[str, float]] = {}

    @property
    def paused(self) -> bool:
        return self.sched.paused

    # ================================================================== events
    def emit(
        self,
        kind: EventKind,
        step_id: str | None = None,
        attempt: int | None = None,
        payload: dict[str, Any] = _EMPTY,
        run_status: RunStatus | None = None,
    ) -> Event:
        """Record one change: fold it, append it to the store, tell subscribers."""
        if kind.__class__ is not EventKind:
            raise TypeError(f"emit takes an EventKind, got {kind!r}")
        self.seq = seq = self.seq + 1
        run_id, epoch = self.run_id, self.epoch
        # tuple.__new__ is Event._make without its Python frame (three events per step)
        ev = _new_event(Event, (run_id, seq, self.clock.now(), epoch, kind, step_id, attempt,
                                payload))
        self.state.apply(ev)
        self.store.append(run_id, epoch, (ev,), run_status)
        if self.subscribers:
            self._notify(ev)
        if kind in RUN_END_KINDS and self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end()
        return ev

    def _notify(self, ev: Event) -> None:
        for cb in list(self.subscribers):
            try:
                cb(ev)
            except Exception:  # a broken subscriber must not break the run
                log.exception("event subscriber %r failed on %s; removing it", cb, ev)
                self.subscribers.remove(cb)

    def poke(self) -> None:
        self._changed.set()

    async def wait_changed(self) -> None:
        """Wait for the next :meth:`poke` (the drive loop looks again after each)."""
        await self._changed.wait()
        self._changed = anyio.Event()

    # ================================================================== driving
    async def drive(self, phase: DrivePhase = DrivePhase.START) -> None:
        """Run until the run is terminal (or, for a suspended run, until closed): the drive
        loop, :func:`.driver.drive`. Callers call :meth:`prepare_drive` first, when they
        schedule it."""
        await drive(self, phase)  # driver.drive: the loop itself

    def prepare_drive(self) -> None:
        """Mark the run as driven from the moment a driver is scheduled (not when it first
        runs), so a control call in between never starts a second driver."""
        self.driving = True
        self.drive_done = anyio.Event()

    async def commit(self) -> None:
        """Wait until every event emitted so far is durable (DESIGN §7). Raises
        StaleEpochError when this driver was fenced, StoreError when the store failed."""
        await self.store.flush(self.run_id, self.epoch)

    def commit_inline(self) -> None:
        """:meth:`commit` without giving up the loop (the thread waits for the store's
        writer): for a caller that must not suspend, on a store read inline."""
        self.store.flush_sync(self.run_id, self.epoch)

    async def flush_and_signal(self) -> None:
        await self.store.flush(self.run_id, self.epoch)
        self.signal_settled()

    def signal_settled(self) -> None:
        self.settled_status = self.state.status
        self._settled.set()
        self._settled = anyio.Event()

    async def wait_settled(self) -> None:
        await self._settled.wait()

    # ================================================================== decisions
    def apply(self, decision: Decision) -> None:
        """Record a person's decision (and ``run_resumed`` when it moves a suspended run
        on) before its effects, then let the scheduler act on it."""
        if self.state.status == R.SUSPENDED:
            self.emit(K.RUN_RESUMED, payload={"reason": "decision"}, run_status=R.RUNNING)
        for kind, attempt, payload in decision.events:
            self.emit(kind, decision.step_id, attempt, payload)
        node = self.nodes[decision.step_id]
        if decision.then == "ready":
            make_ready(self, node, decision.args)
        else:
            finished(self, node)
        self.wake_workers(0)  # no worker is about to look: wake one for what became ready
        self.poke()

    # ================================================================== dispatch
    def wake_workers(self, reserve: int) -> None:
        """Make sure enough workers look at the scheduler (``reserve``: workers already
        about to look, e.g. the caller)."""
        sched = self.sched
        want = sched.n_ready - reserve
        if want <= 0 or self.tg is None or not sched.is_active():
            return
        while want > 0 and self.idle:
            self.idle.pop().set()
            want -= 1
        while want > 0 and self.workers < self.sched.max_concurrency:
            self.workers += 1
            self.tg.start_soon(worker, self)
            want -= 1

    # ================================================================== control
    def start_stopping(self, why: StopReason, reason: str) -> None:
        """Release nothing new; cancel back-off timers; running steps finish."""
        if self.stopping:
            return
        self.stopping = why
        self.stop_reason = reason
        self.sched.stop()
        self.settled_status = None  # wait() must wait for the end of the stop, not return
        # the status (e.g. suspended) it had before
        for scope in list(self.timers.values()):
            scope.cancel()
        self.poke()

    async def begin_rollback(self) -> bool:
        """Ask for a rollback: a run still going stops first (running calls are cancelled)
        and rolls back as it ends (returns False: the current driver does it); a finished
        run needs a new drive in the ROLLBACK phase (returns True, once its previous drive
        has unwound)."""
        if self.driving and self.state.status not in RUN_TERMINAL:
            self.start_stopping(StopReason.ROLLBACK, "rollback requested")
            for scope in list(self.calls.values()):
                scope.cancel()
            return False
        # set first, so a wait() that starts now waits for the rollback's end
        self.stopping = StopReason.ROLLBACK
        self.sched.stop()
        self.stop_reason = "rollback requested"
        self.retry_failed = True
        self.settled_status = None
        await self.drive_done.wait()  # a finished run's driver may still be winding down
        return True

    def pause_now(self, reason: str = "user") -> None:
        self.sched.pause()
        if self.state.status in (R.RUNNING, R.SUSPENDED):
            self.emit(K.RUN_PAUSED, payload={"reason": reason}, run_status=R.PAUSED)
        self.poke()

    def unpause(self) -> None:
        if not self.sched.paused:
            return
        self.sched.unpause()
        if self.state.status == R.PAUSED:
            self.emit(K.RUN_RESUMED, payload={"reason": "unpause"}, run_status=R.RUNNING)
        self.wake_workers(0)
        self.poke()

    def step_once(self, step_id: str | None) -> str:
        ready = self.ready_steps()
        if step_id is not None:
            self.require_step(step_id)
            if step_id not in ready:
                raise RunStateError(
                    f"step {step_id!r} is {self.steps[step_id].status}, not ready; "
                    f"ready now: {', '.join(ready) or 'none'}",
                    run_id=self.run_id,
                )
        elif not ready:
            raise RunStateError(
                f"no step is ready to run (waiting: {', '.join(self.waiting()) or 'none'})",
                run_id=self.run_id,
            )
        if not self.sched.paused:
            self.pause_now()
        target = step_id or ready[0]
        self.sched.step(target)
        self.wake_workers(0)
        self.poke()
        return target

    def cancel(self) -> None:
        if self.state.status in RUN_TERMINAL:
            raise RunStateError(
                f"run is already {self.state.status}",
                run_id=self.run_id,
                status=str(self.state.status),
            )
        self.start_stopping(StopReason.CANCELLED, "cancelled by a person")
        for scope in list(self.calls.values()):
            scope.cancel()

    # ================================================================== queries
    def require_step(self, step_id: str) -> Node:
        node = self.nodes.get(step_id)
        if node is None:
            raise UnknownStepError(step_id, self.nodes, run_id=self.run_id)
        return node

    def ready_steps(self) -> list[str]:
        return self.sched.get_ready()

    def waiting(self) -> dict[str, str]:
        return self.state.waiting()
