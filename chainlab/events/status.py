"""One status vocabulary for steps and runs, with explicit transition tables.

Every state change in the runtime goes through :func:`check_step` / :func:`check_run`, which
refuse a transition the tables do not list (like graphlib, strict about protocol misuse).
"""

from __future__ import annotations

from enum import StrEnum

from chainlab.errors import RunStateError

__all__ = [
    "REUSABLE_FROM",
    "RUN_TERMINAL",
    "STEP_DONE_OK",
    "STEP_TERMINAL",
    "AttemptStatus",
    "ErrorKind",
    "RunStatus",
    "SkipReason",
    "StepStatus",
    "check_reuse",
    "check_run",
    "check_step",
]


class StepStatus(StrEnum):
    PENDING = "pending"  # waiting for dependencies
    READY = "ready"  # runnable; waiting for a slot, a key, a pool or the step button
    RUNNING = "running"  # an attempt is in flight (a sub-chain: its children are)
    RETRY_WAIT = "retry_wait"  # back-off before the next attempt (holds no slot)
    WAITING_CONFIRMATION = "waiting_confirmation"  # needs a person's approval
    SUCCEEDED = "succeeded"  # has an output
    FAILED = "failed"  # gave up
    SKIPPED = "skipped"  # never ran: condition false, upstream failed/rejected
    REJECTED = "rejected"  # a person said no
    IN_DOUBT = "in_doubt"  # an unsafe call may or may not have taken effect
    CANCELLED = "cancelled"  # the run was cancelled or failed fast before it ran
    COMPENSATING = "compensating"  # its compensation is running
    COMPENSATED = "compensated"  # its effect was undone
    COMPENSATION_FAILED = "compensation_failed"  # undoing failed; rollback() retries it


class RunStatus(StrEnum):
    RUNNING = "running"  # steps are being released
    PAUSED = "paused"  # step-through: nothing new starts until step() or resume()
    SUSPENDED = "suspended"  # only a person can move it on (approve, reject, resolve)
    SUCCEEDED = "succeeded"  # every step ended well
    FAILED = "failed"  # a step failed and nothing was compensated
    CANCELLED = "cancelled"  # cancelled and nothing was compensated
    COMPENSATING = "compensating"  # undoing completed steps
    ROLLED_BACK = "rolled_back"  # every compensation succeeded
    ROLLBACK_FAILED = "rollback_failed"  # a compensation failed; rollback() can retry


class SkipReason(StrEnum):
    CONDITION = "condition"  # its `when` was false
    UPSTREAM_FAILED = "upstream_failed"  # a dependency failed (or was cancelled)
    REJECTED = "rejected"  # a dependency was rejected by a person
    CANCELLED = "cancelled"  # the run stopped before the step could run


class ErrorKind(StrEnum):
    """Why an attempt failed (recorded on every failed attempt)."""

    INVALID_INPUT = "invalid_input"  # args failed validation; the tool was not called
    EXECUTION_FAILED = "execution_failed"  # the tool raised (or returned garbage)
    TIMEOUT = "timeout"  # the attempt exceeded timeout_s
    TRANSIENT = "transient"  # the tool raised TransientError
    PERMANENT = "permanent"  # the tool raised PermanentError; never retried
    CANCELLED = "cancelled"  # the run was cancelled while the attempt ran
    INTERRUPTED = "interrupted"  # the process died during the call (found by recovery)


class AttemptStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the process died during the attempt
    RUNNING = "running"  # still in flight (or the process is gone and nobody resumed)


S = StepStatus
STEP_TERMINAL = frozenset(
    {
        S.SUCCEEDED,
        S.FAILED,
        S.SKIPPED,
        S.REJECTED,
        S.CANCELLED,
        S.COMPENSATED,
        S.COMPENSATION_FAILED,
    }
)
# states that release dependants (a skipped-by-condition step counts as done; see DESIGN §2)
STEP_DONE_OK = frozenset({S.SUCCEEDED})

