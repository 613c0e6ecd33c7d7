"""The one error shape of the HTTP API, and the one place chainlab errors become it.

Every error response is JSON ``{"error": CODE, "message": TEXT, "fix"?: TEXT,
"problems"?: [...], ...}`` with the status code that says whose move it is: 4xx for the
client's (and never a traceback, in the response or in the server's log), 5xx for the
server's. :func:`api_error` maps every chainlab error once (httpx's way with httpcore's
errors); the table in ``tests/http/test_errors.py`` checks that it stays complete.

=====  ======================  ==================================================
code   error                   when
=====  ======================  ==================================================
400    bad_request             malformed JSON, a query parameter or body field of the
                               wrong type, an unknown body field, a value the value
                               gate refuses (its path in ``problems``), a front end's
                               UsageError
401    unauthorized            no or a wrong ``Authorization: Bearer TOKEN``
404    not_found               no such route, chain, run or step
405    method_not_allowed      a route that exists, with another method
409    not_waiting             the step no longer waits for that decision (``decided``
                               says who decided it, when known)
409    conflict                the run's state does not allow it (ended, driven by
                               another live process, taken over meanwhile)
413    body_too_large          the request body is over the server's limit
415    unsupported_media_type  a body that is neither JSON nor YAML
422    invalid_chain           a chain (inline, or its context and options) does not
                               validate: ``problems`` lists every one
422    invalid_decision        edited args / a resolved output do not fit the tool
422    idempotency_key_reused  the Idempotency-Key was used for another request
422    unredactable            the server's redactor cannot mask a value sent (a
                               context, a note): nothing was stored
500    internal                a chainlab bug (logged with its traceback, once)
503    store_unavailable       the store cannot be used (the message says why)
503    unavailable             an optional part is missing (Graphviz for graph.svg)
504    driver_timeout          the run's live driver did not answer a decision in time
=====  ======================  ==================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chainlab._json import NotJSONError
from chainlab.errors import (
    ApproverError,
    ChainlabError,
    DecisionError,
    DecisionTimeoutError,
    DriverAliveError,
    ExperimentError,
    ExperimentNotFoundError,
    IdempotencyKeyError,
    MissingExtraError,
    PlanError,
    Problem,
    RedactionError,
    RunExistsError,
    RunNotFoundError,
    RunStateError,
    StaleEpochError,
    StoreError,
    UnknownChainStepError,
    UnknownStepError,
    UsageError,
)

__all__ = ["INVALID_FIELDS", "ApiError", "api_error", "problem_dict"]


class ApiError(ChainlabError):
    """An error response of the chainlab HTTP API: raised by the server's handlers (and
    turned into the response) and by :class:`chainlab.http.Client` (from the response).

    ``status`` (the HTTP status code), ``error`` (a stable code: the module docstring's
    table), ``message`` (what went wrong, naming the bad value), ``fix`` (what to do, or
    None), ``problems`` (a plan's problems, each ``{code, message, step_id, field, line,
    column}``), ``extra`` (more fields of the body, e.g. ``decided``)."""

    def __init__(self, status: int, error: str, message: str, *, fix: str | None = None,
                 problems: Iterable[Mapping[str, Any]] | None = None,
                 extra: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.fix = fix
        self.problems = [dict(p) for p in problems] if problems is not None else None
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The response body: ``error`` and ``message``, then ``fix`` and ``problems`` when
        there are any, then the extra fields."""
        out: dict[str, Any] = {"error": self.error, "message": self.message}
        if self.fix:
            out["fix"] = self.fix
        if self.problems is not None:
            out["problems"] = self.problems
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_body(cls, status: int, body: Any) -> ApiError:
        """The error a response carries (a body that is not the API's shape, e.g. from a
        proxy, becomes ``http_<status>`` with the text)."""
        if not isinstance(body, dict) or "error" not in body:
            text = body if isinstance(body, str) else repr(body)
            return cls(status, f"http_{status}", text[:500] or f"HTTP {status}")
        extra = {k: v for k, v in body.items()
                 if k not in ("error", "message", "fix", "problems")}
        return cls(status, str(body["error"]), str(body.get("message", "")),
                   fix=body.get("fix"), problems=body.get("problems"), extra=extra)

    def __str__(self) -> str:
        text = f"{self.status} {self.error}: {self.message}"
        if self.problems:
            text += "".join(f"\n  - [{p.get('code')}] {p.get('message')}" for p in self.problems)
        return text + (f"\n{self.fix}" if self.fix else "")

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.error!r}, {self.message!r})"


