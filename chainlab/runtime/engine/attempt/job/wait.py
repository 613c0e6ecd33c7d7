"""A remote job's wait (issue 27; the contract is :mod:`chainlab.tools.job`), once its
handle is recorded (:mod:`.submit` submits it, or finds it again after a crash):

  arm_job      parks the step and starts its waiter, a timer task like a retry back-off
               (``k.timers``: holds no slot, worker or thread)
  _wait_job    naps, polls (a short call; failed polls back off), records progress sparingly
               (``job_progress``, throttled), reads a stored completion (``job_completed``
               from :func:`complete_job`), honours :func:`cancel_job` and the step's
               timeout, and records the attempt's outcome with :func:`..call.fate.record`

A job's failures whose outcome is known (failed, cancelled elsewhere, not found, timed out
and cancelled) are "before effect" for the retry rule: the job is over, so the retry
policy may submit a NEW job, under a new key (``{key}/{attempt}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunStateError
from chainlab.events import EventKind
from chainlab.plan.schema import ErrorKind
from chainlab.runtime.engine.attempt.call.fate import record
from chainlab.runtime.engine.attempt.call.seam import (
    Failure,
    Outcome,
    bad_output,
    error_text,
    short_repr,
)
from chainlab.runtime.engine.flow import make_ready
from chainlab.tools import CallContext
from chainlab.tools.job import JOB_STATES, JobStatus, JobTool

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

K = EventKind

__all__ = ["arm_job", "cancel_job", "complete_job", "job_in_doubt", "job_tool"]


_INF = float("inf")


class _Waiter:
    """What ``complete_job`` needs to end a waiting job's nap early."""

    __slots__ = ("cancel_asked", "nap", "nudged")

    def __init__(self) -> None:
        self.nap: anyio.CancelScope | None = None
        self.nudged = False
        self.cancel_asked = False  # a person cancelled this one job (run.cancel_job)

    def nudge(self) -> None:
        self.nudged = True
        if self.nap is not None:
            self.nap.cancel()


def job_tool(node: Node) -> JobTool:
    """The job tool of a job step."""
    tool = node.tool
    assert isinstance(tool, JobTool)
    return tool


def job_in_doubt(k: RunCore, node: Node, attempt: int, reason: str, error: str) -> None:
    """The job step waits for a person (its job may be running: the handle is kept)."""
    k.emit(K.STEP_IN_DOUBT, node.id, attempt,
           {"reason": reason, "error_kind": ErrorKind.EXECUTION_FAILED, "error": error})
    k.sched.park(node.id)


def arm_job(k: RunCore, node: Node, attempt: int, first_delay: float) -> None:
    """Start the waiter of a recorded job: a timer task, the step parked (holds nothing)."""
    scope = anyio.CancelScope()
    waiter = _Waiter()
    k.timers[node.id] = scope
    k.jobs[node.id] = waiter
    k.sched.park(node.id)
    assert k.tg is not None, "a job is armed by a worker or by the recovering driver"
    k.tg.start_soon(_wait_job, k, node, attempt, first_delay, scope, waiter)
    if k.stopping:
        scope.cancel()  # a stopping run cancels it at once (cancel(handle) is sent)


