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

from chainlab.errors import ToolError
from chainlab.events import RUN_TERMINAL, EventKind, StepStatus
from chainlab.plan.schema import ErrorKind, RetryPolicy
from chainlab.runtime.engine.budget import check_budget
from chainlab.runtime.engine.executors import BodyBaseException, SubmittingExecutor
from chainlab.tools import CallContext, NotJSONError, args_hash, idempotency_key
from chainlab.tools.context import response_usage

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.executors import Executor, Pending
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.store.base import Store
    from chainlab.tools import Tool

K = EventKind
S = StepStatus

__all__ = ["Failure", "Fate", "Outcome", "call_tool", "classify", "fate_of", "invalid_input",
           "record", "run", "start_deferred_timers", "start_timer"]


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
        else None
    )
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
