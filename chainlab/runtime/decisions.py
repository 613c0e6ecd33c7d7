"""A person's decisions on a live run: approve, reject, resolve (DESIGN §6, §7).

Each records the decision (and ``run_resumed`` when it moves a suspended run on) BEFORE its
effects, then wakes the scheduler.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chainlab.plan.schema import ErrorKind
from chainlab.runtime import attempts as att
from chainlab.runtime.status import RunStatus, StepStatus
from chainlab.tools import args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.kernel import Kernel

__all__ = ["approve", "reject", "resolve"]

S = StepStatus
R = RunStatus


def approve(k: Kernel, step_id: str, args: dict[str, Any] | None, note: str | None) -> None:
    node = k.require_waiting(step_id, S.WAITING_CONFIRMATION, "approve")
    st = k.steps[step_id]
    payload: dict[str, Any] = {"note": note, "args_hash": st.args_hash}
    if args is not None:
        from chainlab.errors import PlanError, Problem

        if node.tool is not None:
            try:
                node.tool.validate_args(args)
            except ValidationError as exc:
                raise PlanError(
                    Problem(
                        "invalid_args",
                        att.invalid_input(exc, node.tool.name).message,
                        step_id,
                        "args",
                    )
                ) from None
        args = to_json_value(args)
        payload.update(args=args, args_hash=args_hash(args))
    _mark_running(k, "approval")
    k.emit("step_approved", step_id, payload=payload)
    k.args[step_id] = dict(st.args or {})
    heapq.heappush(k.ready, (node.order, step_id))
    _kick(k)


def reject(k: Kernel, step_id: str, reason: str) -> None:
    node = k.require_waiting(step_id, S.WAITING_CONFIRMATION, "reject")
    _mark_running(k, "rejection")
    k.emit("step_rejected", step_id, payload={"reason": reason})
    k._after_done(node)
    _kick(k)


def resolve(
    k: Kernel, step_id: str, *, output: Any, retry: bool, fail: bool, note: str | None
) -> None:
    node = k.require_waiting(step_id, S.IN_DOUBT, "resolve")
    st = k.steps[step_id]
    value = None
    if not retry and not fail:
        try:
            value = node.tool.check_output(output) if node.tool else to_json_value(output)
        except Exception as exc:
            from chainlab.errors import PlanError, Problem

            raise PlanError(
                Problem("invalid_field", f"output does not fit the step: {exc}", step_id, "output")
            ) from None
    _mark_running(k, "resolution")
    if retry:
        k.emit("step_ready", step_id, st.attempts, {"resolved": "retry", "note": note})
        heapq.heappush(k.ready, (node.order, step_id))
    elif fail:
        k.emit(
            "step_failed",
            step_id,
            st.attempts,
            {
                "error_kind": ErrorKind.EXECUTION_FAILED,
                "resolved": "fail",
                "error": f"marked failed by a person{': ' + note if note else ''}",
            },
        )
        k._after_done(node)
    else:
        k.emit(
            "step_succeeded",
            step_id,
            st.attempts,
            {"output": value, "resolved": "output", "note": note},
        )
        k._after_done(node)
    _kick(k)


def _mark_running(k: Kernel, reason: str) -> None:
    """A person's decision moves a suspended run on: record it before its effects."""
    if k.state.status == R.SUSPENDED:
        k.emit("run_resumed", payload={"reason": reason}, run_status=R.RUNNING)


def _kick(k: Kernel) -> None:
    """Wake workers for what became ready and let the coordinator re-evaluate."""
    k._wake_workers(0)
    k.poke()
