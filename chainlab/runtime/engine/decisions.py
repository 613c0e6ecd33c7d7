"""A person's decisions: approve, reject, resolve, rollback (DESIGN §6-§8).

Pure functions over a run's folded state: the SAME checks serve the live kernel, the CLI
(deciding on a stored run before taking it over) and the notebook widget, so their messages
cannot drift. A decision is returned as a :class:`Decision` (the events to record, then
what the scheduler does); the kernel records it BEFORE its effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from chainlab._text import safe_repr
from chainlab.errors import ApproverError, DecisionError, RunStateError, UnknownStepError
from chainlab.events import ErrorKind, EventKind, RunState, RunStatus, StepStatus
from chainlab.runtime.engine.attempt.call.seam import invalid_input
from chainlab.runtime.engine.budget import BUDGET_EXCEEDED
from chainlab.tools import NotJSONError, args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.tools import Tool

__all__ = [
    "Action",
    "Decision",
    "approve",
    "check",
    "check_approve_args",
    "check_approver",
    "check_completion",
    "check_revoke",
    "check_rollback",
    "completion_payload",
    "reject",
    "requester",
    "resolve",
    "waiting_under",
]

S = StepStatus


class Action(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    RESOLVE = "resolve"
    COMPLETE_JOB = "complete_job"  # a remote job's completion from outside (a callback)
    REVOKE = "revoke"  # a grant (DESIGN §21); the request's step_id carries the grant id


_WAITS_FOR = {
    Action.APPROVE: S.WAITING_CONFIRMATION,
    Action.REJECT: S.WAITING_CONFIRMATION,
    Action.RESOLVE: S.IN_DOUBT,
}


@dataclass(frozen=True, slots=True)
class Decision:
    """Events to record for ``step_id`` (kind, attempt, payload), then what happens:
    ``ready`` (queue it with ``args``), ``done`` (it ended: release or skip dependants)."""

    step_id: str
    events: list[tuple[EventKind, int | None, dict[str, Any]]]
    then: Literal["ready", "done"]
    args: dict[str, Any] | None = field(default=None)


def check(state: RunState, action: Action | str, step_id: str) -> None:
    """Raise UnknownStepError or RunStateError unless ``step_id`` waits for ``action``."""
    action = Action(action)
    if action == Action.COMPLETE_JOB:
        check_completion(state, step_id)
        return
    if action == Action.REVOKE:
        check_revoke(state, step_id)
        return
    st = state.steps.get(step_id)
    if st is None:
        raise UnknownStepError(step_id, state.steps, run_id=state.run_id)
    status = _WAITS_FOR[action]
    if st.status != status:
        waiting = [step_id for step_id, s in state.steps.items() if s.status == status]
        who = ""
        if st.decided is not None:
            who = f"; {st.decided['action']} by {st.decided.get('by') or 'someone'}"
        raise RunStateError(
            f"cannot {action} step {step_id!r} of run {state.run_id!r}: it is {st.status}"
            f"{who}, not {status} ({status}: {', '.join(waiting) or 'none'})",
            run_id=state.run_id,
            status=str(st.status),
        )


def check_revoke(state: RunState, grant_id: str) -> None:
    """Raise RunStateError unless the run has grant ``grant_id``, not revoked yet."""
    g = state.grants.get(grant_id)
    if g is None or g["revoked"] is not None:
        known = ", ".join(state.grants) or "none"
        what = "has no grant" if g is None else \
            f"already had grant revoked by {g['revoked']['by']}:"
        raise RunStateError(f"run {state.run_id!r} {what} {grant_id!r} (grants: {known})",
                            run_id=state.run_id)


def waiting_under(state: RunState, step_id: str) -> list[str]:
    """The steps that wait for a confirmation at or under ``step_id``: the step itself, or
    every waiting instance of a ``for_each`` step (``ID[i]``) and step of a sub-chain
    (``ID/child``), in the order they were added. What "approve all" decides, each on its
    own, bound to its own args. Raises UnknownStepError for a step the run does not have."""
    if step_id not in state.steps:
        raise UnknownStepError(step_id, state.steps, run_id=state.run_id)
    below = (step_id + "[", step_id + "/")
    return [sid for sid, st in state.steps.items()
            if st.status == S.WAITING_CONFIRMATION
            and (sid == step_id or sid.startswith(below))]


def check_completion(state: RunState, step_id: str) -> None:
    """Raise UnknownStepError or RunStateError unless ``step_id`` is a remote job that is
    submitting or waiting and has no completion yet (a second completion is refused)."""
    st = state.steps.get(step_id)
    if st is None:
        raise UnknownStepError(step_id, state.steps, run_id=state.run_id)
    job = st.job
    waiting = [s.step_id for s in state.steps.values()
               if s.job is not None and s.status == S.RUNNING and s.job["phase"] != "ended"]
    where = f"(waiting jobs: {', '.join(waiting) or 'none'})"
    if job is not None and job["completion"] is not None:
        by = job["completion"].get("by") or "someone"
        raise RunStateError(
            f"cannot complete job step {step_id!r} of run {state.run_id!r} again: it was "
            f"already completed by {by}; a second completion is refused {where}",
            run_id=state.run_id, status=str(st.status))
    if job is None or st.status != S.RUNNING or job["phase"] == "ended":
        what = "not a remote job" if job is None else f"{st.status}, not waiting"
        raise RunStateError(
            f"cannot complete step {step_id!r} of run {state.run_id!r}: it is {what} "
            f"{where}", run_id=state.run_id, status=str(st.status))


def completion_payload(step_id: str, *, output: Any, error: str | None,
                       by: str | None) -> dict[str, Any]:
    """The ``job_completed`` payload: ``output`` (JSON data) or ``error`` (a message)."""
    if error is not None:
        if output is not None:
            raise DecisionError(f"step {step_id!r}: pass output= or error=, not both",
                                step_id=step_id, field="output")
        return {"error": _json(str(error), step_id, "error"), "by": _json(by, step_id, "by")}
    return {"output": _json(output, step_id, "output"), "by": _json(by, step_id, "by")}


def check_rollback(state: RunState) -> None:
    """Whether a rollback of the run (its folded ``state``) has something to do. Raises
    RunStateError when it has not: the run is already rolled back."""
    if state.status == RunStatus.ROLLED_BACK:
        raise RunStateError(
            f"run {state.run_id!r} is already rolled back",
            run_id=state.run_id,
            status=str(state.status),
        )


def check_approve_args(tool: Tool | None, step_id: str, args: Any) -> dict[str, Any]:
    """The ``args`` a person edited to approve step ``step_id`` with, as JSON data that fits
    ``tool`` (None: a tool this process does not have, not checked). Raises DecisionError
    naming the field (not an object, not JSON data, not the tool's args)."""
    if not isinstance(args, dict):
        raise DecisionError(
            f"step {step_id!r}: approval args must be a JSON object, got {type(args).__name__}",
            step_id=step_id,
            field="args",
        )
    data = _json(args, step_id, "args")
    if tool is not None:
        try:
            tool.validate_args(data)
        except ValidationError as exc:
            raise DecisionError(
                f"step {step_id!r}: {invalid_input(exc, tool.name).message}",
                step_id=step_id,
                field="args",
            ) from None
    return data  # type: ignore[no-any-return]


def requester() -> str:
    """Who decides, by default: ``user@host``."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        user = "?"
    return f"{user}@{socket.gethostname()}"


def check_approver(tool: Tool | None, step_id: str, by: str | None,
                   roles: Any | None) -> None:
    """Raise ApproverError unless ``by`` (with ``roles``) may approve or grant for the
    step's tool: a tool naming ``approvers`` takes only a principal with one of them."""
    if tool is None or not tool.approvers:
        return
    required = tool.approvers
    have = tuple(roles or ())
    if not set(have) & set(required):
        raise ApproverError(
            f"step {step_id!r}: {by or 'this principal'} (roles: {', '.join(have) or 'none'}) "
            f"may not approve or grant for tool {tool.name!r}; it takes a principal with "
            f"role {' or '.join(required)}", step_id=step_id, by=by, roles=have,
            required=tuple(required))


def approve(
    state: RunState, tool: Tool | None, step_id: str, args: Any | None, note: str | None,
    by: str | None = None, budget: Any | None = None, current_budget: Any | None = None,
    *, roles: Any | None = None, grant: dict[str, Any] | None = None,
) -> Decision:
    """Approve ``step_id`` (see :meth:`chainlab.Run.approve`); ``grant``: the record of a
    grant given with it (``approvals.make_grant``). Raises RunStateError, DecisionError,
    ApproverError (``by`` lacks the tool's approver role): then nothing is recorded."""
    check(state, Action.APPROVE, step_id)
    if not (by or "").startswith(("policy:", "grant:")):
        check_approver(tool, step_id, by, roles)
    st = state.steps[step_id]
    payload: dict[str, Any] = {"note": _json(note, step_id, "note"),
                               "args_hash": st.args_hash, "by": _json(by, step_id, "by")}
    if grant is not None:
        payload["grant"] = _json(grant, step_id, "grant")
    if st.reason == BUDGET_EXCEEDED:  # it waits for the budget: let it past this one
        payload["over_budget"] = True
    if budget is not None:
        payload["budget"] = check_budget_raise(step_id, budget, current_budget)
    run_args = dict(st.args or {})
    if args is not None:
        run_args = check_approve_args(tool, step_id, args)
        payload.update(args=run_args, args_hash=args_hash(run_args))
    return Decision(step_id, [(EventKind.STEP_APPROVED, None, payload)], "ready", run_args)


def check_budget_raise(step_id: str, budget: Any, current: Any | None) -> dict[str, Any]:
    """A raised budget: ``budget``'s limits over the ``current`` ones. Raises
    DecisionError for limits that are not a Budget's."""
    from chainlab.plan.parts import Budget

    try:
        merged = {**dict(current or {}), **dict(_json(budget, step_id, "budget"))}
        raised = Budget.model_validate(merged).model_dump(exclude_none=True)
    except (ValidationError, TypeError, ValueError) as exc:
        raise DecisionError(f"step {step_id!r}: budget={safe_repr(budget)} is not a budget: "
                            f"{exc}; give max_cost, max_tokens and/or max_duration_s",
                            step_id=step_id, field="budget") from None
    return _json(raised, step_id, "budget")  # type: ignore[no-any-return]


def reject(state: RunState, step_id: str, reason: str, by: str | None = None) -> Decision:
    check(state, Action.REJECT, step_id)
    payload = {"reason": _json(reason, step_id, "reason"), "by": _json(by, step_id, "by")}
    return Decision(step_id, [(EventKind.STEP_REJECTED, None, payload)], "done")


def resolve(
    state: RunState,
    tool: Tool | None,
    step_id: str,
    *,
    output: Any,
    retry: bool,
    fail: bool,
    note: str | None,
    by: str | None = None,
) -> Decision:
    if retry and fail:
        raise DecisionError(
            "pass at most one of retry=True, fail=True (or an output)",
            step_id=step_id,
            field="resolution",
        )
    check(state, Action.RESOLVE, step_id)
    st = state.steps[step_id]
    note, by = _json(note, step_id, "note"), _json(by, step_id, "by")
    if retry:
        return Decision(
            step_id,
            [(EventKind.STEP_READY, st.attempts, {"resolved": "retry", "note": note, "by": by})],
            "ready",
            dict(st.args or {}),
        )
    if fail:
        error = f"marked failed by a person{': ' + note if note else ''}"
        return Decision(
            step_id,
            [
                (
                    EventKind.STEP_FAILED,
                    st.attempts,
                    {"error_kind": ErrorKind.EXECUTION_FAILED, "resolved": "fail", "error": error,
                     "by": by},
                )
            ],
            "done",
        )
    value = _json(output, step_id, "output")  # (the gate first: a message names the path)
    if tool is not None:
        try:
            value = tool.check_output(value)
        except Exception as exc:
            raise DecisionError(
                f"step {step_id!r}: the output does not fit the step: {exc}",
                step_id=step_id,
                field="output",
            ) from None
    return Decision(
        step_id,
        [
            (
                EventKind.STEP_SUCCEEDED,
                st.attempts,
                {"output": value, "resolved": "output", "note": note, "by": by},
            )
        ],
        "done",
    )


def _json(value: Any, step_id: str, what: str) -> Any:
    """``value`` through the value gate (chainlab._json). Raises DecisionError naming
    where the bad value sits (``args.rows[3].price``)."""
    try:
        return to_json_value(value, what)
    except NotJSONError as exc:
        raise DecisionError(
            f"step {step_id!r}: {what} must be JSON data: {exc}", step_id=step_id, field=what
        ) from None
