"""Attempts: classify a failure, and decide retry vs fail vs in_doubt (DESIGN §5).

The safety rule: a tool with side effects that is not idempotent is repeated only after an
error raised before any effect could happen (``invalid_input``, or a ToolError with
``before_effect=True``). A timeout, a cancellation or an unknown failure of such a call
leaves the step ``in_doubt`` for a person to resolve, never a silent repeat. A
PermanentError is the tool's own word that the call failed, so the step fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import ValidationError

from chainlab.errors import ToolError
from chainlab.plan.schema import ErrorKind, RetryPolicy
from chainlab.tools import NotJSONError

if TYPE_CHECKING:
    from chainlab.tools import Tool

__all__ = ["Failure", "Fate", "classify", "decide"]


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


def classify(exc: BaseException, *, tool_name: str) -> Failure:
    """Map an exception from a tool call to an error kind."""
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


def decide(failure: Failure, tool: Tool, policy: RetryPolicy, attempt: int) -> Fate:
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
