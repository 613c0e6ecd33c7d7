"""One attempt of a tool step, its whole life (DESIGN §5): :func:`gate` (confirmation for
exactly these args, the budget: the prepare of every kind that calls something), then
:class:`ToolCall`, the ``call`` kind: ``step_started``, the tool's body
(:func:`.seam.call_tool`), the outcome recorded (:func:`.fate.record`: its fate decided, the
step parked or its back-off timer armed); after a restart, an interrupted call is re-run,
reconciled or left in doubt.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.events import RUN_TERMINAL, EventKind, StepStatus
from chainlab.plan.schema import ErrorKind
from chainlab.runtime.engine.approvals import decide
from chainlab.runtime.engine.attempt.call.fate import record
from chainlab.runtime.engine.attempt.call.seam import Failure, Outcome, call_tool
from chainlab.runtime.engine.attempt.kind import Kind
from chainlab.runtime.engine.budget import check_budget
from chainlab.runtime.engine.experiment import answered
from chainlab.runtime.engine.flow import finished, make_ready, request_confirmation
from chainlab.runtime.engine.masked import masked_inputs, person_gave_args, wait_for_real_values
from chainlab.tools import CallContext, Reconciliation, args_hash, idempotency_key

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

K = EventKind
S = StepStatus

__all__ = ["ToolCall", "gate"]

_new_tuple = tuple.__new__


def gate(k: RunCore, node: Node) -> tuple[int, dict[str, Any], bool] | None:
    """Before any call of any kind: ``(attempt, args, confirmed)`` when the step may start,
    else None (it now waits for a person and the caller returns: it holds nothing).

    THE rule every path goes through (a start, a resume, a takeover, a fork, a decision from
    another process): a step that needs a person runs only with an approval recorded in THIS
    run for exactly these args (or decided, before the call, by a rule or a grant: DESIGN
    §21, :mod:`chainlab.runtime.engine.approvals`); in an experiment's replay a side effect
    is answered from the recording, stopped or asked of a person alone
    (:mod:`chainlab.runtime.engine.experiment`), never made unapproved; and the budget,
    counting what is already under way."""
    step_id = node.id
    st = k.steps[step_id]
    args = k.args.get(step_id)
    if args is None:
        args = k.args[step_id] = dict(st.args or {})
    live_effect = False  # a replay's new effect of a live= tool: a person's alone (§22)
    if k.state.experiment is not None:  # a replay's side effect: recorded, stopped or asked
        settled = answered(k, node, args)
        if settled:
            return None
        live_effect = settled is False
    masked = masked_inputs(k, node)  # (a resumed run: a value its log holds redacted)
    if masked and not person_gave_args(st, args):
        wait_for_real_values(k, node, args, masked)
        k.sched.park(step_id)
        return None
    confirm = node.fixed_confirm
    if confirm is None:
        confirm = node.needs_confirmation(args)
    confirm_first = k.state.confirm_first
    first = live_effect or (bool(confirm_first) and step_id in confirm_first)
    if confirm or first or k.rules:
        h = args_hash(args)
        if st.approved_hash != h:
            # not decided for these args: the rules, the grants, else a person (§21)
            out = decide(k, node, args, h, confirm or first, first)
            if out.action == "wait":
                request_confirmation(k, node, args)
                k.sched.park(step_id)
                return None
            if out.action == "reject":
                return None  # (recorded and ended: its dependants were released or skipped)
            confirm = out.action == "approve"
        else:
            confirm = True
    if (k.options.budget is not None or k.state.budget is not None) \
            and not check_budget(k, node, args):  # waits for a person: raise it, or stop
        k.sched.park(step_id)
        return None
    return st.attempts + 1, args, confirm


class ToolCall(Kind):
    """One call of a tool's body (``call``)."""

    name = "call"

    async def run(self, k: RunCore, node: Node) -> None:
        """One attempt: step_started, the call, the outcome recorded; a body that outlived
        its timeout keeps the slot until it returns."""
        opened = gate(k, node)
        if opened is None:
            return
        attempt, args, confirm = opened
        step_id = node.id
        tool = node.tool
        assert tool is not None
        # effect-free tools get a key only when they ask for it (nothing to deduplicate);
        # its start is durable before the call, so a fenced driver learns it there
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
        ctx = _new_tuple(CallContext, (k.run_id, step_id, attempt, key or "", k.epoch, "call",
                                       {}))  # (CallContext's own __new__ is a Python frame)
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
        if outcome.failure is None and outcome.background is None:  # the common case
            k.emit(K.STEP_SUCCEEDED, step_id, attempt, {"output": outcome.output}
                   if outcome.usage is None
                   else {"output": outcome.output, "usage": outcome.usage})
            finished(k, node)
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

    def recover(self, k: RunCore, node: Node) -> bool:
        """An interrupted call: re-run when repeating is safe, reconcile when the tool can
        say whether it took effect, else in_doubt for a person."""
        step_id = node.id
        st = k.steps[step_id]
        tool = node.tool
        assert tool is not None
        k.args[step_id] = dict(st.args or {})
        if tool.safe_to_repeat:
            k.emit(K.STEP_READY, step_id, st.attempts, {"recovery": "rerun"})
            make_ready(k, node)
            return False
        if tool.reconcile is not None:
            return True
        note = (
            "the process stopped during this call and the tool is neither idempotent nor "
            "reconcilable; check the outside world, then resolve the step"
        )
        k.emit(K.STEP_IN_DOUBT, step_id, st.attempts,
               {"reason": ErrorKind.INTERRUPTED, "error": note})
        return False

    async def reconcile(self, k: RunCore, node: Node) -> None:
        """Ask the tool whether the interrupted call took effect."""
        step_id = node.id
        st = k.steps[step_id]
        tool = node.tool
        assert tool is not None and tool.reconcile is not None
        if st.status != S.RUNNING:
            return  # a person decided meanwhile
        answer = await _reconcile(tool.reconcile, dict(st.args or {}), st.idempotency_key or "")
        if isinstance(answer, Reconciliation) and answer.applied:
            try:
                output = tool.check_output(answer.output)
            except Exception as exc:
                note = f"reconcile said the call took effect but its output is bad: {exc}"
            else:
                k.emit(K.STEP_SUCCEEDED, step_id, st.attempts,
                       {"output": output, "reconciled": True})
                finished(k, node)
                return
        elif isinstance(answer, Reconciliation):
            k.emit(K.STEP_READY, step_id, st.attempts, {"recovery": "reconciled_no_effect"})
            make_ready(k, node)
            return
        else:
            note = "reconcile could not tell whether the call took effect"
        k.emit(K.STEP_IN_DOUBT, step_id, st.attempts,
               {"reason": ErrorKind.INTERRUPTED, "error": note})


async def _reconcile(fn: Any, args: dict[str, Any], key: str) -> Reconciliation | None:
    try:
        if inspect.iscoroutinefunction(fn):
            answer = await fn(args, key)
        else:
            answer = await anyio.to_thread.run_sync(fn, args, key)
    except Exception:
        return None
    return answer if isinstance(answer, Reconciliation) else None
