"""One call of a tool body and how what went wrong is classified (DESIGN §5).

:func:`call_tool` is the one seam between the runtime and a tool body, for step attempts and
compensations alike: args validated, the call context passed, the write-ahead flush before a
side-effecting call, the executor call under its timeout, every exception classified into an
error kind (:func:`classify`), the output checked. It returns an :class:`Outcome`; it never
touches the scheduler. What a failure means for the step is :mod:`.fate`'s rule.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
from pydantic import ValidationError

from chainlab._json import clean_text
from chainlab._text import safe_repr
from chainlab.errors import ToolError
from chainlab.events.usage import normalize_usage
from chainlab.plan.schema import ErrorKind
from chainlab.runtime.engine.executors import (
    AWAITS_ON_LOOP,
    BodyBaseException,
    SubmittingExecutor,
)
from chainlab.tools import CallContext, NotJSONError
from chainlab.tools.context import response_usage

if TYPE_CHECKING:
    from chainlab.runtime.engine.executors import Executor, Pending
    from chainlab.store.base import Store
    from chainlab.tools import Tool

__all__ = ["Failure", "Outcome", "bad_output", "call_tool", "classify", "error_text",
           "invalid_input", "short_repr"]


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


_new_tuple = tuple.__new__  # a named tuple built without its Python-level __new__
# outputs that carry no usage (response_usage would say None: not called for them)
_PLAIN = frozenset({int, float, str, bool, list, tuple, type(None)})


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
        if timeout_s is None and tool.is_async and type(executor).call is AWAITS_ON_LOOP:
            # the common call (async, no timeout, an executor that would only await it on
            # this loop): awaited here, one coroutine fewer per step
            deadline = None
            result = await tool.fn(**kwargs)
        elif timeout_s is not None and not tool.is_async \
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
                background=background, usage=_reported(ctx),
            )
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if _cancelled_from_outside(exc):
            raise  # run.cancel()/rollback(): the caller records the attempt
        return Outcome(failure=classify(exc, tool_name=tool.name), usage=_reported(ctx))
    # a tool that reported nothing but returned an OpenAI-style response: its usage
    try:
        usage = (_reported(ctx, strict=True) if ctx.usage else None) or (
            None if result.__class__ in _PLAIN else response_usage(result))
    except ValueError as exc:
        return Outcome(failure=Failure(ErrorKind.EXECUTION_FAILED,
                                       f"step {ctx.step_id!r}: the usage {tool.name!r} "
                                       f"reported is refused: {exc}"))
    if not check_output:
        return Outcome(output=result, usage=usage)
    try:
        return _new_tuple(Outcome, (tool.check_output(result), None, None, usage))
    except Exception as exc:
        return Outcome(failure=bad_output(exc, tool.name, ctx.step_id), usage=usage)


def _reported(ctx: CallContext, *, strict: bool = False) -> dict[str, Any] | None:
    """What the call reported it consumed, through the gate (``report_usage`` checks each
    report; a body that wrote into ``ctx.usage`` itself is checked here). A bad usage raises
    ValueError when ``strict``, else it is left out (the call failed anyway)."""
    if not ctx.usage:
        return None
    try:
        return normalize_usage(ctx.usage)
    except ValueError:
        if strict:
            raise
        return None


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
        return Failure(ErrorKind(exc.kind), error_text(exc), exc.before_effect)
    if isinstance(exc, TimeoutError | ConnectionError):
        return Failure(ErrorKind.TRANSIENT, f"{type(exc).__name__}: {error_text(exc)}")
    return Failure(ErrorKind.EXECUTION_FAILED, f"{type(exc).__name__}: {error_text(exc)}")


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
            f"step {step_id!r}: the output of {tool_name!r} is refused (not JSON data "
            f"chainlab can keep): {exc}",
        )
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        return Failure(
            ErrorKind.EXECUTION_FAILED,
            f"step {step_id!r}: {tool_name!r} returned {short_repr(first.get('input'))}, "
            f"which does not match its return annotation: {first['msg']}",
        )
    return Failure(ErrorKind.EXECUTION_FAILED,
                   f"step {step_id!r}: bad output: {error_text(exc)}")



def error_text(exc: BaseException) -> str:
    """An exception's text for a record, at most 2000 characters, storable (a surrogate in
    it is replaced: a message is for a person, never refused)."""
    try:
        text = str(exc) or type(exc).__name__
    except Exception:  # a broken __str__ (or an int too long to show)
        text = type(exc).__name__
    text = clean_text(text if len(text) <= 2000 else text[:1997] + "...")
    return text


def short_repr(value: object) -> str:
    """A value's repr for a message, at most 60 characters (never raises)."""
    return safe_repr(value, 60)
