"""What a request may send: the bodies (strict pydantic models: an unknown field is an
error, not ignored), the body size limit, and query parameters and the headers the API
reads. Every body, query value and header passes the value gate (:mod:`chainlab._json`)
before anything else reads it. Every mistake is an :class:`~chainlab.http.errors.ApiError`
that names the field and the rule (400, 413, 415).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from chainlab._json import MAX_DEPTH, NotJSONError, to_json_value
from chainlab._text import did_you_mean, safe_repr
from chainlab.http.errors import ApiError
from chainlab.store.queue import QUEUE_NAME

__all__ = [
    "MAX_QUERY_INT",
    "RUN_ID_PATTERN",
    "Approve",
    "Body",
    "Empty",
    "Fork",
    "Reject",
    "Resolve",
    "Resume",
    "StartRun",
    "gated",
    "parse_int",
    "parse_json_body",
    "query_bool",
    "query_choice",
    "query_float",
    "query_int",
    "query_text",
    "read_body",
    "read_model",
]

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"
#: the largest integer a query value or Last-Event-ID may hold (18 digits); here, with the
#: checks that hold to it (the endpoint table documents it, and imports it from here)
MAX_QUERY_INT = 10**18 - 1
JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml",
              "text/plain")

By = Annotated[str | None, Field(default=None, max_length=200, description=(
    "Who decides, kept with the decision's event (default: `http:` and the client's "
    "address). With one shared token the server cannot check it: it records what the "
    "token holder says."))]
# the same name as ``run.approve(note=)``, the CLI's and the magics' ``--note`` (issue 40)
Note = Annotated[str | None, Field(default=None, max_length=4000,
                                   description="A note kept with the decision.")]


class Body(BaseModel):
    """A request body: strict (unknown fields are refused, and a value must have its field's
    JSON type: ``0`` is not ``false``), documented field by field."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Empty(Body):
    """A body with no fields (``{}`` or nothing)."""


class StartRun(Body):
    """``POST /runs`` and ``POST /runs/wait``."""

    chain: str | dict[str, Any] = Field(description=(
        "The name of a served chain (GET /chains), or an inline chain definition (the "
        "chain's JSON: name, steps, options), validated like any plan and limited to the "
        "served toolbox's tools."))
    context: dict[str, Any] = Field(default_factory=dict,
                                    description="The run's context (JSON object).")
    options: dict[str, Any] | None = Field(default=None, description=(
        "Run options merged over the chain's (max_concurrency, on_failure, mode, ...)."))
    run_id: Annotated[str | None, Field(default=None, pattern=RUN_ID_PATTERN, description=(
        "A client-chosen run id: a retried request with the same id returns the same run "
        "(as the Idempotency-Key header does)."))]
    queue: Annotated[str | None, Field(default=None, pattern=QUEUE_NAME.pattern, description=(
        "Enqueue the run in this queue instead of driving it in this server: it is stored "
        "'queued' and a worker of the fleet (chainlab worker --queue NAME) claims and drives "
        "it. A simple identifier, e.g. 'default'."))]


class Approve(Body):
    """``POST /runs/{run_id}/steps/{step_id}/approve``."""

    args: dict[str, Any] | None = Field(default=None, description=(
        "Run the step with these args instead (validated against the tool's input schema: "
        "422 when they do not fit)."))
    budget: dict[str, Any] | None = Field(default=None, description=(
        "For a step stopped by the run's budget (reason budget_exceeded): the raised limits "
        "(max_cost, max_tokens, max_duration_s), merged over the current ones."))
    grant: dict[str, Any] | None = Field(default=None, description=(
        "Also decide similar calls (DESIGN §21): {\"when\": \"args.amount <= 100\", "
        "\"scope\": \"step\" | \"run\", \"ttl_s\": 600 | \"10m\"}; the calls of the same tool "
        "in that scope whose args match, waiting now and later, until it expires or is "
        "revoked (422 for a condition that does not parse or reads an arg the tool lacks)."))
    note: Note
    by: By


class ApproveAll(Body):
    """``POST /runs/{run_id}/steps/{step_id}/approve-all``: every step waiting for a
    confirmation at or under the step (a ``for_each`` step's instances), each approved with
    its own args."""

    note: Annotated[str | None, Field(default=None, max_length=4000, description=(
        "A note kept with each approval."))]
    by: By


class Reject(Body):
    """``POST /runs/{run_id}/steps/{step_id}/reject``."""

    reason: str = Field(min_length=1, max_length=4000, description="Why (kept in the log).")
    by: By


