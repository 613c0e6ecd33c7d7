"""The OpenAPI 3.1 document at ``/openapi.json``, built from the endpoint table
(:data:`chainlab.http.api.ENDPOINTS`: paths, parameters, summaries, the handlers'
docstrings), the request bodies' pydantic models, and the response schemas below."""

from __future__ import annotations

import re
from typing import Any

from chainlab.http.api import ENDPOINTS, Endpoint

__all__ = ["SCHEMAS", "document"]

_OBJ = {"type": "object"}
_STR_OR_NULL = {"type": ["string", "null"]}

#: response bodies (the JSON views are :mod:`chainlab.render.json`; their fields are
#: documented there and listed here)
SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": {
        "type": "object", "required": ["error", "message"],
        "description": "Every error response.",
        "properties": {
            "error": {"type": "string", "description": "A stable code (bad_request, "
                      "unauthorized, not_found, not_waiting, conflict, body_too_large, "
                      "unsupported_media_type, invalid_chain, invalid_decision, "
                      "idempotency_key_reused, internal, store_unavailable, unavailable, "
                      "driver_timeout)."},
            "message": {"type": "string", "description": "What went wrong, naming the value."},
            "fix": {"type": "string", "description": "What to do about it."},
            "problems": {"type": "array", "items": {"$ref": "#/components/schemas/Problem"}},
            "decided": {"description": "409 not_waiting: who decided the step, when, how.",
                        "type": ["object", "null"]},
        },
    },
    "Problem": {
        "type": "object", "description": "One problem of a plan or of a body's field.",
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "step_id": _STR_OR_NULL, "field": _STR_OR_NULL,
                       "line": {"type": ["integer", "null"]},
                       "column": {"type": ["integer", "null"]}},
    },
    "Health": {"type": "object", "properties": {"status": {"const": "ok"}}},
    "Run": {
        "type": "object", "description": "THE JSON view of a run (chainlab.render.json).",
        "properties": {
            "run_id": {"type": "string"}, "chain": {"type": "string"},
            "status": {"type": "string", "enum": [
                "queued", "running", "paused", "suspended", "succeeded", "failed",
                "cancelled", "compensating", "rolled_back", "rollback_failed"]},
            "epoch": {"type": "integer"}, "created_at": {"type": "number"},
            "updated_at": {"type": "number"}, "lineage": {"type": ["object", "null"]},
            "queue": {**_STR_OR_NULL, "description": "The queue a worker fleet drains it "
                                                     "from (None: not enqueued)."},
            "worker": {"type": ["object", "null"], "description": "The fleet worker that "
                       "drives it now: name, host, pid (None: no worker does)."},
            "last_seq": {"type": "integer", "description": "Stream from here."},
            "steps": {"type": "object", "additionalProperties": _OBJ,
                      "description": "step id -> status, attempts, output, reason, "
                                     "error_kind, error, reused"},
            "outputs": _OBJ,
            "waiting": {"type": "array", "items": _OBJ},
            "at": {"type": "integer", "description": "GET .../state?at= only."},
        },
    },
    "RunSummary": {
        "type": "object", "description": "A run as listed (chainlab.render.json.record_dict).",
        "properties": {"run_id": {"type": "string"}, "chain": {"type": "string"},
                       "status": {"type": "string"}, "epoch": {"type": "integer"},
                       "created_at": {"type": "number"}, "updated_at": {"type": "number"},
                       "steps": {"type": "integer"}, "meta": _OBJ,
                       "lineage": {"type": ["object", "null"]},
                       "queue": _STR_OR_NULL, "worker": {"type": ["object", "null"]}},
    },
    "RunList": {"type": "object", "properties": {
        "runs": {"type": "array", "items": {"$ref": "#/components/schemas/RunSummary"}},
        "next_cursor": _STR_OR_NULL}},
    "Event": {
        "type": "object", "description": "One stored event (also each SSE event's data).",
        "properties": {"run_id": {"type": "string"}, "seq": {"type": "integer"},
                       "ts": {"type": "number"}, "epoch": {"type": "integer"},
                       "kind": {"type": "string"}, "step_id": _STR_OR_NULL,
                       "attempt": {"type": ["integer", "null"]}, "payload": _OBJ},
    },
    "EventPage": {"type": "object", "properties": {
        "run_id": {"type": "string"},
        "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
        "last_seq": {"type": "integer"}, "next_after": {"type": ["integer", "null"]}}},
    "Waiting": {
        "type": "object", "description": "One step that waits for a person.",
        "properties": {"run_id": {"type": "string"}, "step_id": {"type": "string"},
                       "tool": _STR_OR_NULL, "kind": {"enum": ["confirm", "in_doubt"]},
                       "preview": {}, "since": {"type": "number"}, "chain": {"type": "string"},
                       "args": {"type": ["object", "null"]}, "error": _STR_OR_NULL,
                       "attempt": {"type": "integer"}, "seq": {"type": "integer"},
                       "actions": {"type": "object", "additionalProperties": {
                           "type": "string"}}},
    },
    "Stalled": {
        "type": "object", "description": "A run that stands still with no step to decide "
        "(chainlab.runtime.coordination.stalls): no_driver (resume it) or key_held (queued "
        "behind the run holding its concurrency key).",
        "properties": {"run_id": {"type": "string"}, "chain": {"type": "string"},
                       "kind": {"enum": ["no_driver", "key_held"]}, "text": {"type": "string"},
                       "action": {"enum": ["resume", "approve", "resolve", None]},
                       "action_run": {"type": "string"}, "action_step": _STR_OR_NULL,
                       "key": _STR_OR_NULL, "holder": _STR_OR_NULL}},
    "WaitingList": {"type": "object", "properties": {
        "waiting": {"type": "array", "items": {"$ref": "#/components/schemas/Waiting"}},
        "stalled": {"type": "array", "items": {"$ref": "#/components/schemas/Stalled"}}}},
    "Decision": {"type": "object", "properties": {
        "outcome": {"enum": ["applied", "recorded"], "description": "recorded: a queue's "
                    "run; a worker of the fleet applies it when it takes the run"},
        "run_id": {"type": "string"},
        "step_id": {"type": "string"}, "action": {"type": "string"},
        "by": {"type": "string"}}},
    "ApprovedAll": {"type": "object", "properties": {
        "approved": {"type": "array", "items": {"type": "string"}, "description": (
            "The steps this request approved, in order, each with its own args")},
        "run_id": {"type": "string"}, "step_id": {"type": "string"},
        "by": {"type": "string"}}},
    "ChainList": {"type": "object", "properties": {
        "toolbox": {"type": "string"},
        "chains": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "description": {"type": "string"},
            "step_count": {"type": "integer"},
            "uses": {"type": "array", "items": {"type": "string"}}}}}}},
    "ChainDetail": {"type": "object", "properties": {
        "name": {"type": "string"}, "description": {"type": "string"},
        "steps": {"type": "array", "items": _OBJ},
        "tools": {"type": "array", "items": _OBJ},
        "context_schema": {"type": "object", "description": "JSON Schema of the context."},
        "definition": _OBJ}},
    "EventStream": {
        "type": "object", "required": ["data"],
        "description": (
            "One Server-Sent Event of the stream (each frame: `event:`, `id:`, `retry:`, "
            "`data:` lines). In order: one `metadata` event (no id; data: {run_id, chain, "
            "status, last_seq, after, kinds}); then one event per stored event after "
            "`after`: id = its seq, event = its kind, data = the Event as JSON (the Event "
            "schema); `: ping` comments keep the connection open; `end` (data: {run_id, "
            "status, last_seq}) once the run has ended and nothing follows; between them, "
            "`delta` events (no id, never stored, never replayed on a reconnect; none with "
            "?kinds=): each piece of a streamed model answer as it arrives, in a run this "
            "server drives (data: {kind: model_delta, run_id, step_id, turn, text} or, for "
            "a tool call's arguments, call_index, function, arguments); or `error` "
            "(data: the Error schema) when the store failed mid-stream. A client that does "
            "not read holds one piece of about 64 KiB of the server's memory; after the "
            "server's --stream-send-timeout without taking anything its stream is closed "
            "(reconnect with Last-Event-ID: nothing is lost)."),
        "properties": {
            "event": {"type": "string", "description": "metadata, an event kind, end or "
                                                       "error."},
            "id": {"type": "string", "pattern": "^[0-9]+$",
                   "description": "The event's seq (what Last-Event-ID sends back)."},
            "retry": {"type": "integer", "minimum": 0},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
    },
    "Validation": {"type": "object", "properties": {
        "valid": {"type": "boolean"}, "chain": _STR_OR_NULL,
        "step_count": {"type": ["integer", "null"]},
        "problems": {"type": "array", "items": {"$ref": "#/components/schemas/Problem"}}}},
}

