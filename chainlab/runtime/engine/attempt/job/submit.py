"""A remote job's submission (issue 27; the contract is :mod:`chainlab.tools.job`): once,
and after a crash only when it is safe. One attempt of a job step:

  run_job      (a worker, holding a slot) step_started; job_submitting, FLUSHED (the
               write-ahead reservation, fenced: a driver taken over learns it here and
               submits nothing); submit(args, ctx); job_submitted with the handle, FLUSHED
               before any wait; then the waiter is armed (:func:`.wait.arm_job`) and the
               worker RETURNS its slot
  recover_job  after a crash: a recorded handle is only ever WAITED on again; a
               reservation without a handle asks find(key), then resubmits under the
               same key if the backend deduplicates, else leaves the step in_doubt
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from chainlab.events import EventKind, StepStatus
from chainlab.plan.schema import ErrorKind
from chainlab.runtime.engine.attempt.call.fate import record
from chainlab.runtime.engine.attempt.call.seam import (
    Failure,
    Outcome,
    call_tool,
    error_text,
    short_repr,
)
from chainlab.runtime.engine.attempt.job.wait import arm_job, job_in_doubt, job_tool
from chainlab.tools import CallContext, NotJSONError, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

K = EventKind
S = StepStatus

__all__ = ["recover_job", "run_job", "submit_job"]


async def run_job(k: RunCore, node: Node, attempt: int, args: dict[str, Any], key: str) -> None:
    """A job step's attempt as far as the worker goes: attach to a recorded handle, or
    reserve, submit and record; then arm the waiter (the slot goes back on return)."""
    step_id = node.id
    tool = job_tool(node)
    prev = k.steps[step_id].job
    if prev is not None and prev["phase"] == "waiting" and prev["handle"] is not None:
        # a recorded handle (a person retried a step whose polls failed): wait on it again
        k.emit(K.STEP_STARTED, step_id, attempt,
               {"args": args, "tool": tool.name, "idempotency_key": prev["key"],
                "code": tool.fingerprint, "job": "attach"})
        k.emit(K.JOB_SUBMITTED, step_id, attempt,
               {"handle": prev["handle"], "key": prev["key"], "how": "attached",
                "submitted_at": prev["submitted_at"]})
        await k.commit()
        arm_job(k, node, attempt, 0.0)
        return
    if prev is not None and prev["phase"] == "submitting":
        job_key = prev["key"] or key  # resubmit what was reserved: the same key
    elif prev is not None:
        job_key = f"{key}/{attempt}"  # the last job is over: a new job, a new key
    else:
        job_key = key
    k.emit(K.STEP_STARTED, step_id, attempt,
           {"args": args, "tool": tool.name, "idempotency_key": job_key,
            "code": tool.fingerprint})
    await submit_job(k, node, attempt, args, job_key)


async def submit_job(k: RunCore, node: Node, attempt: int, args: dict[str, Any],
                     job_key: str) -> None:
    """Reserve (durable), submit, record the handle (durable), arm the waiter."""
    step_id = node.id
    tool = job_tool(node)
    spec = tool.job
    k.emit(K.JOB_SUBMITTING, step_id, attempt, {"key": job_key})
    await k.commit()  # the reservation is durable before the world can change
    ctx = CallContext(k.run_id, step_id, attempt, job_key, k.epoch)
    try:
        outcome = await call_tool(tool, args, ctx, executor=k.executor, store=k.store,
                                  timeout_s=spec.call_timeout_s, check_output=False,
                                  write_ahead=False)
    except anyio.get_cancelled_exc_class():
        if k.stopping:
            record(k, node, attempt, Outcome(failure=Failure(ErrorKind.CANCELLED, "cancelled")))
        raise
    if outcome.failure is not None:
        failure = outcome.failure
        if spec.dedupe_by_key and failure.kind != ErrorKind.PERMANENT:
            # the backend deduplicates by key: submitting again under it is safe
            failure = Failure(failure.kind, failure.message, True)
        record(k, node, attempt, Outcome(failure=failure))
        return
    try:
        handle = _handle(outcome.output)
    except NotJSONError as exc:
        job_in_doubt(k, node, attempt, "bad_handle",
                     f"step {step_id!r}: submit of job {tool.name!r} returned a handle that is "
                     f"not JSON data ({exc}); the job may be running: return a dict of plain "
                     "data from submit, then resolve the step (retry submits again under "
                     f"the same key {job_key!r})")
        return
    k.emit(K.JOB_SUBMITTED, step_id, attempt,
           {"handle": handle, "key": job_key, "how": "submitted"})
    await k.commit()  # the handle is durable before any wait
    if not _handle_ok(k, node, attempt, handle):
        return
    arm_job(k, node, attempt, spec.poll_every_s)


def _handle(value: Any) -> Any:
    """A job's handle through the value gate; null is no handle (a waiter needs one)."""
    handle = to_json_value(value, "handle")
    if handle is None:
        raise NotJSONError("handle", None, "no handle: submit must return what poll needs")
    return handle