class Resolve(Body):
    """``POST /runs/{run_id}/steps/{step_id}/resolve``: exactly one of ``output`` (the call
    took effect and returned this), ``retry: true`` or ``fail: true``."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"oneOf": [
        {"required": ["output"], "properties": {"retry": {"const": False},
                                                "fail": {"const": False}}},
        {"required": ["retry"], "properties": {"retry": {"const": True},
                                               "fail": {"const": False}},
         "not": {"required": ["output"]}},
        {"required": ["fail"], "properties": {"fail": {"const": True},
                                              "retry": {"const": False}},
         "not": {"required": ["output"]}},
    ]})

    output: Any = Field(default=None, description="The call took effect; this is its output.")
    retry: bool = Field(default=False, description="Call the tool again.")
    fail: bool = Field(default=False, description="Mark the step failed.")
    note: Note
    by: By

    def chosen(self) -> list[str]:
        return [name for name, on in (("output", "output" in self.model_fields_set),
                                      ("retry", self.retry), ("fail", self.fail)) if on]


class Resume(Body):
    """``POST /runs/{run_id}/resume`` and ``/rollback``."""

    force: bool = Field(default=False, description=(
        "Take the run over even if another live process drives it (that one is fenced: "
        "it commits nothing more)."))


class Fork(Body):
    """``POST /runs/{run_id}/fork``: a NEW run from a suspended or finished one."""

    args: dict[str, dict[str, Any]] | None = Field(default=None, description=(
        "{step_id: {arg: value}} merged over those steps' args."))
    outputs: dict[str, Any] | None = Field(default=None, description=(
        "{step_id: output} recorded instead of running those steps."))
    context: dict[str, Any] | None = Field(default=None,
                                           description="Merged over the parent's context.")
    rerun: list[str] | None = Field(default=None, description="Steps to run again.")
    plan_only: bool = Field(default=False, description=(
        "Only say what the fork would do, step by step (reuse, override, rerun, confirm); "
        "nothing is written."))


M = TypeVar("M", bound=Body)


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes (413 beyond: checked on Content-Length
    first, then on what actually arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"the request body is over {limit} bytes",
                    fix="send less (a chain by name instead of inline, say), or start the "
                        "server with a larger --max-body")


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def parse_json_body(raw: bytes, *, what: str = "the request body") -> Any:
    """JSON text as data, through the value gate (chainlab._json: no NaN or infinities, no
    surrogates, nesting and sizes within the limits). Raises ApiError 400 naming the line
    and column, or the path of the bad value."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", f"{what} is not UTF-8 text",
                       fix="send JSON encoded as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, "bad_request",
                       f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column "
                       f"{exc.colno})",
                       fix="send a JSON object, e.g. curl --json '{\"chain\": \"NAME\"}'"
                       ) from None
    except RecursionError:  # far past MAX_DEPTH: the parser itself gave up
        raise ApiError(400, "bad_request", f"{what} is nested too deeply: more than "
                       f"{MAX_DEPTH} levels, the limit of any value",
                       fix="flatten the data") from None
    except ValueError as exc:  # an integer too long to convert
        raise ApiError(400, "bad_request", f"{what} is not usable JSON: {exc}") from None
    return gated(data, "" if what == "the request body" else what)


def gated(data: Any, path: str = "") -> Any:
    """``data`` through the value gate. Raises ApiError 400 naming where the bad value sits
    (``context.rows[3].price``) and the rule, as a problem with that field."""
    try:
        return to_json_value(data, path)
    except NotJSONError as exc:
        raise ApiError(400, "bad_request", str(exc),
                       fix="send JSON data within the limits (docs: Values at the doors)",
                       problems=[{"code": "invalid_field", "message": str(exc),
                                  "step_id": None, "field": exc.path or None, "line": None,
                                  "column": None}]) from None


async def read_model(request: Request, model: type[M], limit: int) -> M:
    """The body as ``model``: JSON (``Content-Type: application/json``, or none); an empty
    body is ``{}``. Raises ApiError: 413, 415, 400 (malformed JSON, not an object, a field
    that does not fit: each one listed in ``problems``)."""
    raw = await read_body(request, limit)
    kind = media_type(request)
    if kind and kind not in JSON_TYPES and not kind.endswith("+json"):
        raise ApiError(415, "unsupported_media_type",
                       f"this endpoint takes JSON, not {kind!r}",
                       fix="send Content-Type: application/json (curl --json '{...}')")
    data = parse_json_body(raw) if raw.strip() else {}
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request",
                       f"the request body must be a JSON object, got {type(data).__name__}",
                       fix="send {\"field\": value, ...}")
    return validate_model(model, data)


