"""``GET /runs/{run_id}/stream``: the run's stored event log as Server-Sent Events.

::

    event: metadata                       first, always (no id: it moves no cursor)
    retry: 3000
    data: {"run_id": ..., "chain": ..., "status": ..., "last_seq": ..., "after": ...}

    id: 7                                 one per stored event: id = its seq,
    event: step_started                   event = its kind, data = the event as JSON
    data: {"run_id": ..., "seq": 7, "kind": "step_started", "step_id": ..., ...}

    : ping - 2026-...                     a comment about every 15 s (proxies keep it open)

    event: end                            once the run ended (then the server closes)
    data: {"run_id": ..., "status": "succeeded", "last_seq": 12}

Reconnecting with ``Last-Event-ID: 7`` (what EventSource sends by itself) or ``?after=7``
replays exactly what followed event 7 in the store: nothing lost, nothing twice, whether
this server drives the run or another process does (:mod:`chainlab.http.feeds`).
``?kinds=step_started,step_succeeded`` sends only those kinds (and metadata and end).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from chainlab._text import did_you_mean
from chainlab.events import Event, EventKind
from chainlab.http.api import P_AFTER, Param, endpoint, feeds, service
from chainlab.http.errors import ApiError, api_error

__all__: list[str] = []

log = logging.getLogger(__name__)
_KINDS = {str(k) for k in EventKind}


def _data(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _after(request: Request) -> int:
    """Where to resume: ``Last-Event-ID`` (a reconnect) over ``?after=``."""
    for source, text in (("Last-Event-ID", request.headers.get("last-event-id")),
                         ("?after=", request.query_params.get("after"))):
        if text is None or not text.strip():
            continue
        if not text.strip().isdigit():
            raise ApiError(400, "bad_request", f"{source} {text!r} is not an event seq",
                           fix="send the id of the last event received (an integer)")
        return int(text)
    return 0


def _kinds(request: Request) -> set[str] | None:
    text = request.query_params.get("kinds")
    if not text:
        return None
    kinds = {k.strip() for k in text.split(",") if k.strip()}
    for kind in sorted(kinds - _KINDS):
        raise ApiError(400, "bad_request", f"?kinds=: no event kind {kind!r}"
                       f"{did_you_mean(kind, _KINDS)}",
                       fix="kinds are the event vocabulary: run_started, step_started, ...")
    return kinds


@endpoint("GET", "/runs/{run_id}/stream", "The run's events, live, as Server-Sent Events",
          tag="runs", produces="text/event-stream", errors=(400, 404),
          params=(P_AFTER,
                  Param("kinds", "Only these event kinds (comma-separated).",
                        {"type": "string"}),
                  Param("Last-Event-ID", "Resume after this seq (what EventSource sends on "
                        "a reconnect; wins over ?after=).", {"type": "string"},
                        where="header")))
async def stream(request: Request) -> Response:
    """A first ``metadata`` event, then every stored event after ``after`` (``id:`` = seq,
    ``event:`` = kind, ``data:`` = the event as JSON), live, then ``event: end`` when the
    run ends. Works for runs driven by this server and by any other process on the store."""
    run_id = request.path_params["run_id"]
    after, kinds = _after(request), _kinds(request)
    svc = service(request)
    record, _, state = await svc.read(run_id)  # a 404 before the stream begins
    meta = {"run_id": run_id, "chain": record.chain_name, "status": str(state.status),
            "last_seq": state.last_seq, "after": after,
            "kinds": sorted(kinds) if kinds else None}
    return EventSourceResponse(_events(request, run_id, after, kinds, meta),
                               ping=svc.config.keepalive_s,
                               headers={"Cache-Control": "no-store",
                                        "X-Accel-Buffering": "no"})


def encode_event(ev: Event) -> bytes:
    """One stored event as its SSE frame: ``id:`` seq, ``event:`` kind, ``data:`` JSON."""
    return ServerSentEvent(_data(ev.to_dict()), id=str(ev.seq), event=str(ev.kind)).encode()


async def _events(request: Request, run_id: str, after: int, kinds: set[str] | None,
                  meta: dict[str, object]) -> AsyncIterator[ServerSentEvent | bytes]:
    yield ServerSentEvent(_data(meta), event="metadata", retry=3000)
    svc = service(request)
    last_seq = after
    try:
        async for batch in feeds(request).events(run_id, after):
            if batch is None:  # (the run's status commits with its last event)
                record = await svc.runtime.run_io(svc.store.get_run, run_id)
                yield ServerSentEvent(_data({"run_id": run_id, "status": str(record.status),
                                             "last_seq": last_seq}), event="end")
                return
            last_seq = batch[-1][0].seq
            # frames encoded once by the feed for every stream of the run; a batch in one
            # write (a replay of 600 events is one send, not 600)
            frames = b"".join(frame for ev, frame in batch if kinds is None or ev.kind in kinds)
            if frames:
                yield frames
    except Exception as exc:  # the store failed mid-stream: say so, then close
        error = api_error(exc)
        if error is None:
            log.exception("run %s: the stream stopped", run_id)
            error = ApiError(500, "internal", f"the stream stopped: {type(exc).__name__}")
        yield ServerSentEvent(_data(error.body()), event="error")
