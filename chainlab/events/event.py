"""The event vocabulary (:class:`EventKind`) and the :class:`Event` value object.

Every state change of a run is an event with a per-run monotonic ``seq``. The store keeps
them all; live subscribers (widgets, CLI progress, tests) get them as they happen; the run's
state is DERIVED from them by :mod:`chainlab.events.fold`, so live views, resume, history
(``run.state_at``) and timeline replay are one code path.

Beyond DESIGN §9 the vocabulary has three events the fold needs: ``step_cancelled``,
``run_rollback_started`` and ``run_rollback_failed``; time travel (§11) adds ``run_forked``
and ``step_reused``; fault injection adds ``fault_injected`` and ``write_refused``; a graph
that grows while it runs (§17) adds ``steps_added``. A kind
this module does not know is an
error (:func:`event_kind`), on the way in from a store and in the fold alike.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple

from chainlab.errors import StoreError

__all__ = ["MODEL_DELTA", "RUN_END_KINDS", "Event", "EventKind", "event_kind"]

#: the ``kind`` of a notification that is NOT an event: a piece of a streamed model answer
#: (:class:`chainlab.agent.model.ModelDelta`), handed to a run's ``deltas=True`` subscribers
#: as it arrives and never stored (DESIGN §24); a subscriber tells it by ``kind``
MODEL_DELTA = "model_delta"


class EventKind(StrEnum):
    RUN_STARTED = "run_started"  # payload: chain, options (names), context keys
    PLANNING_STARTED = "planning_started"  # payload: planner, model, request
    PLANNING_COMPLETED = "planning_completed"  # payload: rounds, problems, fallback
    PLANNING_FAILED = "planning_failed"  # payload: error
    STEP_READY = "step_ready"  # dependencies done; payload: recovery / resolved (optional)
    STEP_STARTED = "step_started"  # an attempt begins; payload: args, idempotency_key
    STEP_SUCCEEDED = "step_succeeded"  # payload: output (+ resolved/reconciled flags)
    STEP_FAILED = "step_failed"  # payload: error_kind, error
    STEP_RETRY_SCHEDULED = "step_retry_scheduled"  # payload: error_kind, error, delay_s, due_at
    STEP_TIMED_OUT = "step_timed_out"  # the attempt hit timeout_s (its fate follows);
    # payload still_running: a sync body goes on in its thread, holding its slot and key
    STEP_CALL_RETURNED = "step_call_returned"  # that body has returned: slot and key free
    STEP_WAITING_CONFIRMATION = "step_waiting_confirmation"  # payload: args, args_hash, preview
    STEP_APPROVED = "step_approved"  # payload: args_hash, args (when edited), note
    STEP_REJECTED = "step_rejected"  # payload: reason
    STEP_SKIPPED = "step_skipped"  # payload: reason
    STEP_IN_DOUBT = "step_in_doubt"  # payload: reason, error_kind, error
    STEP_CANCELLED = "step_cancelled"  # payload: reason
    COMPENSATION_STARTED = "compensation_started"  # payload: tool, args, idempotency_key
    COMPENSATION_SUCCEEDED = "compensation_succeeded"
    COMPENSATION_FAILED = "compensation_failed"  # payload: error_kind, error, will_retry
    RUN_PAUSED = "run_paused"  # payload: reason, step_id (breakpoint)
    RUN_SUSPENDED = "run_suspended"  # payload: waiting (step ids by reason)
    RUN_RESUMED = "run_resumed"  # payload: reason (unpause | approval | recovery), epoch
    RUN_SUCCEEDED = "run_succeeded"
    RUN_FAILED = "run_failed"  # payload: failed steps
    RUN_CANCELLED = "run_cancelled"
    RUN_ROLLBACK_STARTED = "run_rollback_started"  # payload: reason, order
    RUN_ROLLED_BACK = "run_rolled_back"
    RUN_ROLLBACK_FAILED = "run_rollback_failed"  # payload: failed, pending, needs_decision
    # time travel (DESIGN §11)
    RUN_FORKED = "run_forked"  # payload: forked_from (run id), forked_at_seq, decisions
    STEP_REUSED = "step_reused"  # a fork copies an output: pending -> succeeded, tool NOT
    # called; payload: decision (reuse | override), output, args, source_run, source_attempt,
    # code, reason
    # remote jobs (issue 27; chainlab.tools.job): reserve, record, progress, callback
    JOB_SUBMITTING = "job_submitting"  # write-ahead before submit; payload: key
    JOB_SUBMITTED = "job_submitted"  # the handle, durable before any wait; payload: handle,
    # key, how (submitted | found | attached)
    JOB_PROGRESS = "job_progress"  # throttled; payload: state, progress, note, polls,
    # poll_errors, error (the last poll error)
    JOB_COMPLETED = "job_completed"  # a completion from outside (runtime.complete_job),
    # stored until the waiter reads it; payload: output | error, by
    # fault injection for demos and tests (chainlab.runtime.faults)
    FAULT_INJECTED = "fault_injected"  # payload: fault, by, effect, error_kind (as
    # armed), stale_epoch (second_driver); step_id: the step it hits (None: the driver)
    WRITE_REFUSED = "write_refused"  # the store fenced a stale driver: recorded by the new
    # owner; payload: stale_epoch, epoch, refused (the stale writer's events), error
    # graphs that grow while they run (DESIGN §17): the ONE kind that appends steps
    STEPS_ADDED = "steps_added"  # step_id: the parent that grew them (a for_each step, an
    # agent step); payload: kind (for_each | agent), ids (the new steps, in order), plus what
    # the parent's kind needs to rebuild each one (a for_each step's items; an agent turn's
    # answer and calls)


#: the kinds that end a run (until a later rollback)
RUN_END_KINDS = frozenset(
    {
        EventKind.RUN_SUCCEEDED,
        EventKind.RUN_FAILED,
        EventKind.RUN_CANCELLED,
        EventKind.RUN_ROLLED_BACK,
        EventKind.RUN_ROLLBACK_FAILED,
    }
)

_KINDS = {k.value: k for k in EventKind}


def event_kind(value: str) -> EventKind:
    """The EventKind named ``value``. Raises StoreError for a kind this chainlab does not
    know (a log written by a newer version, or a corrupted row)."""
    kind = _KINDS.get(value)
    if kind is None:
        raise StoreError(
            f"unknown event kind {value!r}: this log was written by a newer chainlab or is "
            "corrupted; upgrade chainlab to read it"
        )
    return kind


class Event(NamedTuple):
    """One state change of a run. ``step_id``/``attempt`` are None for run-level events.

    Immutable like a frozen dataclass, but a named tuple: a run writes several events per
    step and a tuple is built at C speed (a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``: about 3x the cost, measured in bench_scheduler).
    ``payload`` defaults to one shared empty dict: payloads are never mutated."""

    run_id: str
    seq: int
    ts: float
    epoch: int
    kind: EventKind
    step_id: str | None = None
    attempt: int | None = None
    payload: dict[str, Any] = {}  # shared, never written

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "ts": self.ts,
            "epoch": self.epoch,
            "kind": str(self.kind),
            "step_id": self.step_id,
            "attempt": self.attempt,
            "payload": self.payload,
        }

    def __str__(self) -> str:
        where = f" {self.step_id}" if self.step_id else ""
        att = f" #{self.attempt}" if self.attempt else ""
        return f"[{self.seq}] {self.kind}{where}{att}"