_REASONS = {400: "Bad request", 401: "No or wrong token", 404: "Not found",
            409: "Conflict with the run's state", 413: "Body too large",
            415: "Not JSON (or YAML)", 422: "Does not validate", 503: "Unavailable",
            504: "The run's driver did not answer"}


def document(version: str, title: str = "chainlab", *,
             chains: list[str] | None = None) -> dict[str, Any]:
    """The OpenAPI document of every endpoint in the table. ``chains``: the names of the
    chains served (a start's ``chain`` is one of them, or an inline definition)."""
    schemas: dict[str, Any] = {k: dict(v) for k, v in SCHEMAS.items()}
    paths: dict[str, dict[str, Any]] = {}
    for ep in ENDPOINTS:
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(ep, schemas)
    if chains is not None and "StartRun" in schemas:
        chain = schemas["StartRun"]["properties"]["chain"]
        chain["anyOf"] = [{"type": "string", "enum": sorted(chains)}
                          if branch.get("type") == "string" else branch
                          for branch in chain.get("anyOf", [])]
    return {
        "openapi": "3.1.0",
        "info": {"title": f"{title} HTTP API", "version": version,
                 "description": "Start, stream, read and decide chainlab runs. Every endpoint "
                                "but /healthz needs `Authorization: Bearer TOKEN`."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }


def _operation(ep: Endpoint, schemas: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": ep.summary, "description": ep.description,
                          "tags": [ep.tag], "operationId": ep.handler.__name__}
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in re.findall(r"{(\w+)}", ep.path)]
    params += [{"name": p.name, "in": p.where, "required": False, "description": p.description,
                **({"content": {p.content: {"schema": p.schema}}} if p.content
                   else {"schema": p.schema})} for p in ep.params]
    if params:
        op["parameters"] = params
    if ep.body is not None:
        name = ep.body.__name__
        schema = ep.body.model_json_schema(ref_template="#/components/schemas/{model}")
        for sub, value in schema.pop("$defs", {}).items():
            schemas.setdefault(sub, value)
        schemas[name] = schema
        # optional only when every field is (an empty body is then {}): a reject needs its
        # reason, a start its chain
        op["requestBody"] = {
            "required": bool(schema.get("required") or schema.get("oneOf")),
            "content": {t: {"schema": {"$ref": f"#/components/schemas/{name}"}}
                        for t in ep.body_types}}
    elif ep.body_types != ("application/json",):  # a chain's text (YAML) or its JSON
        op["requestBody"] = {"required": True, "content": {
            t: {"schema": {"type": "object"} if t.endswith("json") else {"type": "string"}}
            for t in ep.body_types}}
    ok: dict[str, Any] = {"description": "OK" if ep.ok == 200 else "Created"}
    if ep.returns is not None:
        ok["content"] = {ep.produces: {"schema": {"$ref": f"#/components/schemas/{ep.returns}"}}}
    elif ep.produces == "text/event-stream":
        ok["content"] = {ep.produces: {"schema": {"$ref": "#/components/schemas/EventStream"}}}
    else:
        ok["content"] = {ep.produces: {"schema": {"type": "string"}}}
    links = _links(ep)
    if links:
        ok["links"] = links
    responses: dict[str, Any] = {str(ep.ok): ok}
    if ep.ok == 201:
        responses["200"] = {"description": "The same request again (Idempotency-Key or "
                                           "run_id): the run it started"}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    codes = sorted(set(((401,) if ep.auth else ()) + ep.errors + _implied(ep)))
    for code in codes:
        responses[str(code)] = {"description": _REASONS.get(code, "Error"), "content": error}
    op["responses"] = responses
    if not ep.auth:
        op["security"] = []
    return op