async def _wait_job(k: RunCore, node: Node, attempt: int, first_delay: float,
                    scope: anyio.CancelScope, waiter: _Waiter) -> None:
    step_id = node.id
    tool = job_tool(node)
    spec = tool.job
    st = k.steps[step_id]
    job = st.job
    assert job is not None and job["handle"] is not None
    handle = job["handle"]
    ctx = CallContext(k.run_id, step_id, attempt, job["key"] or "", k.epoch)
    polls, errors = int(job["polls"] or 0), int(job["poll_errors"] or 0)
    shown = (job["state"], job["progress"], job["note"])
    last_emit = -_INF
    deadline = None if node.timeout_s is None else (job["submitted_at"] or k.clock.now()) \
        + node.timeout_s
    delay = first_delay
    end: tuple[str, Outcome] | None = None  # (final job state, outcome)
    try:
        with scope:
            while True:
                if delay > 0 and not waiter.nudged and job["completion"] is None:
                    nap = delay if deadline is None else max(0.0, min(delay,
                                                                      deadline - k.clock.now()))
                    waiter.nap = anyio.CancelScope()
                    with waiter.nap:
                        await k.clock.sleep(nap)
                    waiter.nap = None
                if job["completion"] is not None:
                    end = _from_completion(tool, step_id, job["completion"])
                    break
                if waiter.cancel_asked:  # this job only: cancelled where it runs, step fails
                    note = await _send_cancel(spec, handle, ctx)
                    end = ("cancelled", Outcome(failure=Failure(
                        ErrorKind.PERMANENT, f"the job was cancelled by a person; cancel(handle) "
                        f"{note}", True)))
                    break
                if deadline is not None and k.clock.now() >= deadline:
                    note = await _send_cancel(spec, handle, ctx)
                    end = ("timed_out", Outcome(failure=Failure(
                        ErrorKind.TIMEOUT, f"job did not finish within timeout_s="
                        f"{node.timeout_s}; cancel(handle) {note}", True)))
                    break
                status, error = await _poll_once(spec, tool.name, handle, ctx)
                polls += 1
                if error is not None:
                    errors += 1
                    k.emit(K.JOB_PROGRESS, step_id, attempt,
                           {"polls": polls, "poll_errors": errors, "error": error})
                    if errors >= spec.max_poll_errors:
                        end = ("poll_failed", Outcome(failure=Failure(
                            ErrorKind.EXECUTION_FAILED,
                            f"step {step_id!r}: {errors} polls of job {tool.name!r} failed in "
                            f"a row, the last: {error}; the handle is recorded and the job may "
                            "still run: fix poll, then resolve(retry=True) to wait on it "
                            "again, or resolve the step with its output or as failed")))
                        break
                    delay = min(spec.poll_every_s * 2 ** errors, spec.max_poll_every_s)
                    continue
                assert status is not None
                errors = 0
                if status.ended:
                    end = _from_status(tool, step_id, status)
                    break
                now = k.clock.now()
                seen = (status.state, status.progress, status.note)
                if seen != shown and (status.state != shown[0]
                                      or now - last_emit >= spec.progress_every_s):
                    k.emit(K.JOB_PROGRESS, step_id, attempt,
                           {"state": status.state, "progress": status.progress,
                            "note": status.note, "polls": polls, "poll_errors": 0})
                    shown, last_emit = seen, now
                delay = spec.poll_every_s
        if scope.cancelled_caught and end is None:  # the run stops: cancel it where it runs
            with anyio.CancelScope(shield=True):
                note = await _send_cancel(spec, handle, ctx)
            k.emit(K.JOB_PROGRESS, step_id, attempt,
                   {"state": "cancelled", "polls": polls, "ended": True,
                    "note": f"cancel(handle) {note}"})
            # cancelled where it runs: the step is cancelled; a cancel that could not be
            # sent leaves an unsafe job in_doubt (it may still run)
            record(k, node, attempt, Outcome(failure=Failure(
                ErrorKind.CANCELLED, f"cancelled while waiting; cancel(handle) {note}",
                note == "sent")))
            return
    finally:
        k.timers.pop(step_id, None)
        k.jobs.pop(step_id, None)
        k.poke()
    assert end is not None
    state, outcome = end
    if state == "poll_failed":
        job_in_doubt(k, node, attempt, "poll_failed", outcome.failure.message)  # type: ignore[union-attr]
        return
    k.emit(K.JOB_PROGRESS, step_id, attempt,
           {"state": state, "polls": polls, "poll_errors": errors, "ended": True,
            **({"progress": 1.0} if state == "succeeded" else {})})
    if state == "not_found" and spec.on_not_found == "resubmit" and not k.stopping:
        k.emit(K.STEP_READY, step_id, attempt, {"recovery": "resubmit_not_found"})
        make_ready(k, node)
        k.wake_workers(0)
        return
    record(k, node, attempt, outcome)
    k.wake_workers(0)