_STEP: dict[StepStatus, frozenset[StepStatus]] = {
    S.PENDING: frozenset({S.READY, S.WAITING_CONFIRMATION, S.SKIPPED, S.CANCELLED, S.FAILED}),
    S.READY: frozenset({S.RUNNING, S.CANCELLED, S.SKIPPED, S.WAITING_CONFIRMATION}),
    S.WAITING_CONFIRMATION: frozenset(
        {S.READY, S.REJECTED, S.CANCELLED, S.SKIPPED, S.WAITING_CONFIRMATION}
    ),
    S.RUNNING: frozenset(
        {S.SUCCEEDED, S.FAILED, S.RETRY_WAIT, S.IN_DOUBT, S.CANCELLED, S.READY}
    ),  # READY: a crash interrupted a safe-to-repeat call
    S.RETRY_WAIT: frozenset({S.READY, S.CANCELLED}),
    S.IN_DOUBT: frozenset({S.SUCCEEDED, S.FAILED, S.READY}),
    # COMPENSATED directly: a sub-chain step whose children were all undone
    S.SUCCEEDED: frozenset({S.COMPENSATING, S.COMPENSATED}),
    S.COMPENSATING: frozenset({S.COMPENSATED, S.COMPENSATION_FAILED, S.COMPENSATING}),
    S.COMPENSATION_FAILED: frozenset({S.COMPENSATING}),
    S.FAILED: frozenset(),
    S.SKIPPED: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.COMPENSATED: frozenset(),
}

#: the only states a fork may copy a recorded output into (``step_reused``): a step the fork
#: has not touched yet. Kept out of the table above so no live run can ever go pending ->
#: succeeded without an attempt.
REUSABLE_FROM = frozenset({S.PENDING})

R = RunStatus
RUN_TERMINAL = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED, R.ROLLED_BACK, R.ROLLBACK_FAILED})

_RUN: dict[RunStatus, frozenset[RunStatus]] = {
    R.RUNNING: frozenset(
        {R.PAUSED, R.SUSPENDED, R.SUCCEEDED, R.FAILED, R.CANCELLED, R.COMPENSATING, R.RUNNING}
    ),
    R.PAUSED: frozenset(
        {R.RUNNING, R.CANCELLED, R.COMPENSATING, R.FAILED, R.SUCCEEDED, R.SUSPENDED, R.PAUSED}
    ),
    R.SUSPENDED: frozenset(
        {R.RUNNING, R.PAUSED, R.COMPENSATING, R.CANCELLED, R.FAILED, R.SUCCEEDED, R.SUSPENDED}
    ),
    R.COMPENSATING: frozenset(
        {R.ROLLED_BACK, R.ROLLBACK_FAILED, R.SUSPENDED, R.RUNNING, R.COMPENSATING}
    ),
    R.SUCCEEDED: frozenset({R.COMPENSATING}),
    R.FAILED: frozenset({R.COMPENSATING}),
    R.CANCELLED: frozenset({R.COMPENSATING}),
    R.ROLLBACK_FAILED: frozenset({R.COMPENSATING}),
    R.ROLLED_BACK: frozenset(),
}


class InvalidTransition(RunStateError):
    """A state change the transition table does not allow (a runtime bug or misuse)."""


#: the step transition table, for hot paths that check membership before calling check_step
STEP_NEXT = _STEP


def check_step(step_id: str, old: StepStatus, new: StepStatus) -> None:
    if new not in _STEP[old]:
        raise InvalidTransition(
            f"step {step_id!r}: {old} -> {new} is not a valid transition", status=str(old)
        )


def check_reuse(step_id: str, old: StepStatus) -> None:
    """A fork copies an output into a step (``step_reused``): only into an untouched one."""
    if old not in REUSABLE_FROM:
        raise InvalidTransition(
            f"step {step_id!r}: cannot reuse an output into a {old} step (only a pending one)",
            status=str(old),
        )


def check_run(run_id: str, old: RunStatus, new: RunStatus) -> None:
    if new not in _RUN[old]:
        raise InvalidTransition(
            f"run {run_id!r}: {old} -> {new} is not a valid transition",
            run_id=run_id,
            status=str(old),
        )
