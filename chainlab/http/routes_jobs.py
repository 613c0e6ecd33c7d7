"""A remote job's completion from outside (issue 27): ``POST
/runs/{run_id}/steps/{step_id}/complete`` with ``output`` or ``error``: the callback a job
backend calls when the job ends, so the run need not wait for its next poll. The same as
:meth:`chainlab.runtime.Runtime.complete_job`: applied wherever the run is driven, stored
when it arrives before the job's waiter is armed, refused (409) the second time."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from chainlab.errors import DecisionError, RunStateError
from chainlab.http.api import by_of, endpoint, json, service
from chainlab.http.bodies import Body, By, read_model
from chainlab.http.errors import ApiError

__all__ = ["Complete"]


class Complete(Body):
    """``POST /runs/{run_id}/steps/{step_id}/complete``: exactly one of ``output`` (the job
    succeeded with it) or ``error`` (it failed, with this message)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"oneOf": [
        {"required": ["output"], "properties": {"error": {"type": "null"}}},
        {"required": ["error"], "properties": {"error": {"type": "string"}},
         "not": {"required": ["output"]}},
    ]})

    output: Any = Field(default=None, description="The job succeeded: the step's output.")
    error: str | None = Field(default=None, max_length=4000,
                              description="The job failed: why (kept in the log).")
    by: By


@endpoint("POST", "/runs/{run_id}/steps/{step_id}/complete", "Complete a waiting remote job",
          tag="decisions", body=Complete, returns="Decision",
          errors=(400, 404, 409, 413, 415, 422, 504))
async def complete(request: Request) -> Response:
    """End the wait of a remote job step: with ``output`` it succeeds (checked against the
    job's output schema), with ``error`` it fails (and its retry policy applies). 409 when
    the step is not a waiting job, or was completed already."""
    svc = service(request)
    body = await read_model(request, Complete, svc.config.max_body_bytes)
    given = "output" in body.model_fields_set
    if given == (body.error is not None):
        raise ApiError(400, "bad_request", "complete takes exactly one of output or error",
                       fix='e.g. {"output": {"accuracy": 0.93}} or {"error": "OOM"}')
    run_id, step_id = request.path_params["run_id"], request.path_params["step_id"]
    by = by_of(request, body.by)
    try:
        await svc.runtime.complete_job(run_id, step_id, output=body.output, error=body.error,
                                       by=by, timeout=svc.config.decision_timeout_s)
    except DecisionError as exc:
        raise ApiError(422, "invalid_decision", str(exc),
                       fix="send an output that is JSON data") from None
    except RunStateError as exc:
        if type(exc) is not RunStateError:  # a driver that appeared, a timeout...: as usual
            raise
        raise ApiError(409, "not_waiting", str(exc),
                       fix="GET /runs/{run_id} shows the step's job (steps.<id>.job)") from None
    return json({"outcome": "applied", "run_id": run_id, "step_id": step_id,
                 "action": "complete", "by": by})