async def _poll_once(spec: Any, name: str, handle: Any, ctx: CallContext
                     ) -> tuple[JobStatus | None, str | None]:
    """One poll: (status, None), or (None, what went wrong) for a poll that raised, timed
    out or answered something that is not a JobStatus."""
    try:
        status = await spec.call("poll", handle, ctx)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        if isinstance(exc, TimeoutError):
            return None, f"poll gave no answer within call_timeout_s={spec.call_timeout_s}"
        return None, f"poll raised {type(exc).__name__}: {error_text(exc)}"
    if not isinstance(status, JobStatus) or status.state not in JOB_STATES:
        return None, (f"poll of {name!r} returned {short_repr(status)}, not a JobStatus; return "
                      "JobStatus.pending(), .running(progress=...), .succeeded(output), "
                      ".failed(message), .cancelled() or .not_found()")
    try:
        return status.checked(), None  # (the value gate's rules for what a poll says)
    except ValueError as exc:
        return None, f"poll of {name!r} returned a status that cannot be kept: {exc}"


async def _send_cancel(spec: Any, handle: Any, ctx: CallContext) -> str:
    """Best effort ``cancel(handle)``; what happened, for the record."""
    if spec.cancel is None:
        return "not sent (the job has no cancel)"
    try:
        await spec.call("cancel", handle, ctx)
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {error_text(exc)}"
    return "sent"


def _from_status(tool: JobTool, step_id: str, status: JobStatus) -> tuple[str, Outcome]:
    if status.state == "succeeded":
        return "succeeded", _checked(tool, step_id, status.output)
    if status.state == "failed":
        try:
            kind = ErrorKind(status.kind or ErrorKind.EXECUTION_FAILED)
        except ValueError:
            kind = ErrorKind.EXECUTION_FAILED
        return "failed", Outcome(failure=Failure(kind, f"the job failed: {status.message}", True))
    if status.state == "cancelled":
        return "cancelled", Outcome(failure=Failure(
            ErrorKind.EXECUTION_FAILED, "the job was cancelled outside this run"
            + (f": {status.note}" if status.note else ""), True))
    return "not_found", Outcome(failure=Failure(
        ErrorKind.PERMANENT, f"the backend does not know the job any more"
        f"{': ' + status.note if status.note else ''}; on_not_found='resubmit' submits it again "
        "under a new key", True))


def _from_completion(tool: JobTool, step_id: str, comp: dict[str, Any]) -> tuple[str, Outcome]:
    if comp.get("error") is not None:
        return "failed", Outcome(failure=Failure(
            ErrorKind.EXECUTION_FAILED, f"the job failed (completion): {comp['error']}", True))
    return "succeeded", _checked(tool, step_id, comp.get("output"))


def _checked(tool: JobTool, step_id: str, output: Any) -> Outcome:
    try:
        return Outcome(output=tool.check_output(output))
    except Exception as exc:
        return Outcome(failure=bad_output(exc, tool.name, step_id))


def complete_job(k: RunCore, step_id: str, payload: dict[str, Any]) -> None:
    """Record a completion from outside (a callback) for a waiting job, checked by the
    caller (``decisions.check_completion``): kept in the log (``job_completed``) until its
    waiter reads it, so one that arrives before the waiter is armed is not lost."""
    k.emit(K.JOB_COMPLETED, step_id, k.steps[step_id].attempts, payload)
    waiter = k.jobs.get(step_id)
    if waiter is not None:
        waiter.nudge()
    k.poke()


def cancel_job(k: RunCore, step_id: str) -> None:
    """Cancel one waiting job (``run.cancel_job``): its waiter sends ``cancel(handle)`` and
    the step fails (``permanent``: not retried); the run goes on as after any failure.
    Raises RunStateError when the step is not a job that waits."""
    waiter = k.jobs.get(step_id)
    if waiter is None:
        st = k.steps[step_id]
        raise RunStateError(
            f"cannot cancel the job of step {step_id!r}: it is {st.status}, not a remote job "
            f"that waits (waiting jobs: {', '.join(k.jobs) or 'none'})",
            run_id=k.run_id, status=str(st.status))
    waiter.cancel_asked = True
    waiter.nudge()
