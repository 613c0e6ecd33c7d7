"""The endpoint table: each endpoint's method, path, handler and what the OpenAPI document
says about it (summary, body model, query parameters, response schema, error codes), in one
declaration, so the document cannot drift from the routes. ``@endpoint(...)`` registers a
handler in :data:`ENDPOINTS`; :mod:`chainlab.http.app` mounts them and
:mod:`chainlab.http.openapi` describes them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from chainlab.http.bodies import MAX_QUERY_INT

if TYPE_CHECKING:
    from chainlab.http.bodies import Body
    from chainlab.http.deciding import Decider
    from chainlab.http.feeds import Feeds
    from chainlab.http.service import Service

__all__ = ["ENDPOINTS", "Endpoint", "Param", "by_of", "decider", "endpoint",
           "feeds", "json", "one_or_more", "service"]



def one_or_more(names: list[str]) -> dict[str, Any]:
    """The schema of a comma-separated list of ``names`` (``?status=running,failed``; empty
    is the same as absent)."""
    one = "|".join(sorted(names))
    return {"type": "string", "pattern": f"^(({one})(,({one}))*)?$"}

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Param:
    """A query parameter or a request header, as documented."""

    name: str
    description: str
    schema: dict[str, Any]
    where: str = "query"
    content: str | None = None  # a media type: the value is that (JSON) text, not a string


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    body: type[Body] | None = None
    body_types: tuple[str, ...] = ("application/json",)
    params: tuple[Param, ...] = ()
    ok: int = 200
    returns: str | None = None  # a schema of chainlab.http.openapi.SCHEMAS
    produces: str = "application/json"
    errors: tuple[int, ...] = ()
    auth: bool = True

    @property
    def description(self) -> str:
        doc = (self.handler.__doc__ or "").strip()
        return "\n".join(line.strip() for line in doc.splitlines())


ENDPOINTS: list[Endpoint] = []


def endpoint(method: str, path: str, summary: str, *, tag: str, **meta: Any
             ) -> Callable[[Handler], Handler]:
    """Register the decorated handler as ``method path`` (see :class:`Endpoint`)."""

    def register(handler: Handler) -> Handler:
        ENDPOINTS.append(Endpoint(method, path, handler, summary, tag, **meta))
        return handler

    return register


def json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(data, status_code=status, headers=headers)


def service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


def decider(request: Request) -> Decider:
    return request.app.state.decider  # type: ignore[no-any-return]


def feeds(request: Request) -> Feeds:
    return request.app.state.feeds  # type: ignore[no-any-return]


def by_of(request: Request, given: str | None = None) -> str:
    """Who asks: what the body says (``by``), else ``http:`` and the client's address."""
    if given:
        return given
    client = request.client
    return f"http:{client.host}" if client is not None else "http"


#: parameters shared by several endpoints
P_AFTER = Param("after", "Only events with a seq above this one.",
                {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_INT})
P_TIMEOUT = Param("timeout", "Seconds to wait at most (default 30, at most 300).",
                  {"type": "number", "minimum": 0, "maximum": 300})
H_IDEMPOTENCY = Param("Idempotency-Key", "A retried request with the same key returns the "
                      "run the first one started (200 instead of 201), never a second one.",
                      {"type": "string", "maxLength": 255}, where="header")
#: W3C Trace Context: the run's trace continues the caller's (DESIGN §24)
H_TRACEPARENT = Param("traceparent", "W3C Trace Context: the run's trace becomes a child of "
                      "this span (one that does not parse is ignored with a warning: the run "
                      "gets a trace of its own).", {"type": "string", "maxLength": 55},
                      where="header")
