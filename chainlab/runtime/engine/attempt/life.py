"""One attempt of a tool step, its whole life (DESIGN §5): :func:`run` gates the step
(confirmation for exactly these args, the budget), emits ``step_started``, calls the tool
(:func:`.call.call_tool`), and records the outcome (:func:`.fate.record`: its fate decided,
the step parked or its back-off timer armed). The kernel's workers call :func:`run` and
nothing else; a new kind of attempt belongs here, as a remote job does
(:func:`.jobsubmit.run_job`, then :mod:`.jobwait`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from chainlab.events import RUN_TERMINAL, EventKind
from chainlab.plan.schema import ErrorKind
from chainlab.runtime.engine.attempt.call import Failure, Outcome, call_tool
from chainlab.runtime.engine.attempt.fate import record
from chainlab.runtime.engine.attempt.jobsubmit import run_job
from chainlab.runtime.engine.budget import check_budget
from chainlab.runtime.engine.flow import finished, request_confirmation
from chainlab.tools import CallContext, args_hash, idempotency_key
from chainlab.tools.job import JobTool

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.kernel import Kernel

K = EventKind

__all__ = ["run"]


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
            request_confirmation(k, node, args)  # (not approved for these args: ask again)
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
        or tool.__class__ is JobTool
        else None
    )
    if tool.__class__ is JobTool:  # a remote job: reserve, submit, record, then a timer
        await run_job(k, node, attempt, args, key or "")
        return
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
