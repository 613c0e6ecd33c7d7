"""Saga compensation (DESIGN §8): undo completed steps in REVERSE COMPLETION ORDER.

Compensations are attempts too: recorded (``compensation_*`` events), retried by their own
policy, bounded by timeouts, keyed for idempotency, fenced by the epoch. ``best_effort`` goes
on past a failed compensation; ``strict`` stops at the first one and leaves the rest pending
for a later ``run.rollback()``. In-doubt steps are never compensated blindly: they are
listed as needing a decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from chainlab.errors import StaleEpochError
from chainlab.plan.refs import Ref, walk_path
from chainlab.plan.schema import ErrorKind, RetryPolicy
from chainlab.runtime import attempts as att
from chainlab.runtime.graph import compile_value
from chainlab.runtime.status import RunStatus, StepStatus
from chainlab.tools import CallContext, args_hash, idempotency_key

if TYPE_CHECKING:
    from chainlab.runtime.kernel import Kernel

__all__ = ["cancel_remaining", "compensate", "finish_stopped"]

S = StepStatus
R = RunStatus
COMPENSATION_RETRY = RetryPolicy(max_attempts=3, delay_s=0.5, backoff="exponential")


async def finish_stopped(k: Kernel) -> None:
    """The run stopped (failure under fail_fast, cancel, rollback request) and nothing runs
    any more: cancel what never ran, then compensate or end the run."""
    cancel_remaining(k)
    why = k.stopping
    wants = why == "rollback" or (k.options.compensate_on_failure and bool(_order(k, True)))
    if wants:
        await compensate(k, k.stop_reason, retry_failed=k.retry_failed)
        return
    in_doubt = [nid for nid, st in k.steps.items() if st.status == S.IN_DOUBT]
    if why == "cancelled":
        k.emit(
            "run_cancelled",
            payload={"reason": k.stop_reason, "in_doubt": in_doubt},
            run_status=R.CANCELLED,
        )
    else:
        bad = {
            nid: str(st.status)
            for nid, st in k.steps.items()
            if st.status in (S.FAILED, S.REJECTED)
        }
        k.emit(
            "run_failed",
            payload={"reason": k.stop_reason, "steps": bad, "in_doubt": in_doubt},
            run_status=R.FAILED,
        )


def cancel_remaining(k: Kernel) -> None:
    """Steps that never ran (or wait for a back-off or a person) are cancelled."""
    groups = []
    for nid, st in k.steps.items():
        node = k.nodes[nid]
        if node.is_group:
            groups.append(node)
            continue
        if st.status in (S.PENDING, S.READY, S.WAITING_CONFIRMATION, S.RETRY_WAIT):
            k.emit("step_cancelled", nid, payload={"reason": k.stop_reason or str(k.stopping)})
    for node in reversed(groups):  # deepest first
        st = k.steps[node.id]
        if st.status == S.RUNNING:
            kids = [k.steps[c] for c in node.children]
            if any(c.status in (S.FAILED, S.REJECTED, S.IN_DOUBT) for c in kids):
                k.emit(
                    "step_failed",
                    node.id,
                    st.attempts,
                    {
                        "error_kind": ErrorKind.EXECUTION_FAILED,
                        "error": "sub-chain stopped: "
                        + ", ".join(
                            f"{c.step_id} {c.status}"
                            for c in kids
                            if c.status in (S.FAILED, S.REJECTED, S.IN_DOUBT)
                        ),
                    },
                )
            else:
                k.emit("step_cancelled", node.id, st.attempts, {"reason": k.stop_reason})
        elif st.status in (S.PENDING, S.READY, S.WAITING_CONFIRMATION):
            k.emit("step_cancelled", node.id, payload={"reason": k.stop_reason})


def _order(k: Kernel, retry_failed: bool) -> list[str]:
    """Steps to compensate, most recently completed first."""
    return _plan(k, retry_failed)[0]


def _plan(k: Kernel, retry_failed: bool) -> tuple[list[str], list[str]]:
    """(steps to compensate now, most recently completed first; steps held back). Under
    ``strict``, a failed compensation that is not retried now (after a crash: one whose
    effect is unknown) holds back every step completed before it: they stay pending."""
    wanted = (S.SUCCEEDED, S.COMPENSATING) + ((S.COMPENSATION_FAILED,) if retry_failed else ())
    strict = k.options.rollback_mode == "strict"
    seen: set[str] = set()
    out: list[str] = []
    held: list[str] = []
    blocked = False
    for nid in reversed(k.state.completion):
        if nid in seen or k.nodes[nid].rollback is None:
            continue
        seen.add(nid)
        status = k.steps[nid].status
        if status in wanted:
            (held if blocked else out).append(nid)
        elif strict and status == S.COMPENSATION_FAILED:
            blocked = True
    return out, held


async def compensate(k: Kernel, reason: str, *, retry_failed: bool = True) -> None:
    order, held = _plan(k, retry_failed)
    needs_decision = [
        nid
        for nid, st in k.steps.items()
        if st.status == S.IN_DOUBT and k.nodes[nid].rollback is not None
    ]
    if k.state.status != R.COMPENSATING:
        k.emit(
            "run_rollback_started",
            payload={"reason": reason, "order": order},
            run_status=R.COMPENSATING,
        )
    failed: list[str] = []
    pending = list(order)
    for nid in order:
        ok = await compensate_one(k, nid)
        pending.remove(nid)
        if not ok:
            failed.append(nid)
            if k.options.rollback_mode == "strict":
                break
    _mark_undone_subchains(k)
    earlier = [
        nid
        for nid, st in k.steps.items()
        if st.status == S.COMPENSATION_FAILED and nid not in failed
    ]
    if failed or needs_decision or earlier:
        k.emit(
            "run_rollback_failed",
            payload={
                "reason": reason,
                "failed": failed + earlier,
                "pending": pending + held,
                "needs_decision": needs_decision,
            },
            run_status=R.ROLLBACK_FAILED,
        )
    else:
        k.emit(
            "run_rolled_back",
            payload={"reason": reason, "compensated": order},
            run_status=R.ROLLED_BACK,
        )


def _mark_undone_subchains(k: Kernel) -> None:
    """A sub-chain step is undone once every child that had something to undo is compensated
    (deepest first). No call is made, so no attempt is recorded: the event only moves it."""
    for node in reversed(list(k.nodes.values())):
        if not node.is_group or node.rollback is not None:
            continue
        if k.steps[node.id].status != S.SUCCEEDED:
            continue
        kids = [k.steps[c] for c in node.children]
        undone = [c.step_id for c in kids if c.status == S.COMPENSATED]
        if undone and all(c.status != S.COMPENSATION_FAILED and not (
                c.status == S.SUCCEEDED and (k.nodes[c.step_id].rollback is not None
                                             or k.nodes[c.step_id].is_group)) for c in kids):
            k.emit("compensation_succeeded", node.id, payload={"subchain": True,
                                                                "children": undone})


async def compensate_one(k: Kernel, nid: str) -> bool:
    """Run one step's compensation with its retry policy; True when it succeeded."""
    node = k.nodes[nid]
    rb = node.rollback
    assert rb is not None
    st = k.steps[nid]
    tool = k.toolbox.get(rb.tool)
    policy = rb.retry or tool.retry or COMPENSATION_RETRY
    timeout = rb.timeout_s or tool.timeout_s
    try:
        render, _ = compile_value(rb.args)
        args = render(_resolver(k, nid))
    except (LookupError, TypeError) as exc:
        k.emit("compensation_started", nid, st.compensations + 1, {"tool": rb.tool})
        k.emit(
            "compensation_failed",
            nid,
            st.compensations,
            {
                "error_kind": ErrorKind.INVALID_INPUT,
                "error": f"cannot resolve args: {exc}",
                "will_retry": False,
            },
        )
        return False
    key = idempotency_key(k.run_id, nid, args_hash(args), kind="compensation")
    while True:
        attempt = st.compensations + 1
        k.emit(
            "compensation_started",
            nid,
            attempt,
            {"tool": rb.tool, "args": args, "idempotency_key": key},
        )
        failure = await _call(
            k,
            tool,
            args,
            CallContext(k.run_id, nid, attempt, key, k.epoch, "compensation"),
            timeout,
        )
        if failure is None:
            k.emit("compensation_succeeded", nid, attempt, {"tool": rb.tool})
            return True
        fate = att.decide(failure, tool, policy, attempt)
        retry = fate == att.Fate.RETRY
        delay = policy.delay(attempt) if retry else None
        k.emit(
            "compensation_failed",
            nid,
            attempt,
            {
                "error_kind": failure.kind,
                "error": failure.message,
                "will_retry": retry,
                **({"delay_s": delay} if retry else {}),
            },
        )
        if not retry:
            return False
        await k.clock.sleep(delay or 0.0)