def _implied(ep: Endpoint) -> tuple[int, ...]:
    """The error codes every endpoint of its kind can answer: one that reads a body (400
    malformed or refused by the value gate, 413, 415), one with query parameters or headers
    (400)."""
    codes: tuple[int, ...] = ()
    if ep.body is not None or ep.body_types != ("application/json",):
        codes += (400, 413, 415)
    if ep.params:
        codes += (400,)
    return codes


def _links(ep: Endpoint) -> dict[str, Any]:
    """OpenAPI links: the run a start or a fork made goes on to every operation on a run;
    what waits in a run goes on to the decisions (a client, or a stateful test, follows
    them)."""
    if ep.returns == "Run" and ep.ok == 201:
        where = "$response.body#/run_id"
        return {f"{other.handler.__name__}": {"operationId": other.handler.__name__,
                                              "parameters": {"run_id": where}}
                for other in ENDPOINTS
                if re.findall(r"{(\w+)}", other.path) == ["run_id"]}
    if ep.returns == "WaitingList" and "{run_id}" in ep.path:
        return {f"{other.handler.__name__}": {
                    "operationId": other.handler.__name__,
                    "parameters": {"run_id": "$response.body#/waiting/0/run_id",
                                   "step_id": "$response.body#/waiting/0/step_id"}}
                for other in ENDPOINTS if "{step_id}" in other.path}
    return {}