def validate_model(model: type[M], data: Mapping[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [field_problem(err) for err in exc.errors()]
        first = problems[0]
        raise ApiError(400, "bad_request",
                       f"{first['field'] or 'the body'}: {first['message']}"
                       + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                       fix=f"fields of this body: {', '.join(model.model_fields)}",
                       problems=problems) from None


def field_problem(err: Any) -> dict[str, Any]:
    loc = ".".join(str(part) for part in err.get("loc", ()))
    kind = err.get("type", "")
    message = "unknown field" if kind == "extra_forbidden" else err.get("msg", "invalid")
    return {"code": "invalid_field", "message": message, "step_id": None,
            "field": loc or None, "line": None, "column": None}


#: the longest query value (or header this API reads) taken, in characters
MAX_QUERY_CHARS = 8192


def query_text(request: Request, name: str, *, header: bool = False,
               empty_ok: bool = True) -> str | None:
    """A query parameter's text (``header``: a request header's), through the value gate;
    None when absent, or empty and ``empty_ok`` (a text parameter; a number, a boolean or a
    choice has no empty value: 400). Raises ApiError 400 naming it."""
    given = request.headers.getlist(name) if header else request.query_params.getlist(name)
    where = name if header else f"?{name}="
    if len(given) > 1:
        raise ApiError(400, "bad_request", f"{where} is given {len(given)} times; give it once")
    text = given[0] if given else None
    if text == "" and not empty_ok:
        raise ApiError(400, "bad_request", f"{where} is empty",
                       fix="leave it out, or give it a value")
    if text is None or text == "":
        return None
    if len(text) > MAX_QUERY_CHARS:
        raise ApiError(400, "bad_request", f"{where} is {len(text)} characters long; the limit "
                       f"is {MAX_QUERY_CHARS}")
    gated(text, where)
    return text


def parse_int(text: str, where: str) -> int:
    """``text`` as an integer written in ASCII digits (at most 18, an optional ``-``).
    Raises ApiError 400 naming ``where``."""
    digits = text.strip()
    plain = digits[1:] if digits.startswith("-") else digits
    # (at most 18 digits: MAX_QUERY_INT, what the document says)
    if not (plain.isascii() and plain.isdigit() and len(plain) <= len(str(MAX_QUERY_INT))):
        raise ApiError(400, "bad_request", f"{where} {safe_repr(text)} is not an integer",
                       fix="write it in ASCII digits, e.g. 0 or 42")
    return int(digits)


def query_int(request: Request, name: str, default: int | None, *, minimum: int = 0,
              maximum: int | None = None) -> int | None:
    """An integer query parameter. Raises ApiError 400 naming it and the range."""
    text = query_text(request, name, empty_ok=False)
    if text is None:
        return default
    value = parse_int(text, f"?{name}=")
    if value < minimum or (maximum is not None and value > maximum):
        top = f" and {maximum}" if maximum is not None else ""
        raise ApiError(400, "bad_request",
                       f"?{name}={value} is out of range: between {minimum}{top}")
    return value


def query_float(request: Request, name: str, default: float, *, maximum: float) -> float:
    """A number of seconds (0..maximum). Raises ApiError 400."""
    text = query_text(request, name, empty_ok=False)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, "bad_request", f"?{name}={safe_repr(text)} is not a number",
                       fix=f"for example ?{name}={default:g}") from None
    if not 0 <= value <= maximum:  # (NaN fails too)
        raise ApiError(400, "bad_request",
                       f"?{name}={safe_repr(text)} is out of range: 0 to {maximum:g}")
    return value


def query_bool(request: Request, name: str) -> bool | None:
    """``true``/``false`` (also 1/0, yes/no), None when absent. Raises ApiError 400."""
    text = query_text(request, name, empty_ok=False)
    if text is None:
        return None
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ApiError(400, "bad_request", f"?{name}={safe_repr(text)} must be true or false")


def query_choice(request: Request, name: str, choices: Sequence[str]) -> str | None:
    """One of ``choices``, None when absent. Raises ApiError 400 listing them."""
    text = query_text(request, name, empty_ok=False)
    if text is None:
        return None
    if text not in choices:
        raise ApiError(400, "bad_request", f"?{name}={safe_repr(text)} must be one of "
                       f"{', '.join(choices)}{did_you_mean(text, choices)}")
    return text
