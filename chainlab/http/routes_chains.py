"""``/healthz``, ``/chains`` (list, one, its graph, validate) and ``/approvals``."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response

from chainlab.http.api import Param, endpoint, json, service
from chainlab.http.bodies import (
    YAML_TYPES,
    media_type,
    parse_json_body,
    query_text,
    read_body,
)
from chainlab.http.chains import chain_summary, validation
from chainlab.http.errors import ApiError

__all__: list[str] = []


@endpoint("GET", "/healthz", "Is the server up", tag="service", auth=False,
          returns="Health")
async def healthz(request: Request) -> Response:
    """The only endpoint without the token: ``{"status": "ok"}``."""
    return json({"status": "ok"})


@endpoint("GET", "/chains", "The chains served here", tag="chains", returns="ChainList")
async def list_chains(request: Request) -> Response:
    """Every chain a run can be started from by name (``--chains`` files and the toolbox's
    registered chains): name, description, step count, tools used."""
    chains = service(request).chains
    return json({"chains": [chain_summary(c) for c in chains.all().values()],
                 "toolbox": chains.toolbox.name})


@endpoint("GET", "/chains/{name}", "One chain: steps, tools, the context's JSON Schema",
          tag="chains", returns="ChainDetail", errors=(404,))
async def get_chain(request: Request) -> Response:
    """The chain's steps (tool, dependencies, side effects, whether a person confirms), the
    tools it uses (their input and output schemas and side-effect contract), the JSON Schema
    of the context it reads, and its definition."""
    return json(service(request).chains.detail(request.path_params["name"]))


@endpoint("GET", "/chains/{name}/graph.svg", "The chain's DAG drawn as SVG", tag="chains",
          produces="image/svg+xml", errors=(404, 503))
async def chain_graph(request: Request) -> Response:
    """The DAG with Graphviz (the system ``dot``, else its WebAssembly build): side-effecting,
    confirmation and sub-chain steps have their own shapes; data edges are dashed."""
    chains = service(request).chains
    chain = chains.get(request.path_params["name"])
    from chainlab.render import chain_svg

    svg = await anyio.to_thread.run_sync(lambda: chain_svg(chain, chains.toolbox))
    return Response(svg, media_type="image/svg+xml")


@endpoint("POST", "/chains/validate", "Validate a chain (YAML or JSON)", tag="chains",
          body_types=("application/yaml", "application/json"), returns="Validation",
          params=(Param("context", "A JSON object: check the references to the context too.",
                        {"type": "object"}, content="application/json"),),
          errors=(400, 413, 415))
async def validate_chain(request: Request) -> Response:
    """The body is a chain's YAML or JSON text (``Content-Type: application/yaml`` or
    ``application/json``). The answer lists EVERY problem as the plan layer reports it (a
    syntax error with its line, unknown tools and steps, cycles with their path, args that do
    not fit a tool): ``{valid, chain, step_count, problems}``, 200 either way."""
    svc = service(request)
    raw = await read_body(request, svc.config.max_body_bytes)
    kind = media_type(request)
    if kind and kind not in YAML_TYPES and kind != "application/json" \
            and not kind.endswith("+json"):
        raise ApiError(415, "unsupported_media_type",
                       f"send the chain as YAML or JSON, not {kind!r}",
                       fix="curl --data-binary @chain.yaml -H 'Content-Type: application/yaml'")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", "the chain is not UTF-8 text") from None
    if not text.strip():
        raise ApiError(400, "bad_request", "the body is empty: send the chain's YAML or JSON",
                       fix="curl --data-binary @chain.yaml -H 'Content-Type: application/yaml'")
    context = None
    given = query_text(request, "context")
    if given is not None:
        context = parse_json_body(given.encode(), what="?context=")
        if not isinstance(context, dict):
            raise ApiError(400, "bad_request", "?context= must be a JSON object")
    fmt = "json" if kind.endswith("json") else "yaml"
    result = await anyio.to_thread.run_sync(
        lambda: validation(text, fmt, svc.chains.toolbox, context))
    return json(result)


@endpoint("GET", "/approvals", "Everything that waits for a person, across runs",
          tag="decisions", returns="WaitingList")
async def approvals(request: Request) -> Response:
    """The team inbox (as ``chainlab approvals``): every confirmation and in-doubt step of
    every unfinished run in the store, oldest first, with the URLs that decide each one;
    ``stalled``: the runs that stand still with no step to decide (nobody drives one: its
    ``action`` is ``resume``; a queued one behind the run holding its concurrency key)."""
    svc = service(request)
    return json({"waiting": await svc.approvals(), "stalled": await svc.stalled()})


@endpoint("GET", "/openapi.json", "This API's OpenAPI document", tag="service")
async def openapi(request: Request) -> Response:
    """OpenAPI 3.1, built from the endpoint table and the request bodies' models."""
    from chainlab import __version__
    from chainlab.http.openapi import document

    return json(document(__version__, chains=list(service(request).chains.all())))