async def _call(
    k: Kernel, tool: Any, args: dict[str, Any], ctx: CallContext, timeout: float | None
) -> att.Failure | None:
    try:
        kwargs = tool.validate_args(args)
    except ValidationError as exc:
        return att.invalid_input(exc, tool.name)
    if tool.context_param:
        kwargs[tool.context_param] = ctx
    try:
        if tool.side_effects:
            await k.store.flush(k.run_id, k.epoch)
        if timeout is None:
            await k.executor.call(tool, kwargs, ctx)
            return None
        with anyio.move_on_after(timeout) as deadline:
            await k.executor.call(tool, kwargs, ctx)
        if deadline.cancelled_caught:
            return att.Failure(ErrorKind.TIMEOUT, f"no answer within timeout_s={timeout}")
        return None
    except StaleEpochError:
        raise
    except Exception as exc:
        return att.classify(exc, tool_name=tool.name)


def _resolver(k: Kernel, nid: str) -> Any:
    node = k.nodes[nid]
    st = k.steps[nid]
    base = k.resolver(node)

    def resolve(ref: Ref) -> Any:
        if ref.root == "input":
            value: Any = st.args or {}
        elif ref.root == "output":
            value = st.output
        else:
            return base(ref)
        return walk_path(value, ref.path, ref.source) if ref.path else value

    return resolve
