"""What an attempt's outcome means for its step, and how it is recorded (DESIGN §5).

:func:`fate_of` turns a failure into a :class:`Fate` (retry, fail, in_doubt, cancelled) by the
safety rule:

a tool with side effects that is not idempotent is repeated only after an error raised before
any effect could happen (``invalid_input``, or a ToolError with ``before_effect=True``). A
timeout, a cancellation or an unknown failure of such a call leaves the step ``in_doubt`` for
a person, never a silent repeat. A PermanentError is the tool's own word that the call
failed, so the step fails.

:func:`record` writes an attempt's outcome and acts on its fate: the step finished, parked
``in_doubt``, or parked with its back-off timer (:func:`start_timer`). A tool call (this
package), a remote job (:mod:`..job.wait`) and an agent's model turn (:mod:`..agent`) record
through it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.events import EventKind, StepStatus
from chainlab.plan.schema import ErrorKind, RetryPolicy
from chainlab.runtime.engine.flow import finished, make_ready

if TYPE_CHECKING:
    from chainlab.runtime.engine.attempt.call.seam import Failure, Outcome
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore
    from chainlab.tools import Tool

K = EventKind
S = StepStatus

__all__ = ["Fate", "fate_of", "record", "start_deferred_timers", "start_timer"]


class Fate(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    IN_DOUBT = "in_doubt"
    CANCELLED = "cancelled"


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


def record(k: RunCore, node: Node, attempt: int, outcome: Outcome,
           tries: int | None = None) -> None:
    """Record an attempt's outcome and act on it: succeeded, retry (back-off timer),
    in_doubt, cancelled or failed (DESIGN §5). ``tries``: which try of this call the attempt
    was, when a step makes several calls (an agent step's model turns; default: the
    attempt's number): the retry policy counts those."""
    step_id = node.id
    failure = outcome.failure
    if failure is None:
        payload: dict[str, Any] = {"output": outcome.output}
        if outcome.usage:
            payload["usage"] = outcome.usage
        k.emit(K.STEP_SUCCEEDED, step_id, attempt, payload)
        finished(k, node)
        return
    assert node.tool is not None
    tries = tries or attempt
    fate = fate_of(failure, node.tool, node.retry, tries)
    payload = {"error_kind": failure.kind, "error": failure.message}
    if outcome.usage:  # a failed call may have cost something too (the attempt's end event)
        payload["usage"] = outcome.usage
    if failure.kind == ErrorKind.TIMEOUT:
        extra = {"still_running": True} if outcome.background is not None else {}
        k.emit(K.STEP_TIMED_OUT, step_id, attempt, {**payload, **extra})
    if fate == Fate.RETRY and not k.stopping:
        delay = node.retry.delay(tries)
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
            finished(k, node)
    else:
        k.emit(K.STEP_FAILED, step_id, attempt, payload)
        finished(k, node)


def start_timer(k: RunCore, node: Node, delay: float) -> None:
    """Ready the step again after ``delay`` seconds (a back-off: the step holds no slot)."""
    scope = anyio.CancelScope()
    k.timers[node.id] = scope
    if k.tg is None:  # recovery runs before the driver: start it with the driver
        k.deferred_timers.append((node, delay))
        return
    k.tg.start_soon(_backoff, k, node, delay, scope)


def start_deferred_timers(k: RunCore) -> None:
    """Start the back-offs recovery armed before the driver had a task group."""
    assert k.tg is not None
    for node, delay in k.deferred_timers:
        k.tg.start_soon(_backoff, k, node, delay, k.timers[node.id])
    k.deferred_timers.clear()


async def _backoff(k: RunCore, node: Node, delay: float, scope: anyio.CancelScope) -> None:
    try:
        with scope:
            await k.clock.sleep(delay)
            if k.steps[node.id].status == S.RETRY_WAIT and not k.stopping:
                k.emit(K.STEP_READY, node.id)
                make_ready(k, node)
                k.wake_workers(0)
    finally:
        k.timers.pop(node.id, None)
        k.poke()
