"""``/runs``: start (idempotent), list, read, events, time travel, wait, and the controls
that continue the SAME run (resume, cancel, rollback) or fork a new one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chainlab._text import safe_repr
from chainlab.events import RunStatus
from chainlab.http.api import (
    H_IDEMPOTENCY,
    H_TRACEPARENT,
    P_AFTER,
    P_TIMEOUT,
    Param,
    by_of,
    endpoint,
    json,
    one_or_more,
    service,
)
from chainlab.http.bodies import (
    MAX_QUERY_INT,
    Empty,
    Fork,
    Resume,
    StartRun,
    query_bool,
    query_float,
    query_int,
    query_text,
    read_model,
)
from chainlab.http.errors import ApiError

__all__: list[str] = []

_STATUSES = {str(s) for s in RunStatus}


async def _start(request: Request, *, wait: bool) -> Response:
    svc = service(request)
    timeout = query_float(request, "timeout", 30.0, maximum=svc.config.max_wait_s) \
        if wait else 0.0
    body = await read_model(request, StartRun, svc.config.max_body_bytes)
    key = query_text(request, "idempotency-key", header=True)
    view, created = await svc.start(body, key=key, by=by_of(request),
                                    traceparent=request.headers.get("traceparent"))
    if wait:
        view = await svc.wait(view["run_id"], timeout)
    headers = {"Location": f"/runs/{view['run_id']}"}
    if not created:
        headers["Idempotent-Replayed"] = "true"
    return json(view, 201 if created else 200, headers)


@endpoint("POST", "/runs", "Start a run", tag="runs", body=StartRun, ok=201, returns="Run",
          params=(H_IDEMPOTENCY, H_TRACEPARENT), errors=(400, 404, 409, 413, 415, 422))
async def start_run(request: Request) -> Response:
    """Start a run of a served chain (by name) or of an inline chain, driven by this
    server; 201 with ``Location: /runs/{run_id}`` and the run's view at once (it goes on in
    the background: stream it, or wait for it). With an ``Idempotency-Key`` header (or a
    ``run_id`` in the body) a retried request returns the same run with 200 and
    ``Idempotent-Replayed: true``."""
    return await _start(request, wait=False)


@endpoint("POST", "/runs/wait", "Start a run and wait until it ends or waits for a person",
          tag="runs", body=StartRun, ok=201, returns="Run",
          params=(H_IDEMPOTENCY, H_TRACEPARENT, P_TIMEOUT),
          errors=(400, 404, 409, 413, 415, 422))
async def start_and_wait(request: Request) -> Response:
    """As ``POST /runs``, then block until the run ended or is suspended (or ``timeout``
    seconds passed: its status then says it still runs)."""
    return await _start(request, wait=True)


@endpoint("GET", "/runs", "List runs", tag="runs", returns="RunList", errors=(400,),
          params=(Param("status", "Only runs in these statuses (comma-separated).",
                        one_or_more(sorted(_STATUSES))),
                  Param("chain", "Only runs of this chain.", {"type": "string"}),
                  Param("waiting", "true: only runs where something waits for a person; "
                        "false: only the others.", {"type": "boolean"}),
                  Param("limit", "At most this many (default 50, at most 500).",
                        {"type": "integer", "minimum": 1, "maximum": 500}),
                  Param("cursor", "The next_cursor of the previous page (opaque).",
                        {"type": "string", "pattern": "^[A-Za-z0-9_-]*$"})))
async def list_runs(request: Request) -> Response:
    """Runs in the store (every process's), newest first, one page at a time:
    ``{runs, next_cursor}`` (None on the last page)."""
    status = query_text(request, "status")
    wanted = {s.strip() for s in status.split(",") if s.strip()} if status else None
    unknown = sorted((wanted or set()) - _STATUSES)
    if unknown:
        raise ApiError(400, "bad_request", f"?status={safe_repr(status)}: unknown status "
                       f"{safe_repr(', '.join(unknown))}",
                       fix=f"one of {', '.join(sorted(_STATUSES))}")
    page = await service(request).list_runs(
        status=wanted, chain=query_text(request, "chain"),
        waiting=query_bool(request, "waiting"),
        limit=query_int(request, "limit", 50, minimum=1, maximum=500) or 50,
        cursor=query_text(request, "cursor"))
    return json(page)


@endpoint("GET", "/runs/{run_id}", "One run: status, steps, outputs, what waits, lineage",
          tag="runs", returns="Run", errors=(404,))
async def get_run(request: Request) -> Response:
    """THE JSON view of a run (as ``chainlab show --json``): status, every step (status,
    attempts, output, error, what a fork reused), outputs, what waits for a person (kind,
    args, preview, since when), its lineage and ``last_seq``, the seq to stream from."""
    return json(await service(request).view(request.path_params["run_id"]))


@endpoint("GET", "/runs/{run_id}/events", "The run's event log, paged", tag="runs",
          returns="EventPage", errors=(400, 404),
          params=(P_AFTER, Param("limit", "At most this many (default 500, at most 5000).",
                                 {"type": "integer", "minimum": 1, "maximum": 5000})))
async def run_events(request: Request) -> Response:
    """The stored events with ``seq > after``, in order: ``{events, last_seq,
    next_after}`` (next_after: the ``after`` of the next page, None on the last)."""
    return json(await service(request).events(
        request.path_params["run_id"], query_int(request, "after", 0) or 0,
        query_int(request, "limit", 500, minimum=1, maximum=5000) or 500))


@endpoint("GET", "/runs/{run_id}/state", "The run as it was after one of its events",
          tag="runs", returns="Run", errors=(400, 404),
          params=(Param("at", "The event's seq (0: before any event; past the last: the run now).",
                        {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_INT}),))
async def run_state(request: Request) -> Response:
    """Time travel: the fold of the stored log up to event ``at`` (no tool runs), in the
    shape of ``GET /runs/{run_id}`` plus ``at``. Without ``at``: the run now."""
    run_id = request.path_params["run_id"]
    at = query_int(request, "at", None)
    svc = service(request)
    return json(await svc.view(run_id) if at is None else await svc.state_at(run_id, at))


@endpoint("GET", "/runs/{run_id}/wait", "Long poll until the run ends or waits for a person",
          tag="runs", returns="Run", params=(P_TIMEOUT,), errors=(400, 404))
async def wait_run(request: Request) -> Response:
    """Blocks until the run ended or is suspended, at most ``timeout`` seconds; answers
    the run's view either way (its ``status`` says which)."""
    svc = service(request)
    timeout = query_float(request, "timeout", 30.0, maximum=svc.config.max_wait_s)
    return json(await svc.wait(request.path_params["run_id"], timeout))


@endpoint("POST", "/runs/{run_id}/resume", "Continue the run in this server", tag="control",
          body=Resume, returns="Run", errors=(404, 409, 422))
async def resume_run(request: Request) -> Response:
    """Continue the SAME run from its stored state (after a crash or a restart, or a
    suspended run nobody drives): completed steps are kept, an interrupted call is re-run
    when that is safe, reconciled, or left in doubt for a person. 409 for a run that ended,
    or that another live process drives (unless ``force``)."""
    svc = service(request)
    body = await read_model(request, Resume, svc.config.max_body_bytes)
    return json(await svc.resume(request.path_params["run_id"], force=body.force))


@endpoint("POST", "/runs/{run_id}/cancel", "Cancel the run", tag="control", body=Empty,
          returns="Run", errors=(404, 409))
async def cancel_run(request: Request) -> Response:
    """Stop the run: running calls are cancelled, nothing new starts, then completed steps
    are compensated (unless the run's options say not to)."""
    svc = service(request)
    await read_model(request, Empty, svc.config.max_body_bytes)
    return json(await svc.cancel(request.path_params["run_id"]))


@endpoint("POST", "/runs/{run_id}/rollback", "Roll the run back", tag="control", body=Resume,
          returns="Run", errors=(404, 409))
async def rollback_run(request: Request) -> Response:
    """Compensate the run's completed steps in reverse completion order (stopping it first
    if it still goes on); again on a rollback that failed retries what failed."""
    svc = service(request)
    body = await read_model(request, Resume, svc.config.max_body_bytes)
    return json(await svc.rollback(request.path_params["run_id"], force=body.force))


@endpoint("POST", "/runs/{run_id}/fork", "Fork a new run from this one", tag="control",
          body=Fork, ok=201, returns="Run", errors=(400, 404, 409, 422))
async def fork_run(request: Request) -> Response:
    """A NEW run from a suspended or ended one: steps that would do exactly what they did
    are reused (not called again), edited ones and their descendants run, a side-effecting
    step that must run again waits for approval. No edits: retry from the failure. With
    ``plan_only``: the decision for each step (reuse, override, rerun, confirm) and why,
    nothing written (200)."""
    svc = service(request)
    body = await read_model(request, Fork, svc.config.max_body_bytes)
    data, created = await svc.fork(request.path_params["run_id"], body, by=by_of(request))
    if not created:
        return json(data)
    return json(data, 201, {"Location": f"/runs/{data['run_id']}"})
