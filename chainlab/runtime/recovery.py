"""Rebuilding a run's scheduler from its folded events after a restart (DESIGN §7).

A completed step is never recomputed. An attempt that started but never ended is
* re-run when the tool is idempotent or effect-free,
* else reconciled when the tool has ``reconcile`` (did the call take effect?),
* else left ``in_doubt`` for a person (``run.resolve``).
A run that was stopping (fail_fast failure, cancel) stops again instead of releasing more.
A rollback interrupted by a crash carries on without compensating anything twice.
"""

from __future__ import annotations

import heapq
import inspect
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.runtime.graph import Node
from chainlab.runtime.status import RunStatus, SkipReason, StepStatus
from chainlab.tools import Reconciliation

if TYPE_CHECKING:
    from chainlab.runtime.kernel import Kernel

__all__ = ["finish_recovery", "recover_now"]

S = StepStatus
_OK = (S.SUCCEEDED, S.COMPENSATED, S.COMPENSATING, S.COMPENSATION_FAILED)


def _satisfied(k: Kernel, nid: str) -> bool:
    st = k.steps[nid]
    return st.status in _OK or (st.status == S.SKIPPED and st.reason == SkipReason.CONDITION)


def recover_now(k: Kernel) -> list[Node]:
    """Rebuild the scheduler's queues from the folded state, synchronously (so control
    methods work as soon as ``runtime.resume`` returns). Returns the interrupted calls that
    need their tool's ``reconcile`` (async: :func:`finish_recovery`, run by the driver)."""
    if k.state.status == RunStatus.COMPENSATING:
        _recover_rollback(k)
        return []
    to_reconcile: list[Node] = []
    _restore_stopping(k)
    initial = {nid: st.status for nid, st in k.steps.items()}
    for nid, node in k.nodes.items():
        k.indeg[nid] = sum(1 for d in node.deps if not _satisfied(k, d))
    for nid, node in k.nodes.items():
        status = initial[nid]
        st = k.steps[nid]
        if status == S.RUNNING and not node.is_group:
            if _recover_attempt(k, node):
                to_reconcile.append(node)
        elif status == S.READY:
            k.args[nid] = dict(st.args) if st.approved_hash and st.args is not None \
                else _args(k, node)
            heapq.heappush(k.ready, (node.order, nid))
        elif status == S.RETRY_WAIT:
            k.args[nid] = _args(k, node)
            if not k.stopping:  # a stopping run cancels it instead
                k.start_timer(node, max(0.0, (st.due_at or 0.0) - k.clock.now()))
        elif status == S.IN_DOUBT:
            k.args[nid] = dict(st.args or {})
        elif status == S.PENDING and k.steps[nid].status == S.PENDING:
            if node.group is not None and k.steps[node.group].status != S.RUNNING:
                continue
            # as the kernel does: dependants of a failed/rejected step are skipped; those of
            # a step cancelled by a stopping run are cancelled with the rest (cancel_remaining)
            ends = (S.FAILED, S.REJECTED, S.SKIPPED) if k.stopping else \
                (S.FAILED, S.REJECTED, S.CANCELLED, S.SKIPPED)
            blocked = [d for d in node.deps
                       if k.steps[d].status in ends and not _satisfied(k, d)]
            if blocked:
                dep = k.steps[blocked[0]]
                rejected = dep.status == S.REJECTED or (
                    dep.status == S.SKIPPED and dep.reason == SkipReason.REJECTED)
                reason = SkipReason.REJECTED if rejected else SkipReason.UPSTREAM_FAILED
                k.emit("step_skipped", nid, payload={"reason": reason, "because": blocked[0]})
                k._after_done(node)
            elif k.indeg[nid] == 0:
                k._deps_met(node)
    for nid, node in k.nodes.items():
        if node.is_group and k.steps[nid].status == S.RUNNING:
            k._child_done(node)
    return to_reconcile


async def finish_recovery(k: Kernel, nodes: list[Node]) -> None:
    """Ask each interrupted call's tool whether it took effect."""
    for node in nodes:
        await _reconcile_attempt(k, node)


