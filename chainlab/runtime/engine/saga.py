"""Saga compensation (DESIGN §8): undo completed steps in REVERSE COMPLETION ORDER.

Compensations are attempts too: recorded (``compensation_*`` events), retried by their own
policy, bounded by timeouts, keyed for idempotency, fenced by the epoch. ``best_effort`` goes
on past a failed compensation; ``strict`` stops at the first one and leaves the rest pending
for a later ``run.rollback()``. In-doubt steps are never compensated blindly: they are
listed as needing a decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab.events import ErrorKind, EventKind, RunState, RunStatus, StepStatus
from chainlab.events.status import StopReason
from chainlab.plan.refs import Ref, walk_path
from chainlab.plan.schema import RetryPolicy
from chainlab.runtime.engine.attempt.call.fate import Fate, fate_of
from chainlab.runtime.engine.attempt.call.seam import call_tool
from chainlab.runtime.engine.attempt.kind import kind_of
from chainlab.runtime.engine.compile import compile_value
from chainlab.runtime.engine.flow import resolver
from chainlab.tools import CallContext, args_hash, idempotency_key

if TYPE_CHECKING:
    from chainlab.runtime.engine.core import RunCore

__all__ = ["cancel_remaining", "compensate", "finish_stopped", "rollback_plan"]

S = StepStatus
R = RunStatus
K = EventKind
COMPENSATION_RETRY = RetryPolicy(max_attempts=3, delay_s=0.5, backoff="exponential")


async def finish_stopped(k: RunCore) -> None:
    """The run stopped (failure under fail_fast, cancel, rollback request) and nothing runs
    any more: cancel what never ran, then compensate or end the run."""
    cancel_remaining(k)
    why = k.stopping
    wants = why == StopReason.ROLLBACK or (k.options.compensate_on_failure
                                          and bool(_order(k, True)))
    if wants:
        await compensate(k, k.stop_reason, retry_failed=k.retry_failed)
        return
    in_doubt = [step_id for step_id, st in k.steps.items() if st.status == S.IN_DOUBT]
    if why == StopReason.CANCELLED:
        k.emit(
            K.RUN_CANCELLED,
            payload={"reason": k.stop_reason, "in_doubt": in_doubt},
            run_status=R.CANCELLED,
        )
    else:
        bad = {
            step_id: str(st.status)
            for step_id, st in k.steps.items()
            if st.status in (S.FAILED, S.REJECTED) and not k.nodes[step_id].contained
        }
        k.emit(
            K.RUN_FAILED,
            payload={"reason": k.stop_reason, "steps": bad, "in_doubt": in_doubt},
            run_status=R.FAILED,
        )


def cancel_remaining(k: RunCore) -> None:
    """Steps that never ran (or wait for a back-off or a person) are cancelled, each by its
    kind (:meth:`~.attempt.kind.Kind.cancel`): a parent after its steps, deepest first."""
    parents = []
    for node in list(k.nodes.values()):
        kind = kind_of(k, node)
        if kind.has_children:
            parents.append((kind, node))
        else:
            kind.cancel(k, node)
    for kind, node in sorted(parents, key=lambda p: -len(p[1].order)):  # deepest first
        kind.cancel(k, node)


def _order(k: RunCore, retry_failed: bool) -> list[str]:
    """Steps to compensate, most recently completed first."""
    return _plan(k, retry_failed)[0]


def _plan(k: RunCore, retry_failed: bool) -> tuple[list[str], list[str]]:
    return rollback_plan(k.state, {sid: n.rollback is not None for sid, n in k.nodes.items()},
                         strict=k.options.rollback_mode == "strict", retry_failed=retry_failed)


def rollback_plan(state: RunState, has_rollback: Mapping[str, bool], *, strict: bool,
                  retry_failed: bool = True) -> tuple[list[str], list[str]]:
    """(steps to compensate now, most recently completed first; steps held back). Under
    ``strict``, a failed compensation that is not retried now (after a crash: one whose
    effect is unknown) holds back every step completed before it: they stay pending. The one
    answer to "what would a rollback undo?" for the kernel and every front end.

    A run compensates only effects it made itself: a step a fork reused (or whose output a
    person gave) is the effect of the run that made it, and that run's rollback undoes it."""
    wanted = (S.SUCCEEDED, S.COMPENSATING) + ((S.COMPENSATION_FAILED,) if retry_failed else ())
    seen: set[str] = set()
    out: list[str] = []
    held: list[str] = []
    blocked = False
    for step_id in reversed(state.completion):
        if step_id in seen or not has_rollback.get(step_id, False) \
                or state.steps[step_id].reused is not None:
            continue
        seen.add(step_id)
        status = state.steps[step_id].status
        if status in wanted:
            (held if blocked else out).append(step_id)
        elif strict and status == S.COMPENSATION_FAILED:
            blocked = True
    return out, held


