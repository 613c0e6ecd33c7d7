"""One status vocabulary for steps and runs, with explicit transition tables, and every set
derived from them that more than one module needs (what waits for a person, what releases a
step's dependants, what ends a run), defined once here.

:func:`check_step` / :func:`check_run` refuse a transition the tables do not list (like
graphlib, strict about protocol misuse); the fold (:mod:`chainlab.events.fold`) checks the same
tables inline on its hot paths (``STEP_NEXT`` membership) instead of calling them.
"""

from __future__ import annotations

from enum import StrEnum

from chainlab.errors import RunStateError

__all__ = [
    "RELEASES_DEPENDANTS",
    "REUSABLE_FROM",
    "RUN_TERMINAL",
    "STEP_TERMINAL",
    "UNSETTLED",
    "WAITS_FOR_PERSON",
    "AttemptStatus",
    "DrivePhase",
    "ErrorKind",
    "RunStatus",
    "SkipReason",
    "StepStatus",
    "StopReason",
    "check_reuse",
    "check_run",
    "check_step",
    "releases",
    "step_exists",
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
    QUEUED = "queued"  # stored, waiting for a worker to claim it (no event yet)
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
    # an experiment's replay met a side effect its recording does not have (DESIGN §22):
    # the call was NOT made and the replay stops there
    NEEDS_LIVE_EFFECT = "needs_live_effect"


class StopReason(StrEnum):
    """Why a run's driver stops releasing steps (``Kernel.stopping``)."""

    FAILED = "failed"  # a step failed under fail_fast: compensate, then end failed
    CANCELLED = "cancelled"  # run.cancel(): cancel what runs, compensate, end cancelled
    ROLLBACK = "rollback"  # run.rollback(): compensate completed steps


class DrivePhase(StrEnum):
    """How a driver begins (``Kernel.drive``)."""

    START = "start"  # a new run: release the steps without dependencies
    RECOVER = "recover"  # a stored run taken over: reconcile interrupted calls, then go on
    ROLLBACK = "rollback"  # a finished run asked to roll back: compensate only


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
#: states that release a step's dependants: terminal success, even if since compensated
#: (a step skipped because its condition was false releases them too: see :func:`releases`)
RELEASES_DEPENDANTS = frozenset({S.SUCCEEDED, S.COMPENSATED, S.COMPENSATING,
                                 S.COMPENSATION_FAILED})
#: states in which only a person can move a step on (approve/reject, or resolve)
WAITS_FOR_PERSON = frozenset({S.WAITING_CONFIRMATION, S.IN_DOUBT})
#: states of a step the run still has to settle before it can end or suspend
UNSETTLED = frozenset({S.PENDING, S.READY, S.RUNNING, S.RETRY_WAIT, S.WAITING_CONFIRMATION})


def releases(status: StepStatus, reason: str | None) -> bool:
    """Whether a step in ``status`` (skipped for ``reason``) lets its dependants go on
    (DESIGN §4: terminal success, or skipped because its condition was false)."""
    return status in RELEASES_DEPENDANTS or (status == S.SKIPPED and reason == SkipReason.CONDITION)


_STEP: dict[StepStatus, frozenset[StepStatus]] = {
    S.PENDING: frozenset({S.READY, S.WAITING_CONFIRMATION, S.SKIPPED, S.CANCELLED, S.FAILED}),
    # FAILED: its preparation failed before any call (a for_each list that is not a list)
    S.READY: frozenset({S.RUNNING, S.CANCELLED, S.SKIPPED, S.WAITING_CONFIRMATION, S.FAILED}),
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
#: has not touched yet, or (an experiment's replay, DESIGN §22) a ready step whose args are
#: now known and whose side effect the recording answers. Kept out of the table above so no
#: live run can ever go pending -> succeeded without an attempt.
REUSABLE_FROM = frozenset({S.PENDING, S.READY})

R = RunStatus
RUN_TERMINAL = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED, R.ROLLED_BACK, R.ROLLBACK_FAILED})

_RUN: dict[RunStatus, frozenset[RunStatus]] = {
    # a worker's claim starts it (``run_started``; paused when enqueued paused) or it is
    # cancelled before any worker took it
    R.QUEUED: frozenset({R.RUNNING, R.PAUSED, R.CANCELLED}),
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


def step_exists(step_id: str) -> InvalidTransition:
    """The error for a graph that grows a step it already has (``steps_added``)."""
    return InvalidTransition(f"step {step_id!r} already exists: a graph grows only new steps")


def check_run(run_id: str, old: RunStatus, new: RunStatus) -> None:
    if new not in _RUN[old]:
        raise InvalidTransition(
            f"run {run_id!r}: {old} -> {new} is not a valid transition",
            run_id=run_id,
            status=str(old),
        )
