"""Rebuilding a run's scheduler from its folded events after a restart (DESIGN §7).

A completed step is never recomputed. The steps a run grew (``steps_added``: a for_each
step's instances) are rebuilt first, from the log (:mod:`.growth`). An attempt that started
but never ended is its kind's to recover (:meth:`.attempt.kind.Kind.recover`): a tool call
is re-run when the tool is idempotent or effect-free, else reconciled when the tool has
``reconcile`` (did the call take effect?), else left ``in_doubt`` for a person
(``run.resolve``); a remote job is waited on again on its recorded handle, never submitted
twice; a parent (sub-chain, for_each step) waits for its steps.
A run that was stopping (fail_fast failure, cancel) stops again instead of releasing more.
A rollback interrupted by a crash carries on without compensating anything twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chainlab.events import STEP_TERMINAL, ErrorKind, EventKind, RunStatus, SkipReason, StepStatus
from chainlab.events.status import StopReason, releases
from chainlab.runtime.engine.attempt.call.fate import start_timer
from chainlab.runtime.engine.attempt.kind import kind_of
from chainlab.runtime.engine.compile import Node
from chainlab.runtime.engine.flow import finished, make_ready, resolver, unblocked
from chainlab.runtime.engine.growth import regrow
from chainlab.runtime.engine.scheduler import Phase

if TYPE_CHECKING:
    from chainlab.runtime.engine.core import RunCore

__all__ = ["finish_recovery", "recover_now"]

S = StepStatus
K = EventKind
#: a step in one of these finished its call (a compensation may still be under way)
_ENDED = STEP_TERMINAL | {S.COMPENSATING}


def recover_now(k: RunCore) -> list[Node]:
    """Rebuild the scheduler from the folded state, synchronously (so control methods work
    as soon as ``runtime.resume`` returns). Returns the interrupted calls that need their
    tool's ``reconcile`` (async: :func:`finish_recovery`, run by the driver)."""
    regrow(k)
    if k.state.status == RunStatus.COMPENSATING:
        _recover_rollback(k)
        return []
    to_reconcile: list[Node] = []
    _restore_stopping(k)
    initial = {step_id: st.status for step_id, st in k.steps.items()}
    k.sched.restore(
        done=[step_id for step_id, status in initial.items() if status in _ENDED],
        satisfied=[step_id for step_id, st in k.steps.items() if releases(st.status, st.reason)],
    )
    for step_id, node in k.nodes.items():
        status = initial[step_id]
        st = k.steps[step_id]
        if status in _ENDED or (status == S.PENDING and st.status != S.PENDING):
            continue  # finished, or settled meanwhile by this loop (a skip, a release)
        if status == S.PENDING:
            if node.group is not None and k.steps[node.group].status != S.RUNNING:
                continue  # started with its sub-chain step
            _recover_pending(k, node)
            continue
        k.sched.unblock(step_id)
        if status == S.RUNNING:  # its kind says how (a call, a job, a parent...)
            reconcile = kind_of(k, node).recover(k, node)
            if k.sched.phase(step_id) == Phase.UNBLOCKED:  # in doubt or to reconcile
                k.sched.park(step_id)
            if reconcile:
                to_reconcile.append(node)
        elif status == S.READY:
            args = dict(st.args) if st.approved_hash and st.args is not None else _args(k, node)
            make_ready(k, node, args)
        elif status == S.RETRY_WAIT:
            k.args[step_id] = _args(k, node)
            k.sched.park(step_id)
            if not k.stopping:  # a stopping run cancels it instead
                start_timer(k, node, max(0.0, (st.due_at or 0.0) - k.clock.now()))
        else:  # in_doubt, waiting_confirmation: a person decides
            k.args[step_id] = dict(st.args or {})
            k.sched.park(step_id)
    for step_id, node in list(k.nodes.items()):
        kind = kind_of(k, node)
        if kind.has_children and k.steps[step_id].status == S.RUNNING:
            kind.recount(k, node)
    return to_reconcile


def _recover_pending(k: RunCore, node: Node) -> None:
    """As the kernel does: dependants of a failed/rejected step are skipped; those of a step
    cancelled by a stopping run are cancelled with the rest (cancel_remaining)."""
    ends = (
        (S.FAILED, S.REJECTED, S.SKIPPED)
        if k.stopping
        else (S.FAILED, S.REJECTED, S.CANCELLED, S.SKIPPED)
    )
    blocked = [d for d in node.deps if k.steps[d].status in ends
               and not releases(k.steps[d].status, k.steps[d].reason)]
    if blocked:
        dep = k.steps[blocked[0]]
        rejected = dep.status == S.REJECTED or (
            dep.status == S.SKIPPED and dep.reason == SkipReason.REJECTED
        )
        reason = SkipReason.REJECTED if rejected else SkipReason.UPSTREAM_FAILED
        k.emit(K.STEP_SKIPPED, node.id, payload={"reason": reason, "because": blocked[0]})
        finished(k, node)
    elif all(releases(k.steps[d].status, k.steps[d].reason) for d in node.deps):
        if k.sched.phase(node.id) == Phase.BLOCKED:
            k.sched.unblock(node.id)
        unblocked(k, node)


async def finish_recovery(k: RunCore, nodes: list[Node]) -> None:
    """The awaited part of each interrupted attempt's recovery (its kind's
    :meth:`~.attempt.kind.Kind.reconcile`: a tool's reconcile, a job's find)."""
    for node in nodes:
        await kind_of(k, node).reconcile(k, node)


def _restore_stopping(k: RunCore) -> None:
    """A run that was stopping when the process died stops again, so a crash never changes
    the outcome: a failed (or rejected) step under ``fail_fast``, or any cancelled step (only
    a stopping run cancels steps), means nothing new may start and the run must end (and
    compensate) as it would have. The stop request itself is not an event; its traces are."""
    failed = [
        (st.ended_at or 0.0, k.nodes[step_id].order, step_id)
        for step_id, st in k.steps.items()
        if st.status in (S.FAILED, S.REJECTED) and step_id in k.nodes
        and not k.nodes[step_id].contained  # (an agent's call: its model read what came of it)
    ]
    if failed and k.options.on_failure == "fail_fast":
        step_id = min(failed)[2]
        k.start_stopping(StopReason.FAILED, f"step {step_id!r} {k.steps[step_id].status}")
    elif any(st.status == S.CANCELLED for st in k.steps.values()):
        k.start_stopping(StopReason.CANCELLED, "the run was stopping when its process ended")


def _args(k: RunCore, node: Node) -> dict[str, Any]:
    if node.static_args is not None:
        return node.static_args
    return node.render_args(resolver(k, node))  # type: ignore[no-any-return]


def _recover_rollback(k: RunCore) -> None:
    for step_id, st in k.steps.items():
        if st.status != S.COMPENSATING:
            continue
        rec = k.state.open_attempt(step_id, "compensation")
        if rec is None:
            continue  # between attempts: the rollback simply tries again
        rb = k.nodes[step_id].rollback
        tool = k.toolbox.get(rb.tool) if rb is not None else None
        again = tool is not None and tool.safe_to_repeat
        k.emit(
            K.COMPENSATION_FAILED,
            step_id,
            rec.attempt,
            {
                "error_kind": ErrorKind.INTERRUPTED,
                "will_retry": again,
                "error": "the process stopped during this compensation"
                + (
                    "; it is safe to repeat"
                    if again
                    else "; its effect is unknown, check and run rollback() again"
                ),
            },
        )
    k.stopping = StopReason.ROLLBACK
    k.sched.stop()
    k.stop_reason = "continuing the rollback after a restart"
    k.retry_failed = False
