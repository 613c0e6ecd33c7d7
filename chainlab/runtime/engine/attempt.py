"""One attempt of a tool step, its whole life (DESIGN §5): :func:`run` emits ``step_started``,
calls the tool, classifies what went wrong, decides the step's fate and records the outcome,
parking the step or arming its back-off timer (:func:`start_timer`). The kernel's workers
call :func:`run` and nothing else; a new kind of attempt (a remote job) belongs here.

:func:`call_tool` is the one seam between the runtime and a tool body, for step attempts and
compensations alike: args validated, the call context passed, the write-ahead flush before a
side-effecting call, the executor call under its timeout, every exception classified into an
error kind, the output checked. It returns an :class:`Outcome`; it never touches the
scheduler. :func:`fate_of` turns a failure into a :class:`Fate` (retry, fail, in_doubt,
cancelled) by the safety rule:

a tool with side effects that is not idempotent is repeated only after an error raised before
any effect could happen (``invalid_input``, or a ToolError with ``before_effect=True``). A
timeout, a cancellation or an unknown failure of such a call leaves the step ``in_doubt`` for
a person, never a silent repeat. A PermanentError is the tool's own word that the call
failed, so the step fails.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
from pydantic import ValidationError

from chainlab.errors import RunStateError, ToolError
from chainlab.events import RUN_TERMINAL, EventKind, StepStatus
from chainlab.plan.schema import ErrorKind, RetryPolicy
from chainlab.runtime.engine.budget import check_budget
from chainlab.runtime.engine.executors import BodyBaseException, SubmittingExecutor
from chainlab.tools import CallContext, NotJSONError, args_hash, idempotency_key, to_json_value
from chainlab.tools.context import response_usage
from chainlab.tools.job import JOB_STATES, JobStatus, JobTool

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.executors import Executor, Pending
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.store.base import Store
    from chainlab.tools import Tool

K = EventKind
S = StepStatus

__all__ = ["Failure", "Fate", "Outcome", "call_tool", "cancel_job", "classify", "complete_job",
           "fate_of", "invalid_input", "record", "recover_job", "run", "run_job",
           "start_deferred_timers", "start_timer"]


class Fate(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    IN_DOUBT = "in_doubt"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Failure:
    """What went wrong with one attempt."""

    kind: ErrorKind
    message: str
    before_effect: bool = False


class Outcome(NamedTuple):
    """What one call of a tool gave: an output, or a failure. ``background``: a sync body
    that outlived its timeout and still runs in its thread (its slot, serial key and pool
    units stay held until it returns). A named tuple: one per attempt, built at C speed."""

    output: Any = None
    failure: Failure | None = None
    background: Pending | None = None
    usage: dict[str, Any] | None = None  # what the call reported it consumed (or None)

    @property
    def ok(self) -> bool:
        return self.failure is None


async def call_tool(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    *,
    executor: Executor,
    store: Store,
    timeout_s: float | None,
    check_output: bool = True,
    write_ahead: bool | None = None,
) -> Outcome:
    """Call ``tool`` once. Raises only what must stop the run's driver: StoreError
    (including StaleEpochError) from the write-ahead flush, the run's own cancellation, and
    KeyboardInterrupt/SystemExit; everything a tool raises becomes a :class:`Failure`."""
    try:
        kwargs = tool.validate_args(args)
    except ValidationError as exc:
        return Outcome(failure=invalid_input(exc, tool.name))
    if tool.context_param:
        kwargs[tool.context_param] = ctx
    if write_ahead is None:
        write_ahead = tool.side_effects and not tool.idempotent
    if write_ahead:
        # write-ahead: an unsafe call's start is durable before the world can change (a
        # store that cannot say so stops the run here; the tool was not called). An
        # idempotent step call is re-run after a crash under the same deterministic key,
        # so its start is group-committed with the other events (DESIGN §7)
        await store.flush(ctx.run_id, ctx.epoch)
    pending: Pending | None = None
    try:
        if timeout_s is not None and not tool.is_async \
                and isinstance(executor, SubmittingExecutor):
            pending = executor.submit(tool, kwargs, ctx)
            with anyio.move_on_after(timeout_s) as deadline:
                result = await pending.result()
        elif timeout_s is not None:
            with anyio.move_on_after(timeout_s) as deadline:
                result = await executor.call(tool, kwargs, ctx)
        else:
            deadline = None
            result = await executor.call(tool, kwargs, ctx)
        if deadline is not None and deadline.cancelled_caught:
            background = pending if pending is not None and not pending.finished else None
            return Outcome(
                failure=Failure(ErrorKind.TIMEOUT, f"no answer within timeout_s={timeout_s}"),
                background=background, usage=ctx.usage or None,
            )
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if _cancelled_from_outside(exc):
            raise  # run.cancel()/rollback(): the caller records the attempt
        return Outcome(failure=classify(exc, tool_name=tool.name), usage=ctx.usage or None)
    # a tool that reported nothing but returned an OpenAI-style response: its usage
    usage = ctx.usage or response_usage(result)
    if not check_output:
        return Outcome(output=result, usage=usage)
    try:
        return Outcome(output=tool.check_output(result), usage=usage)
    except Exception as exc:
        return Outcome(failure=bad_output(exc, tool.name, ctx.step_id), usage=usage)


def _cancelled_from_outside(exc: BaseException) -> bool:
    """A cancellation of this task (the run was cancelled, a timeout fired), as opposed to a
    tool body that raised CancelledError (a client library's cancelled task) or
    GeneratorExit: those are the tool's failures."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return True
    return task is None or task.cancelling() > 0


def classify(exc: BaseException, *, tool_name: str) -> Failure:
    """Map an exception from a tool call to an error kind."""
    if isinstance(exc, BodyBaseException):
        exc = exc.original
    if isinstance(exc, ToolError):
        return Failure(ErrorKind(exc.kind), _msg(exc), exc.before_effect)
    if isinstance(exc, TimeoutError | ConnectionError):
        return Failure(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {_msg(exc)}")
    return Failure(ErrorKind.EXECUTION_FAILED, f"{type(exc).__name__}: {_msg(exc)}")


def invalid_input(exc: ValidationError, tool_name: str) -> Failure:
    errors = exc.errors(include_url=False)
    parts = [f"{'.'.join(str(x) for x in e['loc']) or 'args'}: {e['msg']}" for e in errors[:4]]
    more = f" (+{len(errors) - 4} more)" if len(errors) > 4 else ""
    return Failure(
        ErrorKind.INVALID_INPUT,
        f"args do not fit tool {tool_name!r}: {'; '.join(parts)}{more}",
        True,
    )


def bad_output(exc: Exception, tool_name: str, step_id: str) -> Failure:
    if isinstance(exc, NotJSONError):
        return Failure(
            ErrorKind.EXECUTION_FAILED,
            f"step {step_id!r}: output of {tool_name!r} is not JSON-serialisable: "
            f"{exc}; return plain data or a pydantic model",
        )
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        return Failure(
            ErrorKind.EXECUTION_FAILED,
            f"step {step_id!r}: {tool_name!r} returned {_short(first.get('input'))}, "
            f"which does not match its return annotation: {first['msg']}",
        )
    return Failure(ErrorKind.EXECUTION_FAILED, f"step {step_id!r}: bad output: {exc}")


def fate_of(failure: Failure, tool: Tool, policy: RetryPolicy, attempt: int) -> Fate:
    """What happens to the step after ``attempt`` failed with ``failure``."""
    kind = failure.kind
    unsafe = tool.side_effects and not tool.idempotent
    if unsafe and not (kind == ErrorKind.INVALID_INPUT or failure.before_effect):
        return Fate.FAIL if kind == ErrorKind.PERMANENT else Fate.IN_DOUBT
    if kind == ErrorKind.CANCELLED:
        return Fate.CANCELLED
    if kind != ErrorKind.PERMANENT and kind in policy.retry_on and attempt < policy.max_attempts:
        return Fate.RETRY
    return Fate.FAIL


def _msg(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ============================================================================ a step's attempt
async def run(k: Kernel, node: Node) -> None:
    """One attempt of a tool step: step_started, the call, the outcome recorded; a body
    that outlived its timeout keeps the slot until it returns."""
    step_id = node.id
    tool = node.tool
    assert tool is not None
    st = k.steps[step_id]
    attempt = st.attempts + 1
    args = k.args.get(step_id)
    if args is None:
        args = k.args[step_id] = dict(st.args or {})
    # THE rule every path goes through (a start, a resume, a takeover, a fork, a decision
    # from another process): a step that needs a person runs only with an approval recorded
    # in THIS run for exactly these args; and its start is durable before the call, so a
    # driver that was taken over (fenced) learns it there and starts nothing
    confirm = node.fixed_confirm
    if confirm is None:
        confirm = node.needs_confirmation(args)
    confirm_first = k.state.confirm_first
    if confirm or (confirm_first and step_id in confirm_first):
        if st.approved_hash != args_hash(args):
            k.request_confirmation(node, args)  # (not approved for these args: ask again)
            k.sched.park(step_id)
            return
        confirm = True
    if (k.options.budget is not None or k.state.budget is not None) \
            and not check_budget(k, node, args):  # waits for a person: raise it, or stop
        k.sched.park(step_id)
        return
    # effect-free tools get a key only when they ask for it (nothing to deduplicate)
    key = (
        idempotency_key(k.run_id, step_id, args_hash(args))
        if tool.side_effects or tool.context_param or tool.reconcile
        or tool.__class__ is JobTool
        else None
    )
    if tool.__class__ is JobTool:  # a remote job: reserve, submit, record, then a timer
        await run_job(k, node, attempt, args, key or "")
        return
    k.emit(
        K.STEP_STARTED,
        step_id,
        attempt,
        {"args": args, "tool": tool.name, "idempotency_key": key, "code": tool.fingerprint},
    )
    ctx = CallContext(k.run_id, step_id, attempt, key or "", k.epoch, "call", {})
    try:
        outcome = await call_tool(
            tool, args, ctx, executor=k.executor, store=k.store, timeout_s=node.timeout_s,
            write_ahead=tool.side_effects and (confirm or not tool.idempotent),
        )
    except anyio.get_cancelled_exc_class():
        if k.stopping:  # run.cancel()/rollback(): record the attempt, then stop
            record(k, node, attempt,
                   Outcome(failure=Failure(ErrorKind.CANCELLED, "cancelled")))
        raise
    if outcome.failure is None and outcome.background is None:  # the common case, inline
        k.emit(K.STEP_SUCCEEDED, step_id, attempt, {"output": outcome.output}
               if outcome.usage is None else {"output": outcome.output, "usage": outcome.usage})
        k.finished(node)
        return
    record(k, node, attempt, outcome)
    if outcome.background is not None:
        k.background.append(step_id)
        try:
            await outcome.background.finished_wait()
        finally:
            k.background.remove(step_id)
        if k.state.status not in RUN_TERMINAL:
            k.emit(K.STEP_CALL_RETURNED, step_id, attempt)


def record(k: Kernel, node: Node, attempt: int, outcome: Outcome) -> None:
    """Record an attempt's outcome and act on it: succeeded, retry (back-off timer),
    in_doubt, cancelled or failed (DESIGN §5)."""
    step_id = node.id
    failure = outcome.failure
    if failure is None:
        payload: dict[str, Any] = {"output": outcome.output}
        if outcome.usage:
            payload["usage"] = outcome.usage
        k.emit(K.STEP_SUCCEEDED, step_id, attempt, payload)
        k.finished(node)
        return
    assert node.tool is not None
    fate = fate_of(failure, node.tool, node.retry, attempt)
    payload = {"error_kind": failure.kind, "error": failure.message}
    if outcome.usage:  # a failed call may have cost something too (the attempt's end event)
        payload["usage"] = outcome.usage
    if failure.kind == ErrorKind.TIMEOUT:
        extra = {"still_running": True} if outcome.background is not None else {}
        k.emit(K.STEP_TIMED_OUT, step_id, attempt, {**payload, **extra})
    if fate == Fate.RETRY and not k.stopping:
        delay = node.retry.delay(attempt)
        k.emit(
            K.STEP_RETRY_SCHEDULED,
            step_id,
            attempt,
            {
                **payload,
                "delay_s": delay,
                "due_at": k.clock.now() + delay,
                "next_attempt": attempt + 1,
            },
        )
        k.sched.park(step_id)
        start_timer(k, node, delay)
    elif fate == Fate.IN_DOUBT:
        reason = str(failure.kind)
        k.emit(K.STEP_IN_DOUBT, step_id, attempt, {**payload, "reason": reason})
        k.sched.park(step_id)
    elif fate in (Fate.CANCELLED, Fate.RETRY):  # RETRY here: the run is stopping
        k.emit(K.STEP_CANCELLED, step_id, attempt, {**payload, "reason": "cancelled"})
        if not k.stopping:  # when stopping, cancel_remaining settles the rest
            k.finished(node)
    else:
        k.emit(K.STEP_FAILED, step_id, attempt, payload)
        k.finished(node)


def start_timer(k: Kernel, node: Node, delay: float) -> None:
    """Ready the step again after ``delay`` seconds (a back-off: the step holds no slot)."""
    scope = anyio.CancelScope()
    k.timers[node.id] = scope
    if k.tg is None:  # recovery runs before the driver: start it with the driver
        k.deferred_timers.append((node, delay))
        return
    k.tg.start_soon(_backoff, k, node, delay, scope)


def start_deferred_timers(k: Kernel) -> None:
    """Start the back-offs recovery armed before the driver had a task group."""
    assert k.tg is not None
    for node, delay in k.deferred_timers:
        k.tg.start_soon(_backoff, k, node, delay, k.timers[node.id])
    k.deferred_timers.clear()


async def _backoff(k: Kernel, node: Node, delay: float, scope: anyio.CancelScope) -> None:
    try:
        with scope:
            await k.clock.sleep(delay)
            if k.steps[node.id].status == S.RETRY_WAIT and not k.stopping:
                k.emit(K.STEP_READY, node.id)
                k.make_ready(node)
                k.wake_workers(0)
    finally:
        k.timers.pop(node.id, None)
        k.poke()


# ============================================================================ a remote job
# (issue 27; the contract is chainlab.tools.job). One attempt of a job step:
#
#   run_job      (a worker, holding a slot) step_started; job_submitting, FLUSHED (the
#                write-ahead reservation, fenced: a driver taken over learns it here and
#                submits nothing); submit(args, ctx); job_submitted with the handle, FLUSHED
#                before any wait; then the waiter is armed and the worker RETURNS its slot
#   _wait_job    a timer task like a retry back-off (k.timers: holds no slot, worker or
#                thread): naps, polls (a short call), records progress sparingly
#                (job_progress, throttled), reads a stored completion (job_completed from
#                runtime.complete_job), and records the attempt's outcome with `record`
#   recover_job  after a crash: a recorded handle is only ever WAITED on again; a
#                reservation without a handle asks find(key), then resubmits under the
#                same key if the backend deduplicates, else leaves the step in_doubt
#
# A job's failures whose outcome is known (failed, cancelled elsewhere, not found, timed out
# and cancelled) are "before effect" for the retry rule: the job is over, so the retry
# policy may submit a NEW job, under a new key (``{key}/{attempt}``).

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


def _job_tool(node: Node) -> JobTool:
    tool = node.tool
    assert isinstance(tool, JobTool)
    return tool


async def run_job(k: Kernel, node: Node, attempt: int, args: dict[str, Any], key: str) -> None:
    """A job step's attempt as far as the worker goes: attach to a recorded handle, or
    reserve, submit and record; then arm the waiter (the slot goes back on return)."""
    step_id = node.id
    tool = _job_tool(node)
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


async def submit_job(k: Kernel, node: Node, attempt: int, args: dict[str, Any],
                     job_key: str) -> None:
    """Reserve (durable), submit, record the handle (durable), arm the waiter."""
    step_id = node.id
    tool = _job_tool(node)
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
        handle = to_json_value(outcome.output)
    except NotJSONError as exc:
        _job_in_doubt(k, node, attempt, "bad_handle",
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


def _handle_ok(k: Kernel, node: Node, attempt: int, handle: Any) -> bool:
    try:
        _job_tool(node).job.check_handle(handle)
    except (ValueError, TypeError) as exc:
        _job_in_doubt(k, node, attempt, "bad_handle",
                      f"step {node.id!r}: the handle {_short(handle)} of job "
                      f"{_job_tool(node).name!r} fails validation ({_first_line(exc)}); it "
                      "is recorded and the job may be running: fix handle_type or the job, "
                      "then resolve(retry=True) to wait on it again, or resolve the step")
        return False
    return True


def _job_in_doubt(k: Kernel, node: Node, attempt: int, reason: str, error: str) -> None:
    k.emit(K.STEP_IN_DOUBT, node.id, attempt,
           {"reason": reason, "error_kind": ErrorKind.EXECUTION_FAILED, "error": error})
    k.sched.park(node.id)


def arm_job(k: Kernel, node: Node, attempt: int, first_delay: float) -> None:
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


async def _wait_job(k: Kernel, node: Node, attempt: int, first_delay: float,
                    scope: anyio.CancelScope, waiter: _Waiter) -> None:
    step_id = node.id
    tool = _job_tool(node)
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
        _job_in_doubt(k, node, attempt, "poll_failed", outcome.failure.message)  # type: ignore[union-attr]
        return
    k.emit(K.JOB_PROGRESS, step_id, attempt,
           {"state": state, "polls": polls, "poll_errors": errors, "ended": True,
            **({"progress": 1.0} if state == "succeeded" else {})})
    if state == "not_found" and spec.on_not_found == "resubmit" and not k.stopping:
        k.emit(K.STEP_READY, step_id, attempt, {"recovery": "resubmit_not_found"})
        k.make_ready(node)
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
        return None, f"poll raised {type(exc).__name__}: {_msg(exc)}"
    if not isinstance(status, JobStatus) or status.state not in JOB_STATES:
        return None, (f"poll of {name!r} returned {_short(status)}, not a JobStatus; return "
                      "JobStatus.pending(), .running(progress=...), .succeeded(output), "
                      ".failed(message), .cancelled() or .not_found()")
    return status, None


async def _send_cancel(spec: Any, handle: Any, ctx: CallContext) -> str:
    """Best effort ``cancel(handle)``; what happened, for the record."""
    if spec.cancel is None:
        return "not sent (the job has no cancel)"
    try:
        await spec.call("cancel", handle, ctx)
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {_msg(exc)}"
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


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def complete_job(k: Kernel, step_id: str, payload: dict[str, Any]) -> None:
    """Record a completion from outside (a callback) for a waiting job, checked by the
    caller (``decisions.check_completion``): kept in the log (``job_completed``) until its
    waiter reads it, so one that arrives before the waiter is armed is not lost."""
    k.emit(K.JOB_COMPLETED, step_id, k.steps[step_id].attempts, payload)
    waiter = k.jobs.get(step_id)
    if waiter is not None:
        waiter.nudge()
    k.poke()


def cancel_job(k: Kernel, step_id: str) -> None:
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


async def recover_job(k: Kernel, node: Node) -> None:
    """After a restart, a job step whose attempt was under way (recovery parked it):
    a recorded handle is waited on again, never submitted; a reservation without a handle
    asks ``find(key)`` -> attach; else resubmits under the same key when the backend
    deduplicates by key; else the step is in_doubt for a person."""
    step_id = node.id
    st = k.steps[step_id]
    if st.status != S.RUNNING:
        return  # a person decided meanwhile
    tool = _job_tool(node)
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
            why = f"find(key) raised {type(exc).__name__}: {_msg(exc)}"
    if found is not None:
        try:
            handle = to_json_value(found)
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
    _job_in_doubt(k, node, attempt, ErrorKind.INTERRUPTED,
                  f"the process stopped between reserving job {tool.name!r} under key {key!r} "
                  f"and recording its handle; {why}, and the backend does not deduplicate by "
                  "key, so the job may or may not have been submitted: check the backend, "
                  "then resolve(retry=True) to submit it again (same key), or resolve the "
                  "step with its output or as failed")
