"""One attempt of a tool step, from ``step_started`` to its outcome (DESIGN §5).

Functions over the kernel (like saga.py and recovery.py): the kernel decides WHEN a step
runs; this module decides what running it means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from chainlab.errors import StaleEpochError
from chainlab.plan.schema import ErrorKind
from chainlab.runtime import attempts as att
from chainlab.tools import CallContext, args_hash, idempotency_key

if TYPE_CHECKING:
    from chainlab.runtime.graph import Node
    from chainlab.runtime.kernel import Kernel

__all__ = ["attempt_failed", "run_attempt"]


async def run_attempt(k: Kernel, node: Node) -> None:
    """One attempt of a tool step: args validated, write-ahead flush for side effects, the
    call (with its timeout), the output checked, the outcome recorded."""
    nid = node.id
    tool = node.tool
    assert tool is not None
    st = k.steps[nid]
    attempt = st.attempts + 1
    args = k.args.get(nid)
    if args is None:
        args = k.args[nid] = dict(st.args or {})
    # effect-free tools get a key only when they ask for it (nothing to deduplicate)
    key = (
        idempotency_key(k.run_id, nid, args_hash(args))
        if tool.side_effects or tool.context_param or tool.reconcile
        else None
    )
    k.emit("step_started", nid, attempt, {"args": args, "tool": tool.name, "idempotency_key": key})
    failure: att.Failure | None = None
    output: Any = None
    called = False
    try:
        kwargs = tool.validate_args(args)
    except ValidationError as exc:
        failure = att.invalid_input(exc, tool.name)
    else:
        ctx = CallContext(k.run_id, nid, attempt, key or "", k.epoch)
        if tool.context_param:
            kwargs[tool.context_param] = ctx
        try:
            if tool.side_effects:
                await k.store.flush(k.run_id, k.epoch)  # write-ahead
            called = True
            if node.timeout_s is None:
                result = await k.executor.call(tool, kwargs, ctx)
            else:
                with anyio.move_on_after(node.timeout_s) as deadline:
                    result = await k.executor.call(tool, kwargs, ctx)
                if deadline.cancelled_caught:
                    failure = att.Failure(
                        ErrorKind.TIMEOUT, f"no answer within timeout_s={node.timeout_s}"
                    )
        except StaleEpochError:
            raise
        except anyio.get_cancelled_exc_class():
            # run.cancel()/rollback(): record the attempt, then let the worker stop
            if k.stopping:
                attempt_failed(
                    k,
                    node,
                    attempt,
                    att.Failure(ErrorKind.CANCELLED, "cancelled", before_effect=not called),
                )
            raise
        except Exception as exc:
            failure = att.classify(exc, tool_name=tool.name)
        else:
            if failure is None:
                try:
                    output = tool.check_output(result)
                except Exception as exc:
                    failure = att.bad_output(exc, tool.name, nid)
    if failure is None:
        k.emit("step_succeeded", nid, attempt, {"output": output})
        k._after_done(node)
    else:
        attempt_failed(k, node, attempt, failure)


def attempt_failed(k: Kernel, node: Node, attempt: int, failure: att.Failure) -> None:
    """Record a failed attempt and decide: retry (back-off timer), in_doubt, cancelled, or
    failed (DESIGN §5)."""
    nid = node.id
    assert node.tool is not None
    fate = att.decide(failure, node.tool, node.retry, attempt)
    payload = {"error_kind": failure.kind, "error": failure.message}
    if failure.kind == ErrorKind.TIMEOUT:
        k.emit("step_timed_out", nid, attempt, payload)
    if fate == att.Fate.RETRY and not k.stopping:
        delay = node.retry.delay(attempt)
        due = k.clock.now() + delay
        k.emit(
            "step_retry_scheduled",
            nid,
            attempt,
            {**payload, "delay_s": delay, "due_at": due, "next_attempt": attempt + 1},
        )
        k.start_timer(node, delay)
        return
    if fate == att.Fate.IN_DOUBT:
        reason = "cancelled" if failure.kind == ErrorKind.CANCELLED else str(failure.kind)
        k.emit("step_in_doubt", nid, attempt, {**payload, "reason": reason})
        return
    if fate == att.Fate.CANCELLED or (fate == att.Fate.RETRY and k.stopping):
        k.emit("step_cancelled", nid, attempt, {**payload, "reason": "cancelled"})
        if not k.stopping:  # when stopping, cancel_remaining settles the rest
            k._after_done(node)
        return
    k.emit("step_failed", nid, attempt, payload)
    k._after_done(node)
