"""``Run``: the handle every front end uses. Its read side (status, outputs, the stored log,
``state_at``, the views) is :class:`~chainlab.runtime.run_view.RunView`; here are what needs
the run driven by this process: waiting for it, the control verbs (pause, step, cancel,
approve, reject, resolve, jobs, rollback, breakpoints, faults) and the live event stream.

A handle holds the runtime that made it as a :class:`RunOwner`: what its verbs and the front
ends use of a :class:`~chainlab.runtime.Runtime` (which satisfies it), named here so that
the handle sits below the runtime that makes handles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chainlab.errors import RunNotActiveError
from chainlab.events import RUN_END_KINDS, RUN_TERMINAL, Event, RunStatus
from chainlab.events.status import DrivePhase
from chainlab.runtime.engine import decisions
from chainlab.runtime.engine.budget import budget_of
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.run_view import RunResult, RuntimeParts, RunView

if TYPE_CHECKING:
    from chainlab.events import RunState
    from chainlab.plan.schema import Chain
    from chainlab.store.base import RunRecord

__all__ = ["Run", "RunOwner"]


class RunOwner(RuntimeParts, Protocol):
    """What a run's handle, and a front end through ``run.runtime``, uses of the runtime
    that made it besides its parts: a decision wherever the run is driven, a stored run
    taken up, a run's handle, and driving a run on (a rollback)."""

    async def decide(self, run_id: str, step_id: str, action: str, *, by: str | None = None,
                     note: str | None = None, reason: str | None = None,
                     args: dict[str, Any] | None = None, output: Any = None,
                     retry: bool = False, fail: bool = False, timeout: float = 10.0,
                     budget: dict[str, Any] | None = None) -> str:
        """Decide a step wherever its run is driven (:meth:`Runtime.decide`)."""

    async def resume(self, run_id: str, *, check: Callable[[RunState], None] | None = None,
                     force: bool = False) -> Run:
        """Take the run over in this process (check-and-claim)."""

    def get_run(self, run_id: str) -> Run:
        """The run's handle: live if driven here, else a view of the store."""

    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background (the one way a run is driven)."""


class Run(RunView):
    """A run's handle: status, outputs, control, events and views.

    Control methods are coroutines and need the run to be driven by this process
    (``runtime.start`` or ``runtime.resume``); otherwise they raise RunNotActiveError.
    """

    runtime: RunOwner

    def __init__(self, runtime: RunOwner, chain: Chain, kernel: Kernel | None,
                 record: RunRecord):
        super().__init__(runtime, chain, kernel, record)

    # ------------------------------------------------------------------ step-through
    def ready_steps(self) -> list[str]:
        """Steps released and waiting for a slot (or the Step button), in release order."""
        return self._k().ready_steps() if self._kernel else []

    @property
    def paused(self) -> bool:
        return self._kernel is not None and self._kernel.sched.paused

    # ------------------------------------------------------------------ waiting
    async def wait(self) -> RunResult:
        """Return when the run is terminal or suspended (a paused run keeps waiting).
        Raises the error that stopped the run's driver (e.g. StaleEpochError)."""
        k = self._k()
        while True:
            if k.error is not None:
                raise k.error
            settled = k.settled_status
            if (
                settled is not None
                and (settled in RUN_TERMINAL or settled == RunStatus.SUSPENDED)
                and settled == k.state.status
            ):
                return self.result()
            await k.wait_settled()

    # ------------------------------------------------------------------ control
    def _k(self) -> Kernel:
        if self._kernel is None:
            raise RunNotActiveError(
                f"run {self.run_id!r} is not driven by this process; "
                f"`run = await runtime.resume({self.run_id!r})` first",
                run_id=self.run_id,
                status=str(self.status),
            )
        return self._kernel

    def _for_fleet(self) -> bool:
        """A stored handle of a run that belongs to a queue: a decision on it is left to the
        worker fleet, never applied by taking the run over here (DESIGN §19)."""
        return self._kernel is None and self.record.queue is not None

    async def pause(self) -> None:
        """Release nothing new until ``step()`` or ``resume()``; running steps finish."""
        k = self._k()
        if not k.sched.paused:
            k.pause_now()
        await k.commit()

    async def unpause(self) -> None:
        """Leave step-through mode: release ready steps again. (To take over a stored run,
        suspended or crashed, in this process: ``runtime.resume(run_id)``.)"""
        k = self._k()
        k.unpause()
        await k.commit()

    async def step(self, step_id: str | None = None) -> str:
        """Release exactly one ready step (the first, or ``step_id``); pauses the run first if
        needed. Returns the step id. Raises RunStateError if nothing (or not it) is ready."""
        return self._k().step_once(step_id)

    async def cancel(self) -> None:
        """Stop: running calls are cancelled, nothing new starts, then completed steps are
        compensated (unless ``compensate_on_failure`` is off)."""
        self._k().cancel()

    async def approve(
        self, step_id: str, args: dict[str, Any] | None = None, note: str | None = None,
        *, by: str | None = None, budget: dict[str, Any] | None = None,
    ) -> None:
        """Approve a step waiting for confirmation. With ``args``, run those instead (they are
        validated again). ``by`` says who approves (default ``user@host``), recorded with the
        approval. ``budget``: for a step that waits because the run's budget would be crossed
        (reason ``budget_exceeded``), the raised limits (merged over the current ones). Raises
        RunStateError if the step is not waiting (saying who decided it),
        DecisionError for args that do not fit, StaleEpochError when another driver took the
        run over (then nothing was approved and the step's call does not start here).
        On a stored handle of a queue's run, the approval goes to the fleet
        (``runtime.decide``: recorded, and applied by a worker)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "approve", args=args, note=note,
                                      by=by, budget=budget)
            return
        k = self._k()
        k.require_step(step_id)
        k.apply(decisions.approve(k.state, k.nodes[step_id].tool, step_id, args, note,
                                  by or decisions.requester(), budget, budget_of(k)))
        await k.commit()

    async def approve_all(self, step_id: str, note: str | None = None, *,
                          by: str | None = None) -> list[str]:
        """Approve every step waiting for confirmation at or under ``step_id`` (the waiting
        instances of a ``for_each`` step, the steps of a sub-chain), each with its OWN args,
        each recorded as its own approval. Returns the ids approved (none: nothing waited).
        Raises UnknownStepError, StaleEpochError as :meth:`approve` does."""
        k = self._k()
        k.require_step(step_id)
        ids = decisions.waiting_under(k.state, step_id)
        who = by or decisions.requester()
        for sid in ids:
            k.apply(decisions.approve(k.state, k.nodes[sid].tool, sid, None, note, who,
                                      None, budget_of(k)))
        if ids:
            await k.commit()
        return ids

    async def reject(self, step_id: str, reason: str = "rejected", *,
                     by: str | None = None) -> None:
        """Reject a waiting step: its dependants are skipped; under fail_fast the run rolls
        back. ``by`` says who rejects. Raises RunStateError if the step is not waiting.
        On a stored handle of a queue's run, it goes to the fleet (``runtime.decide``)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "reject", reason=reason, by=by)
            return
        k = self._k()
        k.apply(decisions.reject(k.state, step_id, reason, by or decisions.requester()))
        await k.commit()

    async def resolve(
        self,
        step_id: str,
        *,
        output: Any = None,
        retry: bool = False,
        fail: bool = False,
        note: str | None = None,
        by: str | None = None,
    ) -> None:
        """Decide an in-doubt step: it took effect with ``output``, or ``retry`` it, or
        ``fail`` it. ``by`` says who decides. Raises RunStateError if it is not in doubt,
        DecisionError for an output that does not fit. On a stored handle of a queue's run,
        it goes to the fleet (``runtime.decide``)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "resolve", output=output,
                                      retry=retry, fail=fail, note=note, by=by)
            return
        k = self._k()
        tool = k.nodes[step_id].tool if step_id in k.nodes else None
        k.apply(decisions.resolve(k.state, tool, step_id, output=output, retry=retry,
                                  fail=fail, note=note, by=by or decisions.requester()))
        await k.commit()

    async def complete_job(self, step_id: str, *, output: Any = None,
                           error: str | None = None, by: str | None = None) -> None:
        """Complete a waiting remote job from outside (its callback): with ``output`` (the
        step's output) or ``error`` (it failed). Stored until the job's waiter reads it.
        Raises RunStateError (not a waiting job; a second completion), DecisionError."""
        from chainlab.runtime.engine.attempt.job.wait import complete_job

        k = self._k()
        k.require_step(step_id)
        decisions.check_completion(k.state, step_id)
        complete_job(k, step_id, decisions.completion_payload(
            step_id, output=output, error=error, by=by or decisions.requester()))
        await k.commit()

    async def cancel_job(self, step_id: str) -> None:
        """Cancel one waiting remote job where it runs (``cancel(handle)``); its step fails
        (not retried) and the run goes on as after any failure (``run.cancel()`` cancels
        every waiting job, with the run). Raises RunStateError when the step is not a job
        that waits in this process."""
        from chainlab.runtime.engine.attempt.job.wait import cancel_job

        k = self._k()
        k.require_step(step_id)
        cancel_job(k, step_id)

    async def rollback(self) -> None:
        """Compensate completed steps in reverse completion order (stopping the run first if
        it is still going). On a rolled-back-with-failures run, retries what failed.
        Raises RunNotActiveError (not driven here), RunStateError (nothing to roll back)."""
        k = self._k()
        decisions.check_rollback(k.state)
        if await k.begin_rollback():
            self.runtime._launch(self, DrivePhase.ROLLBACK)

    async def inject(self, fault: str, step_id: str | None = None, **options: Any) -> Any:
        """Inject a fault for a demo or a test (timeout, raise, kill, second_driver),
        recorded as a ``fault_injected`` event: see :func:`chainlab.runtime.faults.inject`."""
        from chainlab.runtime.faults import inject

        return await inject(self, fault, step_id, **options)

    def set_breakpoints(self, step_ids: Sequence[str]) -> None:
        """Pause before these steps start (replaces the current set). Raises
        UnknownStepError for an id that is not a step of the run."""
        k = self._k()
        for step_id in step_ids:
            k.require_step(step_id)
        k.sched.set_breakpoints(step_ids)  # a breakpoint set again fires again

    @property
    def breakpoints(self) -> set[str]:
        return set(self._k().sched.breakpoints) if self._kernel else set()

    # ------------------------------------------------------------------ events
    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every new event; returns an unsubscribe function."""
        k = self._k()
        k.subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in k.subscribers:
                k.subscribers.remove(callback)

        return unsubscribe

    async def events(self, *, history: bool = True) -> AsyncIterator[Event]:
        """Async stream of events (stored history first, then live) until the run is
        terminal."""
        k = self._k()
        send, receive = anyio.create_memory_object_stream[Event](float("inf"))
        unsubscribe = self.subscribe(send.send_nowait)
        try:
            last, last_kind = 0, ""
            if history:
                await k.commit()  # history = everything emitted so far
                for ev in await self.runtime.run_io(self.runtime.store.load_events, self.run_id):
                    last, last_kind = ev.seq, ev.kind
                    yield ev
            ended = k.state.status in RUN_TERMINAL and k.state.last_seq == last
            if ended and last_kind in RUN_END_KINDS:
                return  # the history already ends with the run's end
            if k.state.status in RUN_TERMINAL and k.settled_status in RUN_TERMINAL \
                    and not k.driving:
                # nothing more will come; what came while the history was read (the run
                # may have ended meanwhile) is in the subscription's buffer
                while True:
                    try:
                        ev = receive.receive_nowait()
                    except anyio.WouldBlock:
                        return
                    if ev.seq > last:
                        yield ev
            async with receive:
                async for ev in receive:
                    if ev.seq <= last:
                        continue
                    yield ev
                    if ev.kind in RUN_END_KINDS:
                        return
        finally:
            unsubscribe()
            send.close()

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from chainlab.render import run_mimebundle

        return run_mimebundle(self)