def _handle_ok(k: RunCore, node: Node, attempt: int, handle: Any) -> bool:
    try:
        job_tool(node).job.check_handle(handle)
    except (ValueError, TypeError) as exc:
        job_in_doubt(k, node, attempt, "bad_handle",
                     f"step {node.id!r}: the handle {short_repr(handle)} of job "
                     f"{job_tool(node).name!r} fails validation ({_first_line(exc)}); it "
                     "is recorded and the job may be running: fix handle_type or the job, "
                     "then resolve(retry=True) to wait on it again, or resolve the step")
        return False
    return True


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


async def recover_job(k: RunCore, node: Node) -> None:
    """After a restart, a job step whose attempt was under way (recovery parked it):
    a recorded handle is waited on again, never submitted; a reservation without a handle
    asks ``find(key)`` -> attach; else resubmits under the same key when the backend
    deduplicates by key; else the step is in_doubt for a person."""
    step_id = node.id
    st = k.steps[step_id]
    if st.status != S.RUNNING:
        return  # a person decided meanwhile
    tool = job_tool(node)
    spec = tool.job
    job = st.job
    attempt = st.attempts
    assert job is not None
    key = job["key"] or ""
    if job["handle"] is not None:
        if not _handle_ok(k, node, attempt, job["handle"]):
            return
        k.emit(K.JOB_PROGRESS, step_id, attempt, {"reattached": True})
        arm_job(k, node, attempt, 0.0)
        return
    ctx = CallContext(k.run_id, step_id, attempt, key, k.epoch)
    found, why = None, "the job has no find"
    if spec.find is not None:
        try:
            found = await spec.call("find", key, ctx)
            why = "find(key) found nothing"
        except Exception as exc:
            why = f"find(key) raised {type(exc).__name__}: {error_text(exc)}"
    if found is not None:
        try:
            handle = _handle(found)
        except NotJSONError as exc:
            why = f"find(key) returned a handle that is not JSON data ({exc})"
        else:
            k.emit(K.JOB_SUBMITTED, step_id, attempt, {"handle": handle, "key": key,
                                                      "how": "found"})
            await k.commit()
            if _handle_ok(k, node, attempt, handle):
                arm_job(k, node, attempt, 0.0)
            return
    if spec.dedupe_by_key:
        await submit_job(k, node, attempt, dict(st.args or {}), key)
        return
    job_in_doubt(k, node, attempt, ErrorKind.INTERRUPTED,
                 f"the process stopped between reserving job {tool.name!r} under key {key!r} "
                 f"and recording its handle; {why}, and the backend does not deduplicate by "
                 "key, so the job may or may not have been submitted: check the backend, "
                 "then resolve(retry=True) to submit it again (same key), or resolve the "
                 "step with its output or as failed")