async def compensate(k: RunCore, reason: str, *, retry_failed: bool = True) -> None:
    order, held = _plan(k, retry_failed)
    needs_decision = [
        step_id
        for step_id, st in k.steps.items()
        if st.status == S.IN_DOUBT and k.nodes[step_id].rollback is not None
    ]
    if k.state.status != R.COMPENSATING:
        k.emit(
            K.RUN_ROLLBACK_STARTED,
            payload={"reason": reason, "order": order},
            run_status=R.COMPENSATING,
        )
    failed: list[str] = []
    pending = list(order)
    for step_id in order:
        ok = await compensate_one(k, step_id)
        pending.remove(step_id)
        if not ok:
            failed.append(step_id)
            if k.options.rollback_mode == "strict":
                break
    _mark_undone_subchains(k)
    earlier = [
        step_id
        for step_id, st in k.steps.items()
        if st.status == S.COMPENSATION_FAILED and step_id not in failed
    ]
    if failed or needs_decision or earlier:
        k.emit(
            K.RUN_ROLLBACK_FAILED,
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
            K.RUN_ROLLED_BACK,
            payload={"reason": reason, "compensated": order},
            run_status=R.ROLLED_BACK,
        )


def _mark_undone_subchains(k: RunCore) -> None:
    """A parent (a sub-chain step, a for_each step) is undone once every step of it that
    had something to undo is compensated (deepest first). No call is made, so no attempt is
    recorded: the event only moves it."""
    parents = [(kind, node) for node in k.nodes.values()
               if (kind := kind_of(k, node)).has_children and node.rollback is None]
    for kind, node in sorted(parents, key=lambda p: -len(p[1].order)):
        if k.steps[node.id].status != S.SUCCEEDED:
            continue
        ids = kind.children(k, node)
        kids = [k.steps[c] for c in ids]
        undone = [c.step_id for c in kids if c.status == S.COMPENSATED]
        if undone and all(
            c.status != S.COMPENSATION_FAILED
            and not (
                c.status == S.SUCCEEDED
                and (k.nodes[c.step_id].rollback is not None
                     or kind_of(k, k.nodes[c.step_id]).has_children)
            )
            for c in kids
        ):
            k.emit(
                K.COMPENSATION_SUCCEEDED, node.id, payload={"subchain": True, "children": undone}
            )


async def compensate_one(k: RunCore, step_id: str) -> bool:
    """Run one step's compensation with its retry policy; True when it succeeded."""
    node = k.nodes[step_id]
    rb = node.rollback
    assert rb is not None
    st = k.steps[step_id]
    tool = k.toolbox.get(rb.tool)
    policy = rb.retry or tool.retry or COMPENSATION_RETRY
    timeout = rb.timeout_s or tool.timeout_s
    try:
        render, _ = compile_value(rb.args)
        args = render(_resolver(k, step_id))
    except (LookupError, TypeError) as exc:
        k.emit(K.COMPENSATION_STARTED, step_id, st.compensations + 1, {"tool": rb.tool})
        k.emit(
            K.COMPENSATION_FAILED,
            step_id,
            st.compensations,
            {
                "error_kind": ErrorKind.INVALID_INPUT,
                "error": f"cannot resolve args: {exc}",
                "will_retry": False,
            },
        )
        return False
    key = idempotency_key(k.run_id, step_id, args_hash(args), kind="compensation")
    while True:
        attempt = st.compensations + 1
        k.emit(
            K.COMPENSATION_STARTED,
            step_id,
            attempt,
            {"tool": rb.tool, "args": args, "idempotency_key": key},
        )
        outcome = await call_tool(
            tool,
            args,
            CallContext(k.run_id, step_id, attempt, key, k.epoch, "compensation", {}),
            executor=k.executor,
            store=k.store,
            timeout_s=timeout,
            check_output=False,
            # a compensation runs while the run is being taken over more often than a step
            # (rollback() from another process): fence it before any side effect
            write_ahead=tool.side_effects,
        )
        failure = outcome.failure
        if failure is None:
            k.emit(K.COMPENSATION_SUCCEEDED, step_id, attempt, {"tool": rb.tool}
                   if outcome.usage is None else {"tool": rb.tool, "usage": outcome.usage})
            return True
        fate = fate_of(failure, tool, policy, attempt)
        retry = fate == Fate.RETRY
        delay = policy.delay(attempt) if retry else None
        k.emit(
            K.COMPENSATION_FAILED,
            step_id,
            attempt,
            {
                "error_kind": failure.kind,
                "error": failure.message,
                "will_retry": retry,
                **({"delay_s": delay} if retry else {}),
                **({"usage": outcome.usage} if outcome.usage else {}),
            },
        )
        if not retry:
            return False
        await k.clock.sleep(delay or 0.0)


def _resolver(k: RunCore, step_id: str) -> Any:
    node = k.nodes[step_id]
    st = k.steps[step_id]
    base = resolver(k, node)

    def resolve(ref: Ref) -> Any:
        if ref.root == "input":
            value: Any = st.args or {}
        elif ref.root == "output":
            value = st.output
        else:
            return base(ref)
        return walk_path(value, ref.path, ref.source) if ref.path else value

    return resolve
