"""Run state derived from events (the fold).

The scheduler applies each event it emits; ``resume`` and the views replay stored events
through the same :meth:`RunState.apply`. Transitions are checked against the tables in
:mod:`chainlab.events.status`, live and on replay alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chainlab.events.event import Event, EventKind, event_kind
from chainlab.events.status import (
    RUN_TERMINAL,
    STEP_NEXT,
    STEP_TERMINAL,
    WAITS_FOR_PERSON,
    AttemptStatus,
    ErrorKind,
    RunStatus,
    StepStatus,
    check_reuse,
    check_run,
    check_step,
)
from chainlab.events.usage import add_usage

__all__ = ["BACKGROUND_NOTE", "AttemptRecord", "RunState", "StepState", "read_run"]

#: what front ends say about a step whose timed-out sync body has not returned yet
BACKGROUND_NOTE = "still running in the background"

S = StepStatus


@dataclass(slots=True)
class AttemptRecord:
    """One call (or compensation) of a tool, from its start event to its end event."""

    step_id: str
    attempt: int
    kind: str  # "call" | "compensation"
    epoch: int
    started_at: float
    tool: str | None = None
    idempotency_key: str | None = None
    ended_at: float | None = None
    status: str = AttemptStatus.RUNNING
    error_kind: str | None = None
    error: str | None = None
    retry_delay_s: float | None = None
    code: str | None = None  # fingerprint of the tool's code this attempt ran
    usage: dict[str, Any] | None = None  # what the call reported it consumed (end event)

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


@dataclass(slots=True)
class StepState:
    """What is known about one step (namespaced ``parent/child`` for sub-chain steps)."""

    step_id: str
    status: StepStatus = S.PENDING
    reason: str | None = None
    attempts: int = 0
    compensations: int = 0
    output: Any = None
    error_kind: str | None = None
    error: str | None = None
    args: dict[str, Any] | None = None
    args_hash: str | None = None
    preview: Any = None
    approved_hash: str | None = None
    approval: dict[str, Any] | None = None
    idempotency_key: str | None = None
    due_at: float | None = None
    ready_at: float | None = None
    waiting_since: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    background: bool = False  # a timed-out sync body still runs (holds its slot and key)
    # a fork copied its output (step_reused): decision, source_run, source_attempt, code,
    # tool, origin ("call": a tool made it; "override": a person gave it)
    reused: dict[str, Any] | None = None
    # the last person's decision on it: action (approved, rejected, resolved: ...), by, ts
    decided: dict[str, Any] | None = None
    # the sum of its attempts' usage in THIS run (a reused step made no call: None)
    usage: dict[str, Any] | None = None
    # a remote job's record (job_* events): attempt, key, phase (submitting | waiting |
    # ended), handle, how, submitted_at, state, progress, note, polls, poll_errors, error,
    # completion (a stored callback: output | error), updated_at
    job: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.status in STEP_TERMINAL


class RunState:
    """The fold of a run's events."""

    def __init__(self, run_id: str, step_ids: Iterable[str] = ()):
        self.run_id = run_id
        self.status: RunStatus | None = None
        self.epoch = 0
        self.last_seq = 0
        self.steps: dict[str, StepState] = {step_id: StepState(step_id) for step_id in step_ids}
        self.attempts: list[AttemptRecord] = []
        self.completion: list[str] = []  # step ids in the order they succeeded
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.suspended_on: dict[str, Any] = {}
        self.paused_at: str | None = None
        self.failure: dict[str, Any] | None = None
        self.planning: list[dict[str, Any]] = []
        self.priority = "declaration"  # the release order the run used (run_started)
        self.estimates: dict[str, float] = {}  # seconds per step it was ranked with
        self.forked_from: dict[str, Any] | None = None  # run_forked: parent run id and seq
        # run_forked: steps that wait for a person even if their tool does not ask (a fork's
        # side-effecting steps whose inputs changed), with what the approver should see
        self.confirm_first: dict[str, dict[str, Any]] = {}
        self.faults: list[dict[str, Any]] = []  # fault_injected: seq, ts, epoch, step, payload
        self.fenced: list[dict[str, Any]] = []  # write_refused: the stale writers refused
        # the run's usage: its attempts' and its planner's (chainlab.events.usage)
        self.usage: dict[str, Any] = {}
        self.budget: dict[str, Any] | None = None  # raised by a person (budget_exceeded)
        self._open: dict[tuple[str, str], AttemptRecord] = {}

    @classmethod
    def from_events(
        cls, run_id: str, events: Iterable[Event], step_ids: Iterable[str] = ()
    ) -> RunState:
        state = cls(run_id, step_ids)
        for ev in events:
            state.apply(ev)
        return state

    def step(self, step_id: str) -> StepState:
        st = self.steps.get(step_id)
        if st is None:
            st = self.steps[step_id] = StepState(step_id)
        return st

    def waiting(self) -> dict[str, str]:
        """Steps that wait for a person: ``{step_id: waiting_confirmation | in_doubt}``."""
        return {step_id: str(st.status) for step_id, st in self.steps.items()
                if st.status in WAITS_FOR_PERSON}

    @property
    def outputs(self) -> dict[str, Any]:
        """Outputs of every step that succeeded (kept after compensation, for the audit)."""
        return {step_id: self.steps[step_id].output for step_id in self.completion}

    def open_attempt(self, step_id: str, kind: str = "call") -> AttemptRecord | None:
        return self._open.get((step_id, kind))

    # ------------------------------------------------------------------ applying events
    def apply(self, ev: Event) -> None:
        self.last_seq = ev.seq
        self.epoch = ev.epoch
        handler = _HANDLERS.get(ev.kind)
        if handler is None:
            event_kind(ev.kind)  # raises for a kind this chainlab does not know
            raise AssertionError(f"EventKind {ev.kind!r} has no fold handler")
        handler(self, ev)

    def _set(self, st: StepState, new: StepStatus, ts: float) -> None:
        if new not in STEP_NEXT[st.status]:
            check_step(st.step_id, st.status, new)  # raises, naming the transition
        st.status = new

    def _set_run(self, new: RunStatus) -> None:
        if self.status is not None:
            check_run(self.run_id, self.status, new)
        self.status = new

    def _close(self, ev: Event, kind: str, status: str) -> AttemptRecord | None:
        rec = self._open.pop((ev.step_id or "", kind), None)
        if rec is not None:
            rec.ended_at = ev.ts
            rec.status = status
            p = ev.payload
            rec.error_kind = p.get("error_kind")
            rec.error = p.get("error")
            if "delay_s" in p:
                rec.retry_delay_s = p["delay_s"]
            usage = p.get("usage")
            if usage:  # each end event is folded once: usage is never counted twice
                rec.usage = usage
                st = self.step(rec.step_id)
                st.usage = add_usage(dict(st.usage or {}), usage)
                add_usage(self.usage, usage)
        return rec

    # step events
    # the three events of every step's life (ready, started, succeeded) look the step up and
    # check the transition inline: the same table as _set, without two calls per event
    def _on_ready(self, ev: Event) -> None:
        st = self.steps.get(ev.step_id) or self.step(ev.step_id or "")  # type: ignore[arg-type]
        if st.status == S.RUNNING:  # recovery of a safe call interrupted by a crash
            self._close(ev, "call", AttemptStatus.INTERRUPTED)
        if S.READY not in STEP_NEXT[st.status]:
            check_step(st.step_id, st.status, S.READY)
        st.status = S.READY
        st.ready_at = ev.ts
        st.due_at = None
        if ev.payload.get("resolved"):
            _decided(st, ev, "resolved (retry)")

    def _on_started(self, ev: Event) -> None:
        st = self.steps.get(ev.step_id) or self.step(ev.step_id or "")  # type: ignore[arg-type]
        if S.RUNNING not in STEP_NEXT[st.status]:
            check_step(st.step_id, st.status, S.RUNNING)
        st.status = S.RUNNING
        p = ev.payload
        st.attempts = ev.attempt or st.attempts + 1
        st.args = p.get("args", st.args)
        st.idempotency_key = p.get("idempotency_key")
        if st.started_at is None:
            st.started_at = ev.ts
        rec = AttemptRecord(
            st.step_id, st.attempts, "call", ev.epoch, ev.ts, p.get("tool"), st.idempotency_key,
            code=p.get("code"),
        )
        self.attempts.append(rec)
        self._open[(st.step_id, "call")] = rec

    def _on_succeeded(self, ev: Event) -> None:
        st = self.steps.get(ev.step_id) or self.step(ev.step_id or "")  # type: ignore[arg-type]
        status = AttemptStatus.SUCCEEDED
        if st.status == S.RUNNING and ev.payload.get("reconciled"):
            status = AttemptStatus.INTERRUPTED
        self._close(ev, "call", status)
        if S.SUCCEEDED not in STEP_NEXT[st.status]:
            check_step(st.step_id, st.status, S.SUCCEEDED)
        st.status = S.SUCCEEDED
        st.output = ev.payload.get("output")
        st.error = st.error_kind = None
        if ev.payload.get("resolved"):
            st.reason = "resolved by a person"
            _decided(st, ev, "resolved (it took effect)")
        else:
            st.reason = None
        st.ended_at = ev.ts
        self.completion.append(st.step_id)

    def _on_reused(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        check_reuse(st.step_id, st.status)
        st.status = S.SUCCEEDED
        p = ev.payload
        st.output = p.get("output")
        st.args = p.get("args")
        st.reason = p.get("reason")
        st.reused = {
            k: p.get(k)
            for k in ("decision", "source_run", "source_attempt", "code", "tool", "origin")
        }
        st.started_at = st.ended_at = ev.ts
        self.completion.append(st.step_id)

    def _on_failed(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._close(ev, "call", AttemptStatus.FAILED)
        self._set(st, S.FAILED, ev.ts)
        st.reason = "resolved by a person" if ev.payload.get("resolved") else None
        if st.reason:
            _decided(st, ev, "resolved (failed)")
        st.error_kind = ev.payload.get("error_kind")
        st.error = ev.payload.get("error")
        st.ended_at = ev.ts

    def _on_retry(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._close(ev, "call", AttemptStatus.FAILED)
        self._set(st, S.RETRY_WAIT, ev.ts)
        st.error_kind = ev.payload.get("error_kind")
        st.error = ev.payload.get("error")
        st.due_at = ev.payload.get("due_at")

    def _on_timed_out(self, ev: Event) -> None:
        self._close(ev, "call", AttemptStatus.TIMED_OUT)
        if ev.payload.get("still_running"):
            self.step(ev.step_id or "").background = True

    def _on_call_returned(self, ev: Event) -> None:
        self.step(ev.step_id or "").background = False

    def _on_waiting(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._set(st, S.WAITING_CONFIRMATION, ev.ts)
        p = ev.payload
        st.args = p.get("args")
        st.args_hash = p.get("args_hash")
        st.preview = p.get("preview")
        st.approved_hash = None
        st.waiting_since = ev.ts
        st.reason = p.get("reason")  # budget_exceeded, or None: the tool asks

    def _on_approved(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._set(st, S.READY, ev.ts)
        st.reason = None
        p = ev.payload
        if p.get("args") is not None:
            st.args = p["args"]
        st.args_hash = p.get("args_hash", st.args_hash)
        st.approved_hash = st.args_hash
        st.approval = {"note": p.get("note"), "edited": p.get("args") is not None, "ts": ev.ts,
                       "by": p.get("by"), "over_budget": bool(p.get("over_budget"))}
        if p.get("budget") is not None:  # a person raised the run's budget
            self.budget = dict(p["budget"])
        _decided(st, ev, "approved")

    def _on_rejected(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._set(st, S.REJECTED, ev.ts)
        st.reason = ev.payload.get("reason")
        st.ended_at = ev.ts
        _decided(st, ev, "rejected")

    def _on_skipped(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._set(st, S.SKIPPED, ev.ts)
        st.reason = ev.payload.get("reason")

    def _on_in_doubt(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        interrupted = ev.payload.get("reason") == ErrorKind.INTERRUPTED
        self._close(ev, "call", AttemptStatus.INTERRUPTED if interrupted else AttemptStatus.FAILED)
        self._set(st, S.IN_DOUBT, ev.ts)
        st.reason = ev.payload.get("reason")
        st.error_kind = ev.payload.get("error_kind", st.error_kind)
        st.error = ev.payload.get("error", st.error)

    def _on_cancelled(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._close(ev, "call", AttemptStatus.CANCELLED)
        self._set(st, S.CANCELLED, ev.ts)
        st.reason = ev.payload.get("reason")

    def _on_comp_started(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._set(st, S.COMPENSATING, ev.ts)
        st.compensations = ev.attempt or st.compensations + 1
        p = ev.payload
        rec = AttemptRecord(
            st.step_id,
            st.compensations,
            "compensation",
            ev.epoch,
            ev.ts,
            p.get("tool"),
            p.get("idempotency_key"),
        )
        self.attempts.append(rec)
        self._open[(st.step_id, "compensation")] = rec

    def _on_comp_succeeded(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        self._close(ev, "compensation", AttemptStatus.SUCCEEDED)
        self._set(st, S.COMPENSATED, ev.ts)

    def _on_comp_failed(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        status = (
            AttemptStatus.INTERRUPTED
            if ev.payload.get("error_kind") == ErrorKind.INTERRUPTED
            else AttemptStatus.FAILED
        )
        if ev.payload.get("error_kind") == ErrorKind.TIMEOUT:
            status = AttemptStatus.TIMED_OUT
        self._close(ev, "compensation", status)
        if not ev.payload.get("will_retry"):
            self._set(st, S.COMPENSATION_FAILED, ev.ts)
            st.error = ev.payload.get("error")

    # run events
    def _on_run_started(self, ev: Event) -> None:
        self._set_run(RunStatus.RUNNING)
        self.started_at = ev.ts
        self.priority = str(ev.payload.get("priority", "declaration"))
        self.estimates = dict(ev.payload.get("estimates") or {})

    def _on_paused(self, ev: Event) -> None:
        self._set_run(RunStatus.PAUSED)
        self.paused_at = ev.payload.get("step_id")

    def _on_suspended(self, ev: Event) -> None:
        self._set_run(RunStatus.SUSPENDED)
        self.suspended_on = dict(ev.payload.get("waiting", {}))

    def _on_resumed(self, ev: Event) -> None:
        reason = ev.payload.get("reason")
        if reason == "recovery" and self.status in (RunStatus.COMPENSATING,):
            return  # a rollback interrupted by a crash carries on as a rollback
        if reason == "recovery" and self.status is not None and self.status in RUN_TERMINAL:
            return  # resumed to roll back a finished run; status changes with the rollback
        self._set_run(RunStatus.RUNNING)
        self.paused_at = None
        self.suspended_on = {}

    def _on_run_end(self, status: RunStatus, ev: Event) -> None:
        self._set_run(status)
        self.ended_at = ev.ts
        if status in (RunStatus.FAILED, RunStatus.ROLLBACK_FAILED):
            self.failure = dict(ev.payload)

    def _on_rollback_started(self, ev: Event) -> None:
        self._set_run(RunStatus.COMPENSATING)
        self.ended_at = None

    def _on_forked(self, ev: Event) -> None:
        payload = dict(ev.payload)
        self.confirm_first = dict(payload.pop("confirm_first", None) or {})
        self.forked_from = payload

    def _on_fault(self, ev: Event) -> None:
        self.faults.append(
            {"seq": ev.seq, "ts": ev.ts, "epoch": ev.epoch, "step_id": ev.step_id, **ev.payload}
        )

    def _on_refused(self, ev: Event) -> None:
        self.fenced.append({"seq": ev.seq, "ts": ev.ts, "epoch": ev.epoch, **ev.payload})

    def _on_job_submitting(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        st.job = {"attempt": ev.attempt, "key": ev.payload.get("key"), "phase": "submitting",
                  "handle": None, "how": None, "reserved_at": ev.ts, "submitted_at": None,
                  "state": None, "progress": None, "note": None, "polls": 0,
                  "poll_errors": 0, "error": None, "completion": None, "updated_at": ev.ts}

    def _on_job_submitted(self, ev: Event) -> None:
        st = self.step(ev.step_id or "")
        job = st.job
        if job is None:  # attached without a reservation (a fork attaching to a handle)
            self._on_job_submitting(ev)
            job = st.job
            assert job is not None
        p = ev.payload
        job.update(phase="waiting", handle=p.get("handle"), how=p.get("how", "submitted"),
                   submitted_at=p.get("submitted_at", ev.ts), state="pending", updated_at=ev.ts)
        if ev.attempt is not None:  # (an attach: the attempt that waits on it now)
            job["attempt"] = ev.attempt
        if p.get("key"):
            job["key"] = p["key"]

    def _on_job_progress(self, ev: Event) -> None:
        job = self.step(ev.step_id or "").job
        if job is None:
            return
        p = ev.payload
        for k in ("state", "progress", "note", "polls", "poll_errors", "error"):
            if k in p:
                job[k] = p[k]
        job["updated_at"] = ev.ts
        if p.get("ended"):
            job["phase"] = "ended"

    def _on_job_completed(self, ev: Event) -> None:
        job = self.step(ev.step_id or "").job
        if job is not None:
            job["completion"] = dict(ev.payload)

    def _on_planning(self, ev: Event) -> None:
        self.planning.append({"kind": ev.kind, **ev.payload})
        add_usage(self.usage, ev.payload.get("usage"))


def _decided(st: StepState, ev: Event, action: str) -> None:
    st.decided = {"action": action, "by": ev.payload.get("by"), "ts": ev.ts}


_HANDLERS: dict[str, Any] = {
    EventKind.STEP_READY: RunState._on_ready,
    EventKind.STEP_STARTED: RunState._on_started,
    EventKind.STEP_SUCCEEDED: RunState._on_succeeded,
    EventKind.STEP_FAILED: RunState._on_failed,
    EventKind.STEP_RETRY_SCHEDULED: RunState._on_retry,
    EventKind.STEP_TIMED_OUT: RunState._on_timed_out,
    EventKind.STEP_CALL_RETURNED: RunState._on_call_returned,
    EventKind.STEP_WAITING_CONFIRMATION: RunState._on_waiting,
    EventKind.STEP_APPROVED: RunState._on_approved,
    EventKind.STEP_REJECTED: RunState._on_rejected,
    EventKind.STEP_SKIPPED: RunState._on_skipped,
    EventKind.STEP_IN_DOUBT: RunState._on_in_doubt,
    EventKind.STEP_CANCELLED: RunState._on_cancelled,
    EventKind.COMPENSATION_STARTED: RunState._on_comp_started,
    EventKind.COMPENSATION_SUCCEEDED: RunState._on_comp_succeeded,
    EventKind.COMPENSATION_FAILED: RunState._on_comp_failed,
    EventKind.RUN_STARTED: RunState._on_run_started,
    EventKind.RUN_PAUSED: RunState._on_paused,
    EventKind.RUN_SUSPENDED: RunState._on_suspended,
    EventKind.RUN_RESUMED: RunState._on_resumed,
    EventKind.RUN_SUCCEEDED: lambda s, e: s._on_run_end(RunStatus.SUCCEEDED, e),
    EventKind.RUN_FAILED: lambda s, e: s._on_run_end(RunStatus.FAILED, e),
    EventKind.RUN_CANCELLED: lambda s, e: s._on_run_end(RunStatus.CANCELLED, e),
    EventKind.RUN_ROLLED_BACK: lambda s, e: s._on_run_end(RunStatus.ROLLED_BACK, e),
    EventKind.RUN_ROLLBACK_FAILED: lambda s, e: s._on_run_end(RunStatus.ROLLBACK_FAILED, e),
    EventKind.RUN_ROLLBACK_STARTED: RunState._on_rollback_started,
    EventKind.RUN_FORKED: RunState._on_forked,
    EventKind.STEP_REUSED: RunState._on_reused,
    EventKind.FAULT_INJECTED: RunState._on_fault,
    EventKind.WRITE_REFUSED: RunState._on_refused,
    EventKind.JOB_SUBMITTING: RunState._on_job_submitting,
    EventKind.JOB_SUBMITTED: RunState._on_job_submitted,
    EventKind.JOB_PROGRESS: RunState._on_job_progress,
    EventKind.JOB_COMPLETED: RunState._on_job_completed,
    EventKind.PLANNING_STARTED: RunState._on_planning,
    EventKind.PLANNING_COMPLETED: RunState._on_planning,
    EventKind.PLANNING_FAILED: RunState._on_planning,
}


def read_run(
    store: Any, run_id: str, *, upto: int | None = None
) -> tuple[Any, list[Event], RunState]:
    """``(record, events, state)`` of a stored run: THE read path of every front end (the stored
    ``Run``, the timeline, the CLI, the widgets). ``store`` is any Store (only ``get_run``
    and ``load_events`` are used); ``upto``: fold only the events up to that seq.

    Raises RunNotFoundError for an unknown run."""
    record = store.get_run(run_id)
    events = store.load_events(run_id)
    if upto is not None:
        events = [ev for ev in events if ev.seq <= upto]
    step_ids = [s["id"] for s in record.chain.get("steps", [])]
    return record, events, RunState.from_events(run_id, events, step_ids)

