"""Approve, reject and resolve over HTTP: :meth:`Runtime.decide`, the path of the widget's
buttons and of ``chainlab approve``, wherever the run is driven (this server: applied here;
another live process: sent through the store; nobody: taken over here).

What HTTP adds:

* the args or output a person sends are checked against the served tool first (422, and a
  refused decision never takes a run over);
* decisions on one run are taken one at a time in this server, so two clients that approve
  one step at once get one 200 and one 409, whoever drives the run;
* a 409 says what the step is now and, when the log knows, who decided it, how and when
  (``decided``: ``{action, by, at}``, the fold's ``StepState.decided``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import (
    DecisionError,
    DecisionTimeoutError,
    RunStateError,
    StaleEpochError,
    UnknownStepError,
)
from chainlab.events import StepStatus
from chainlab.http.bodies import Approve, ApproveAll, Body, Reject, Resolve
from chainlab.http.errors import INVALID_FIELDS, ApiError, api_error
from chainlab.plan.schema import Chain
from chainlab.runtime import check_approve_args, check_approver
from chainlab.runtime.preparing import toolbox_of

if TYPE_CHECKING:
    from chainlab.http.service import Service
    from chainlab.tools import Tool

__all__ = ["Decider"]

#: the step status each decision needs
_NEEDS = {"approve": StepStatus.WAITING_CONFIRMATION, "reject": StepStatus.WAITING_CONFIRMATION,
          "resolve": StepStatus.IN_DOUBT}
_VERB = {"approve": "approved", "reject": "rejected", "resolve": "resolved"}


class Decider:
    """Decisions of one server, serialised per run."""

    def __init__(self, service: Service):
        self.service = service
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def _turn(self, run_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(run_id, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        self._locks[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[run_id]
            if users <= 1:
                del self._locks[run_id]
            else:
                self._locks[run_id] = (lock, users - 1)

    async def decide(self, run_id: str, step_id: str, action: str, body: Body, *,
                     by: str, roles: list[str] | None = None) -> dict[str, Any]:
        """Apply ``action`` on ``step_id``. Returns ``{outcome, run_id, step_id, action,
        by}``: ``outcome`` ``applied``, or ``recorded`` for a queue's run no worker of the
        fleet answered for yet (a worker applies it when it takes the run). Raises ApiError
        (400, 404, 409 with ``decided``, 422, 504)."""
        fields = _fields(action, body)
        service = self.service
        async with self._turn(run_id):
            record, _, state = await service.read(run_id)
            if step_id not in state.steps:
                raise UnknownStepError(step_id, state.steps, run_id=run_id)
            if state.steps[step_id].status != _NEEDS[action]:  # the state first: 409, not
                raise await self._refused(run_id, step_id, action, None)  # 422 on its body
            tool = _tool_of(toolbox_of(service.runtime.toolbox, record.meta, run_id),
                            record.chain, step_id, state)
            if action == "approve":  # (403 before anything: nothing is recorded)
                check_approver(tool, step_id, by, roles)
            _precheck(tool, step_id, action, fields)
            try:
                outcome = await service.runtime.decide(
                    run_id, step_id, action, by=by, timeout=service.config.decision_timeout_s,
                    roles=roles, **fields)
            except DecisionTimeoutError:
                raise
            except DecisionError as exc:
                if exc.field in INVALID_FIELDS:
                    raise
                raise await self._refused(run_id, step_id, action, exc) from None
            except (RunStateError, StaleEpochError) as exc:
                raise await self._refused(run_id, step_id, action, exc) from None
        return {"outcome": outcome, "run_id": run_id, "step_id": step_id, "action": action,
                "by": by}

    async def approve_all(self, run_id: str, step_id: str, body: ApproveAll, *,
                          by: str) -> list[str]:
        """Approve every step waiting for a confirmation at or under ``step_id``, each with
        its own args (:meth:`Runtime.approve_all`). Returns their ids. Raises ApiError (404,
        409 ``not_waiting`` when nothing waits there, 504)."""
        service = self.service
        async with self._turn(run_id):
            _, _, state = await service.read(run_id)
            if step_id not in state.steps:
                raise UnknownStepError(step_id, state.steps, run_id=run_id)
            approved: list[str] = await service.runtime.approve_all(
                run_id, step_id, by=by, note=body.note,
                timeout=service.config.decision_timeout_s)
        if not approved:
            raise ApiError(409, "not_waiting", f"nothing waits for a confirmation at or "
                           f"under step {step_id!r} of run {run_id!r}",
                           fix="GET /runs/{run_id}/confirmations lists what waits",
                           extra={"run_id": run_id, "step_id": step_id})
        return approved

    async def _refused(self, run_id: str, step_id: str, action: str,
                       exc: Exception | None) -> ApiError:
        """409 ``not_waiting`` when the step does not wait for ``action`` (any more), with
        who decided it; else the error's own mapping (a driver that appeared, say)."""
        _, _, state = await self.service.read(run_id)
        status = state.steps[step_id].status
        if status == _NEEDS[action] and exc is not None:  # it still waits: the error says
            return api_error(exc) or ApiError(409, "conflict", str(exc))  # why not now
        decided = _decided(state.steps[step_id].decided)
        what = "no longer waits" if decided else "does not wait"
        message = (f"step {step_id!r} of run {run_id!r} {what} for {action}: it is "
                   f"{status}")
        if decided:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(decided["at"]))
            message += f"; {decided['action']} by {decided['by'] or 'someone'} at {when}"
        waiting = [s for s, st in state.steps.items() if st.status == _NEEDS[action]]
        return ApiError(409, "not_waiting", message,
                        fix="GET /runs/{run_id}/confirmations lists what waits"
                        if not waiting else f"steps that wait for {action}: "
                        f"{', '.join(waiting)}",
                        extra={"run_id": run_id, "step_id": step_id, "status": str(status),
                               "decided": decided})