def problem_dict(problem: Problem) -> dict[str, Any]:
    """One plan problem as the API shows it (the fields of :class:`chainlab.Problem`)."""
    return {"code": problem.code, "message": problem.message, "step_id": problem.step_id,
            "field": problem.field, "line": problem.line, "column": problem.column}


#: DecisionError.field values that mean "what you sent does not fit" (422); any other field
#: (the action, when a remote driver refused) means the step no longer waits (409)
INVALID_FIELDS = frozenset({"args", "output", "resolution", "budget", "note", "reason", "by",
                            "error", "grant", "grant.when", "grant.scope", "grant.ttl_s"})


def api_error(exc: BaseException) -> ApiError | None:
    """The API error for a chainlab error (None for anything else: a bug, answered 500).
    Order matters: subclasses first."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, PlanError):
        return ApiError(422, "invalid_chain", _plan_message(exc),
                        fix="fix every problem listed, then send the request again",
                        problems=[problem_dict(p) for p in exc.problems])
    if isinstance(exc, UsageError):
        return ApiError(400, "bad_request", exc.message, fix=exc.hint)
    if isinstance(exc, NotJSONError):  # (the doors turn it into their own errors first)
        return ApiError(400, "bad_request", str(exc), fix="send JSON data within the limits")
    if isinstance(exc, RunNotFoundError):
        return ApiError(404, "not_found", str(exc), fix="list the runs with GET /runs")
    if isinstance(exc, ExperimentNotFoundError):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, ExperimentError):
        return ApiError(422, "invalid_experiment", str(exc),
                        fix="fix every problem listed; nothing was started",
                        extra={"problems": exc.problems})
    if isinstance(exc, UnknownStepError | UnknownChainStepError):
        return ApiError(404, "not_found", str(exc),
                        fix="GET /runs/{run_id} lists the run's steps")
    if isinstance(exc, ApproverError):  # (before DecisionError: its subclass)
        return ApiError(403, "forbidden", str(exc),
                        fix=f"decide with the token of a principal with role "
                            f"{' or '.join(exc.required)}",
                        extra={"step_id": exc.step_id, "required": list(exc.required)})
    if isinstance(exc, DecisionError):
        if exc.field in INVALID_FIELDS:
            return ApiError(422, "invalid_decision", str(exc),
                            fix=f"send {exc.field} that fit the step's tool",
                            extra={"step_id": exc.step_id, "field": exc.field})
        return ApiError(409, "not_waiting", str(exc),
                        fix="GET /runs/{run_id}/confirmations lists what waits")
    if isinstance(exc, DecisionTimeoutError):
        return ApiError(504, "driver_timeout", str(exc),
                        fix="check the process that drives the run, then decide again")
    if isinstance(exc, DriverAliveError):
        return ApiError(409, "conflict", str(exc),
                        fix="send the request to the process that drives the run, or "
                            "resume with {\"force\": true} to take it over")
    if isinstance(exc, RunStateError):  # (RunNotActiveError too)
        return ApiError(409, "conflict", str(exc))
    if isinstance(exc, IdempotencyKeyError):
        return ApiError(422, "idempotency_key_reused", str(exc),
                        fix="use a new key for a new request",
                        extra={"run_id": exc.run_id})
    if isinstance(exc, RunExistsError):
        return ApiError(409, "conflict", f"{exc}, started by another request",
                        fix="choose another run_id, or leave it out")
    if isinstance(exc, StaleEpochError):
        return ApiError(409, "conflict", str(exc),
                        fix="read the run again (GET /runs/{run_id}): another decision or "
                            "driver moved it on")
    if isinstance(exc, RedactionError):  # (a value sent that the redactor cannot mask)
        return ApiError(422, "unredactable", str(exc),
                        fix="send a value the server's redactor can mask; nothing was stored",
                        extra={"redactor": exc.redactor, "field": exc.field})
    if isinstance(exc, StoreError):
        return ApiError(503, "store_unavailable", str(exc))
    if isinstance(exc, MissingExtraError):
        return ApiError(503, "unavailable", str(exc))
    return None


def _plan_message(exc: PlanError) -> str:
    n = len(exc.problems)
    head = f"chain {exc.chain_name!r}" if exc.chain_name else "the chain"
    first = f": {exc.problems[0].message}" if exc.problems else ""
    return f"{head} has {n} problem{'s' if n != 1 else ''}{first}"
