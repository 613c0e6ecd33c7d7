"""The event vocabulary and the Event value object.

Every state change of a run is an event with a per-run monotonic ``seq``. The store keeps
them all; live subscribers (widgets, CLI progress, tests) get them as they happen; the run's
state is DERIVED from them by :mod:`chainlab.runtime.state`, so live views, resume and
timeline replay are one code path.

Beyond DESIGN §9 the vocabulary has three events the fold needs: ``step_cancelled``,
``run_rollback_started`` and ``run_rollback_failed``.
"""

from __future__ import annotations

from enum import StrEnum

from chainlab.store.base import Event

__all__ = ["Event", "EventKind"]


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
    STEP_TIMED_OUT = "step_timed_out"  # the attempt hit timeout_s (its fate follows)
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
