"""A person's decisions on a run's steps: what waits (``GET /runs/{run_id}/confirmations``)
and ``POST /runs/{run_id}/steps/{step_id}/approve | reject | resolve``; the run's grants
(``GET /runs/{run_id}/grants``, ``POST /runs/{run_id}/grants/{grant_id}/revoke``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chainlab.http.api import Param, by_of, decider, endpoint, json, roles_of, service
from chainlab.http.bodies import (
    Approve,
    ApproveAll,
    Body,
    Reject,
    Resolve,
    query_choice,
    read_model,
)

__all__: list[str] = []

_DECISION_ERRORS = (400, 404, 409, 413, 415, 422, 504)
_KINDS = ("confirm", "in_doubt")


@endpoint("GET", "/runs/{run_id}/confirmations", "What waits for a person in this run",
          tag="decisions", returns="WaitingList", errors=(404,),
          params=(Param("kind", "confirm (approve or reject) or in_doubt (resolve).",
                        {"type": "string", "enum": list(_KINDS)}),))
async def confirmations(request: Request) -> Response:
    """Every step of the run that waits for a decision: its tool, the resolved args the
    approval is bound to, the preview the approver sees (or, in doubt, the error), since
    when, and the URLs that decide it. Read it any time: nothing is lost with a stream."""
    kind = query_choice(request, "kind", _KINDS)
    items = await service(request).confirmations(request.path_params["run_id"])
    if kind:
        items = [d for d in items if d["kind"] == kind]
    return json({"waiting": items})


async def _decide(request: Request, action: str, model: type[Body]) -> Response:
    body = await read_model(request, model, service(request).config.max_body_bytes)
    outcome = await decider(request).decide(
        request.path_params["run_id"], request.path_params["step_id"], action, body,
        by=by_of(request, getattr(body, "by", None)), roles=roles_of(request))
    return json(outcome)


@endpoint("POST", "/runs/{run_id}/steps/{step_id}/approve", "Approve a waiting step",
          tag="decisions", body=Approve, returns="Decision",
          errors=(*_DECISION_ERRORS, 403))
async def approve(request: Request) -> Response:
    """Approve a step that waits for confirmation; the SAME run goes on (in this server,
    in the process that drives it, or taken over here when nobody does). With ``args`` the
    step runs with those instead (422 when they do not fit the tool). 409 when the step no
    longer waits: the body's ``decided`` says who decided it, when and how. With ``grant``
    the approval decides similar calls too (DESIGN §21). 403 when the token's principal
    lacks the role the tool's ``approvers`` name (nothing is recorded)."""
    return await _decide(request, "approve", Approve)


@endpoint("POST", "/runs/{run_id}/steps/{step_id}/approve-all",
          "Approve every waiting step under a step", tag="decisions", body=ApproveAll,
          returns="ApprovedAll", errors=_DECISION_ERRORS)
async def approve_all(request: Request) -> Response:
    """Approve every step that waits for a confirmation at or under this step (the waiting
    instances of a ``for_each`` step, the steps of a sub-chain), each with its OWN args and
    recorded as its own approval. A step someone else decides meanwhile is left out. 409
    ``not_waiting`` when nothing waits there."""
    body = await read_model(request, ApproveAll, service(request).config.max_body_bytes)
    assert isinstance(body, ApproveAll)
    run_id, step_id = request.path_params["run_id"], request.path_params["step_id"]
    approved = await decider(request).approve_all(
        run_id, step_id, body, by=by_of(request, body.by))
    return json({"approved": approved, "run_id": run_id, "step_id": step_id,
                 "by": by_of(request, body.by)})


@endpoint("POST", "/runs/{run_id}/steps/{step_id}/reject", "Reject a waiting step",
          tag="decisions", body=Reject, returns="Decision", errors=_DECISION_ERRORS)
async def reject(request: Request) -> Response:
    """Reject a step that waits for confirmation: its dependants are skipped and, under
    ``fail_fast``, the run rolls back. 409 as for approve."""
    return await _decide(request, "reject", Reject)


@endpoint("POST", "/runs/{run_id}/steps/{step_id}/resolve", "Resolve an in-doubt step",
          tag="decisions", body=Resolve, returns="Decision", errors=_DECISION_ERRORS)
async def resolve(request: Request) -> Response:
    """Decide a step whose call's effect is unknown (``in_doubt``): it took effect with
    ``output`` (checked against the tool's output schema), or ``retry`` it, or ``fail``
    it: exactly one."""
    return await _decide(request, "resolve", Resolve)


@endpoint("GET", "/runs/{run_id}/grants", "The run's grants", tag="decisions",
          returns="GrantList", errors=(404,))
async def grants(request: Request) -> Response:
    """Every grant given in the run (DESIGN §21): its condition, scope, who gave it, until
    when, its status (active, revoked, expired, stale: the rules changed) and the calls it
    decided."""
    return json({"grants": await service(request).grants(request.path_params["run_id"])})


@endpoint("POST", "/runs/{run_id}/grants/{grant_id}/revoke", "Revoke a grant",
          tag="decisions", returns="Decision", errors=(404, 409, 504))
async def revoke(request: Request) -> Response:
    """Revoke a grant: it decides nothing more; the calls it decided stay decided. 409 for
    a grant the run does not have or one already revoked."""
    run_id, grant_id = request.path_params["run_id"], request.path_params["grant_id"]
    svc = service(request)
    await svc.read(run_id)  # (404 for an unknown run)
    by = by_of(request)
    outcome = await svc.runtime.decide(run_id, grant_id, "revoke", by=by,
                                       timeout=svc.config.decision_timeout_s)
    return json({"outcome": outcome, "run_id": run_id, "step_id": grant_id,
                 "action": "revoke", "by": by})