def _decided(decided: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fold's record of the last person's decision on a step (``StepState.decided``)
    as the 409 shows it: ``{action, by, at}``."""
    if decided is None:
        return None
    return {"action": decided["action"], "by": decided.get("by"), "at": decided["ts"]}


def _fields(action: str, body: Body) -> dict[str, Any]:
    """The keyword arguments of :meth:`Runtime.decide` for ``body``."""
    if isinstance(body, Approve):
        return {"args": body.args, "note": body.note,
                **({"budget": body.budget} if body.budget is not None else {}),
                **({"grant": body.grant} if body.grant is not None else {})}
    if isinstance(body, Reject):
        return {"reason": body.reason}
    assert isinstance(body, Resolve), action
    chosen = body.chosen()
    if len(chosen) != 1:
        raise ApiError(400, "bad_request",
                       "resolve takes exactly one of output, retry: true, fail: true"
                       + (f" (got {' and '.join(chosen)})" if chosen else ""),
                       fix='e.g. {"output": {"id": 1}} when the call took effect')
    if body.retry:
        return {"retry": True, "note": body.note}
    if body.fail:
        return {"fail": True, "note": body.note}
    return {"output": body.output, "note": body.note}


def _precheck(tool: Tool | None, step_id: str, action: str, fields: dict[str, Any]) -> None:
    """Edited args / a resolved output must fit the step's tool (the runtime's own checks,
    here first, so that a mistake never takes a run over). Raises DecisionError."""
    if action == "approve" and fields.get("args") is not None:
        check_approve_args(tool, step_id, fields["args"])
    if action == "resolve" and "output" in fields and tool is not None:
        try:
            tool.check_output(fields["output"])
        except Exception as exc:
            raise DecisionError(f"step {step_id!r}: the output does not fit the step: {exc}",
                                step_id=step_id, field="output") from None


def _tool_of(toolbox: Any, chain_data: dict[str, Any], step_id: str,
             state: Any) -> Tool | None:
    """The tool of ``step_id``: its chain step's, or a for_each instance's parent's (None
    for an agent's call: the runtime checks it)."""
    chain = Chain.from_dict(chain_data)
    st = state.steps.get(step_id)
    if step_id not in chain.step_ids and st is not None and st.parent in chain.step_ids:
        parent = chain.step(st.parent)
        step_id = st.parent if parent.for_each is not None else step_id
    step = chain.step(step_id) if step_id in chain.step_ids else None
    name = step.tool if step is not None else None
    return toolbox.get(name) if name is not None and name in toolbox else None
