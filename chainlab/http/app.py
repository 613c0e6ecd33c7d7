"""``create_app``: the ASGI application (Starlette) of ``chainlab serve``.

Its lifespan owns ONE :class:`~chainlab.runtime.Runtime` over one store (opened through
:class:`~chainlab.workspace.Workspace` unless handed in): runs it starts are driven in the
server's process; runs other processes drive are followed through the store and decided
through :meth:`Runtime.decide`. Security is on by default: every endpoint but ``/healthz``
needs ``Authorization: Bearer TOKEN`` (or ``X-API-Key: TOKEN``), no browser origin may call
it unless listed (CORS), and request bodies have a size limit.

Every handler's error goes through :func:`chainlab.http.errors.api_error` once, here: a
client's mistake is a 4xx JSON body and one access-log line, never a traceback; only a bug
(500) is logged with its traceback.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

# the endpoint modules register themselves in the table when imported
from chainlab.http import (  # noqa: F401  (registering their endpoints)
    routes_chains,
    routes_jobs,
    routes_runs,
    routes_steps,
    stream,
)
from chainlab.http.api import ENDPOINTS, Endpoint, Handler
from chainlab.http.chains import ServedChains
from chainlab.http.deciding import Decider
from chainlab.http.errors import ApiError, api_error
from chainlab.http.feeds import Feeds
from chainlab.http.service import Config, Service
from chainlab.http.stream import encode_delta, encode_event
from chainlab.plan.schema import Chain
from chainlab.runtime.runtime import Runtime
from chainlab.store.base import Store
from chainlab.tools import Toolbox
from chainlab.workspace import Workspace

__all__ = ["create_app"]

log = logging.getLogger("chainlab.http")


def create_app(
    toolbox: Toolbox,
    *,
    token: str,
    chains: Mapping[str, Chain] | None = None,
    db: str | os.PathLike[str] | Store | None = None,
    config: Config | None = None,
    runtime_options: Mapping[str, Any] | None = None,
) -> Starlette:
    """The HTTP API over ``toolbox``'s tools and the store at ``db`` (a path, a
    ``sqlite:///`` or ``postgresql://`` URL, ``:memory:``, or an open Store; None:
    ``CHAINLAB_DB``, else ``.chainlab/chainlab.db``). ``token``: what every request but
    ``GET /healthz`` must present (``chainlab.http.new_token()`` makes one); ``chains``:
    the chains served by name (checked against the toolbox now); ``config``: limits and
    options (:class:`chainlab.http.Config`); ``runtime_options``: keyword arguments of the
    Runtime (``heartbeat_s``, ``executor``, ...).

    Serve it with uvicorn (``chainlab serve`` does). Raises ValueError (no token),
    PlanError (a served chain that does not validate against the toolbox)."""
    if not token or not token.strip():
        raise ValueError("create_app needs a token: every request but /healthz presents it "
                         "(make one with chainlab.http.new_token())")
    config = config or Config()
    served = ServedChains(toolbox, chains)
    served.check()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        workspace = Workspace()
        store = db if isinstance(db, Store) else workspace.store(db)
        try:
            async with Runtime(toolbox, store, chains=served.own,
                               **dict(runtime_options or {})) as runtime:
                svc = Service(runtime, served, config)
                app.state.service = svc
                app.state.decider = Decider(svc)
                app.state.feeds = Feeds(runtime, poll_s=config.poll_s, encode=encode_event,
                                        encode_delta=encode_delta)
                yield
        finally:
            workspace.close()  # (a store handed in is its owner's to close)

    middleware = [Middleware(_Guard, token=token)]
    if config.cors_origins:
        middleware.insert(0, Middleware(
            CORSMiddleware, allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key",
                           "Last-Event-ID", "X-API-Key"],
            expose_headers=["Location", "Idempotent-Replayed"]))
    return Starlette(routes=[_route(ep) for ep in ENDPOINTS], middleware=middleware,
                     lifespan=lifespan,
                     exception_handlers={HTTPException: _http_exception})  # type: ignore[dict-item]


def _route(ep: Endpoint) -> Route:
    return Route(_routed(ep.path), _answering(ep.handler), methods=[ep.method],
                 name=ep.handler.__name__)


def _routed(path: str) -> str:
    """The path as routed: a step id may hold ``/`` (a sub-chain's ``sub/pay``, an agent's
    call ``help/1.2``), so ``{step_id}`` takes the rest of the path up to the action."""
    return path.replace("{step_id}", "{step_id:path}")


def _answering(handler: Handler) -> Handler:
    """``handler`` with every error answered in the API's one shape."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            error = api_error(_unwrap(exc))
            if error is None:
                log.exception("%s %s failed (a chainlab bug: please report it)",
                              request.method, request.url.path)
                error = ApiError(500, "internal",
                                 f"the server failed on this request ({type(exc).__name__}); "
                                 "its log has the details")
            elif error.status >= 500:
                log.warning("%s %s: %s", request.method, request.url.path, error.message)
            return error_response(error)

    answer.__name__ = handler.__name__
    answer.__doc__ = handler.__doc__
    return answer


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def error_response(error: ApiError, headers: Mapping[str, str] | None = None) -> Response:
    extra = dict(headers or {})
    if error.status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error.body(), status_code=error.status, headers=extra or None)


async def _http_exception(request: Request, exc: HTTPException) -> Response:
    """Starlette's own errors (no such route, another method) in the API's shape."""
    if exc.status_code == 404:
        return error_response(ApiError(404, "not_found",
                                       f"no endpoint {request.url.path!r}",
                                       fix="GET /openapi.json lists them"))
    if exc.status_code == 405:  # (Allow: the methods the path has, as RFC 9110 asks)
        allow = _allowed_methods(request.url.path)
        return error_response(ApiError(405, "method_not_allowed",
                                       f"{request.method} is not allowed on "
                                       f"{request.url.path!r}; it takes {allow}",
                                       fix="GET /openapi.json lists the methods of each path"),
                              {"Allow": allow})
    return error_response(ApiError(exc.status_code, f"http_{exc.status_code}",
                                   str(exc.detail)))


def _allowed_methods(path: str) -> str:
    """The methods the endpoint table has for ``path`` (for a 405's ``Allow``), as the
    document lists them: a path written out (``/runs/wait``) has its own methods, not those
    of the template it also fits (``/runs/{run_id}``)."""
    fits = [ep for ep in ENDPOINTS
            if Route(_routed(ep.path), _no_handler).matches(
                {"type": "http", "path": path, "method": ep.method})[0] is not Match.NONE]
    exact = [ep for ep in fits if ep.path == path]
    methods = {ep.method for ep in exact or fits}
    return ", ".join(sorted(methods | ({"HEAD"} if "GET" in methods else set())))


async def _no_handler(request: Request) -> Response:  # pragma: no cover - never called
    raise NotImplementedError


class _Guard:
    """Every HTTP request but ``GET /healthz`` (and a CORS preflight, answered before it
    gets here) must carry the token: ``Authorization: Bearer TOKEN`` or ``X-API-Key``."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token.strip().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        error = ApiError(401, "unauthorized", "this endpoint needs the server's token",
                         fix="send Authorization: Bearer TOKEN (the token `chainlab serve` "
                             "printed, or the one in its --token-file)")
        await error_response(error)(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key":
                given = value.strip()
        return bool(given) and hmac.compare_digest(given, self.token)
