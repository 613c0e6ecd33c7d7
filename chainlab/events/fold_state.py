"""The state the fold builds (part of the fold, :mod:`chainlab.events.fold`): a run's
(:class:`FoldState`), its steps' (:class:`StepState`) and their attempts'
(:class:`AttemptRecord`), with the few primitives every handler changes it through (a
checked transition, an attempt opened, an attempt closed with its usage counted once).

The handler groups (:mod:`chainlab.events.fold_steps`, ``fold_decisions``, ``fold_jobs``,
``fold_run``) and the fold's dispatch (:class:`chainlab.events.fold.RunState`) import it;
it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from chainlab.events.event import Event
from chainlab.events.status import (
    STEP_NEXT,
    STEP_TERMINAL,
    AttemptStatus,
    RunStatus,
    StepStatus,
    check_run,
    check_step,
)
from chainlab.events.usage import add_usage

__all__ = ["BACKGROUND_NOTE", "REDACTED", "AttemptRecord", "FoldState", "Handler",
           "StepState"]

#: what front ends say about a step whose timed-out sync body has not returned yet
BACKGROUND_NOTE = "still running in the background"
#: the payload key of a stored event that lists the keys a redactor masked (chainlab.redaction)
REDACTED = "redacted"

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
    # why what it reported could not be taken (``usage`` then holds what was counted instead)
    usage_unknown: str | None = None

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
    # a grown step (a for_each instance, an agent's call): the step that grew it
    parent: str | None = None

    @property
    def done(self) -> bool:
        return self.status in STEP_TERMINAL


class FoldState:
    """What the fold knows of a run (:class:`~chainlab.events.fold.RunState` is this plus
    applying events), and the primitives every handler changes it through."""

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
        # run_forked: an experiment's replay (DESIGN §22): its id, the recorded run, the tools
        # listed live, and the recording's side effects and model turns that answer its calls
        # (read by chainlab.runtime.engine.experiment, the one place that decides them)
        self.experiment: dict[str, Any] | None = None
        self.faults: list[dict[str, Any]] = []  # fault_injected: seq, ts, epoch, step, payload
        self.fenced: list[dict[str, Any]] = []  # write_refused: the stale writers refused
        # the run's usage: its attempts' and its planner's (chainlab.events.usage)
        self.usage: dict[str, Any] = {}
        self.budget: dict[str, Any] | None = None  # raised by a person (budget_exceeded)
        # grants (DESIGN §21) by id: id, when, scope, tool, parent, expires_at, rules (the
        # fingerprint of the rules in force), step_id, by, ts, revoked (by, ts) or None
        self.grants: dict[str, dict[str, Any]] = {}
        # steps_added (DESIGN §17): the steps each parent grew, in order, and every growth's
        # payload in log order (what a reader needs to rebuild the grown graph)
        self.children: dict[str, list[str]] = {}
        self.growth: list[tuple[str, dict[str, Any]]] = []
        # what the stored log holds masked (DESIGN §24): step id ("" for the run) -> the
        # payload keys a redactor changed; a resumed run never runs with a mask
        self.redacted: dict[str, set[str]] = {}
        self._open: dict[tuple[str, str], AttemptRecord] = {}

    def step(self, step_id: str) -> StepState:
        st = self.steps.get(step_id)
        if st is None:
            st = self.steps[step_id] = StepState(step_id)
        return st

    def open_attempt(self, step_id: str, kind: str = "call") -> AttemptRecord | None:
        return self._open.get((step_id, kind))

    def open_attempts(self, kind: str = "call") -> list[AttemptRecord]:
        """The ``kind`` attempts that started and have not ended (running, or a remote job
        waiting), in the order they started."""
        return [rec for (_, of), rec in self._open.items() if of == kind]

    # ------------------------------------------------------------- the handlers' primitives
    # the handler groups change the state through these and step(): a transition checked
    # against the tables, an attempt opened, an attempt closed with its usage counted once
    def set_status(self, st: StepState, new: StepStatus) -> None:
        """Move step ``st`` to ``new``; raises InvalidTransition for a move the table lacks."""
        if new not in STEP_NEXT[st.status]:
            check_step(st.step_id, st.status, new)  # raises, naming the transition
        st.status = new

    def set_run_status(self, new: RunStatus) -> None:
        """Move the run to ``new``; raises InvalidTransition for a move the table lacks."""
        if self.status is not None:
            check_run(self.run_id, self.status, new)
        self.status = new

    def begin_attempt(self, st: StepState, kind: str, number: int, ev: Event,
                      idempotency_key: str | None, code: str | None = None) -> AttemptRecord:
        """Open attempt ``number`` of ``kind`` (``"call"`` | ``"compensation"``) on step
        ``st``, started by ``ev`` (the tool named in its payload)."""
        rec = AttemptRecord(st.step_id, number, kind, ev.epoch, ev.ts, ev.payload.get("tool"),
                            idempotency_key, code=code)
        self.attempts.append(rec)
        self._open[(st.step_id, kind)] = rec
        return rec

    def end_attempt(self, ev: Event, kind: str, status: str) -> AttemptRecord | None:
        """Close the open ``kind`` attempt of ``ev``'s step with ``status`` (None if none is
        open), adding the usage its end event reports to the step's and the run's."""
        rec = self._open.pop((ev.step_id or "", kind), None)
        if rec is not None:
            rec.ended_at = ev.ts
            rec.status = status
            p = ev.payload
            rec.error_kind = p.get("error_kind")
            rec.error = p.get("error")
            if "delay_s" in p:
                rec.retry_delay_s = p["delay_s"]
            rec.usage_unknown = p.get("usage_unknown")
            usage = p.get("usage")
            if usage:  # each end event is folded once: usage is never counted twice
                rec.usage = usage
                st = self.step(rec.step_id)
                st.usage = add_usage(dict(st.usage or {}), usage)
                add_usage(self.usage, usage)
        return rec


#: how one event changes the state (the handlers of chainlab.events.fold_*)
Handler = Callable[[FoldState, Event], None]