def _restore_stopping(k: Kernel) -> None:
    """A run that was stopping when the process died stops again, so a crash never changes
    the outcome: a failed (or rejected) step under ``fail_fast``, or any cancelled step (only
    a stopping run cancels steps), means nothing new may start and the run must end (and
    compensate) as it would have. The stop request itself is not an event; its traces are."""
    failed = [(st.ended_at or 0.0, k.nodes[nid].order, nid) for nid, st in k.steps.items()
              if st.status in (S.FAILED, S.REJECTED) and nid in k.nodes]
    if failed and k.options.on_failure == "fail_fast":
        nid = min(failed)[2]
        k.start_stopping("failed", f"step {nid!r} {k.steps[nid].status}")
    elif any(st.status == S.CANCELLED for st in k.steps.values()):
        k.start_stopping("cancelled", "the run was stopping when its process ended")


def _args(k: Kernel, node: Node) -> dict[str, Any]:
    if node.static_args is not None:
        return node.static_args
    return node.render_args(k.resolver(node))  # type: ignore[no-any-return]


def _recover_attempt(k: Kernel, node: Node) -> bool:
    """Settle an interrupted call now when possible; True when it needs reconciling."""
    nid = node.id
    st = k.steps[nid]
    tool = node.tool
    assert tool is not None
    k.args[nid] = dict(st.args or {})
    if tool.safe_to_repeat:
        k.emit("step_ready", nid, st.attempts, {"recovery": "rerun"})
        heapq.heappush(k.ready, (node.order, nid))
        return False
    if tool.reconcile is not None:
        return True
    note = ("the process stopped during this call and the tool is neither idempotent nor "
            "reconcilable; check the outside world, then resolve the step")
    k.emit("step_in_doubt", nid, st.attempts, {"reason": "interrupted", "error": note})
    return False


async def _reconcile_attempt(k: Kernel, node: Node) -> None:
    nid = node.id
    st = k.steps[nid]
    tool = node.tool
    assert tool is not None and tool.reconcile is not None
    if st.status != S.RUNNING:
        return  # a person decided meanwhile
    answer = await _reconcile(tool.reconcile, dict(st.args or {}), st.idempotency_key or "")
    if isinstance(answer, Reconciliation) and answer.applied:
        try:
            output = tool.check_output(answer.output)
        except Exception as exc:
            answer = None
            note = f"reconcile said the call took effect but its output is bad: {exc}"
        else:
            k.emit("step_succeeded", nid, st.attempts, {"output": output, "reconciled": True})
            k._after_done(node)
            return
    elif isinstance(answer, Reconciliation):
        k.emit("step_ready", nid, st.attempts, {"recovery": "reconciled_no_effect"})
        heapq.heappush(k.ready, (node.order, nid))
        return
    else:
        note = "reconcile could not tell whether the call took effect"
    k.emit("step_in_doubt", nid, st.attempts, {"reason": "interrupted", "error": note})


async def _reconcile(fn: Any, args: dict[str, Any], key: str) -> Reconciliation | None:
    try:
        if inspect.iscoroutinefunction(fn):
            answer = await fn(args, key)
        else:
            answer = await anyio.to_thread.run_sync(fn, args, key)
    except Exception:
        return None
    return answer if isinstance(answer, Reconciliation) else None


def _recover_rollback(k: Kernel) -> None:
    for nid, st in k.steps.items():
        if st.status != S.COMPENSATING:
            continue
        rec = k.state.open_attempt(nid, "compensation")
        if rec is None:
            continue  # between attempts: the rollback simply tries again
        rb = k.nodes[nid].rollback
        tool = k.toolbox.get(rb.tool) if rb is not None else None
        again = tool is not None and tool.safe_to_repeat
        k.emit("compensation_failed", nid, rec.attempt, {
            "error_kind": "interrupted", "will_retry": again,
            "error": "the process stopped during this compensation" + (
                "; it is safe to repeat" if again else
                "; its effect is unknown, check and run rollback() again")})
    k.stopping = "rollback"
    k.stop_reason = "continuing the rollback after a restart"
    k.retry_failed = False
