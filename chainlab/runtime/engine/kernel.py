"""The kernel: the one async driver of a run around its :class:`Scheduler`.

One step's life::

    flow.unblocked   (:mod:`.flow`) dependencies done (scheduler.done): condition, args,
                     confirmation or ready
    driver worker    (:mod:`.driver`) a worker takes it from the scheduler (slot, serial
                     key, pool units)
    Kind.run         (:mod:`.attempt`, one module per kind) the step's kind runs it; a
                     tool call (:mod:`.attempt.call`): its gate (confirmation, budget),
                     step_started, the call (:mod:`.attempt.call.seam`: write-ahead flush,
                     timeout, classification), its fate (:mod:`.attempt.call.fate`: retry,
                     in_doubt, failed), the outcome event, parking or the back-off timer
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
from typing import TYPE_CHECKING

from chainlab.errors import RunStateError, UnknownStepError
from chainlab.events import (
    RUN_TERMINAL,
    EventKind,
    RunStatus,
    StepStatus,
)
from chainlab.events.status import DrivePhase, StopReason
from chainlab.runtime.engine.attempt.kinds import KINDS
from chainlab.runtime.engine.compile import Node
from chainlab.runtime.engine.core import RunCore
from chainlab.runtime.engine.driver import drive, worker
from chainlab.runtime.engine.flow import finished, make_ready

if TYPE_CHECKING:
    from chainlab.runtime.engine.decisions import Decision

__all__ = ["Kernel"]

log = logging.getLogger("chainlab.runtime")
S = StepStatus
R = RunStatus
K = EventKind


class Kernel(RunCore):
    """Drives one run. Created by :class:`chainlab.runtime.Runtime`; used through ``Run``."""

    kinds = KINDS  # how each kind of step runs (attempt.kinds)

    @property
    def paused(self) -> bool:
        return self.sched.paused

    # ================================================================== driving
    async def drive(self, phase: DrivePhase = DrivePhase.START) -> None:
        """Run until the run is terminal (or, for a suspended run, until closed): the drive
        loop, :func:`.driver.drive`. Callers call :meth:`prepare_drive` first, when they
        schedule it."""
        await drive(self, phase)  # driver.drive: the loop itself

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

