"""``GET /runs/{run_id}/stream``: the run's stored event log as Server-Sent Events.

::

    event: metadata                       first, always (no id: it moves no cursor)
    retry: 3000
    data: {"run_id": ..., "chain": ..., "status": ..., "last_seq": ..., "after": ...}

    id: 7                                 one per stored event: id = its seq,
    event: step_started                   event = its kind, data = the event as JSON
    data: {"run_id": ..., "seq": 7, "kind": "step_started", "step_id": ..., ...}

    event: delta                          a piece of a streamed model answer as it arrives
    data: {"kind": "model_delta", "run_id": ..., "step_id": ..., "turn": 2, "text": ...}
                                          (or "call_index", "function", "arguments": a
                                          piece of a tool call's arguments); no id: never
                                          stored, never replayed on a reconnect

    : ping - 2026-...                     a comment about every 15 s (proxies keep it open)

    event: end                            once the run ended (then the server closes)
    data: {"run_id": ..., "status": "succeeded", "last_seq": 12}

Reconnecting with ``Last-Event-ID: 7`` (what EventSource sends by itself) or ``?after=7``
replays exactly what followed event 7 in the store: nothing lost, nothing twice, whether
this server drives the run or another process does (:mod:`chainlab.http.feeds`).
``?kinds=step_started,step_succeeded`` sends only those kinds (and metadata and end; no
delta). Deltas come only from an agent with ``stream=True`` in a run this server drives,
while the stream is open (DESIGN §24); the turn's text is in its stored event either way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from sse_starlette.sse import EventSourceResponse, SendTimeoutError, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from chainlab._text import did_you_mean, safe_repr
from chainlab.events import Event, EventKind
from chainlab.http.api import P_AFTER, Param, endpoint, feeds, one_or_more, service
from chainlab.http.bodies import parse_int, query_text
from chainlab.http.errors import ApiError, api_error

if TYPE_CHECKING:
    from chainlab.agent.model import ModelDelta

__all__: list[str] = []

log = logging.getLogger(__name__)
_KINDS = {str(k) for k in EventKind}


def _data(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _after(request: Request) -> int:
    """Where to resume: ``Last-Event-ID`` (a reconnect) over ``?after=`` (both checked)."""
    found = [parse_int(text, source)
             for source, text in (("Last-Event-ID", query_text(request, "last-event-id",
                                                                header=True)),
                                  ("?after=", query_text(request, "after")))
             if text is not None and text.strip()]
    for seq in found:
        if seq < 0:
            raise ApiError(400, "bad_request", f"{seq} is not an event seq",
                           fix="send the id of the last event received (an integer >= 0)")
    return found[0] if found else 0


def _kinds(request: Request) -> set[str] | None:
    text = query_text(request, "kinds")
    if not text:
        return None
    kinds = {k.strip() for k in text.split(",") if k.strip()}
    for kind in sorted(kinds - _KINDS):
        raise ApiError(400, "bad_request", f"?kinds=: no event kind {safe_repr(kind)}"
                       f"{did_you_mean(kind, _KINDS)}",
                       fix="kinds are the event vocabulary: run_started, step_started, ...")
    return kinds


@endpoint("GET", "/runs/{run_id}/stream", "The run's events, live, as Server-Sent Events",
          tag="runs", produces="text/event-stream", errors=(400, 404),
          params=(P_AFTER,
                  Param("kinds", "Only these event kinds (comma-separated).",
                        one_or_more(sorted(_KINDS))),
                  Param("Last-Event-ID", "Resume after this seq (what EventSource sends on "
                        "a reconnect; wins over ?after=).",
                        {"type": "string", "pattern": "^[0-9]{0,18}$"}, where="header")))
async def stream(request: Request) -> Response:
    """A first ``metadata`` event, then every stored event after ``after`` (``id:`` = seq,
    ``event:`` = kind, ``data:`` = the event as JSON), live, with ``event: delta`` for each
    piece of a streamed model answer as it arrives (never replayed), then ``event: end``
    when the run ends. Works for runs driven by this server and by any other process on
    the store."""
    run_id = request.path_params["run_id"]
    after, kinds = _after(request), _kinds(request)
    svc = service(request)
    # a 404 before the stream begins; only the run's record: its log is read once, by the
    # run's feed, for every stream of it (a stream costs no fold of the whole log)
    record = await svc.record(run_id)
    meta = {"run_id": run_id, "chain": record.chain_name, "status": str(record.status),
            "last_seq": 0, "after": after, "kinds": sorted(kinds) if kinds else None}
    return _Stream(_events(request, run_id, after, kinds, meta),
                   ping=svc.config.keepalive_s, send_timeout=svc.config.stream_send_timeout_s,
                   headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


class _Stream(EventSourceResponse):
    """An SSE response that ends when its client stopped reading (``send_timeout`` passed
    with a write pending): a warning, no traceback, and the connection is closed (uvicorn
    says the response did not complete: it cannot, the client takes nothing). The client
    reconnects with Last-Event-ID and loses nothing."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except* SendTimeoutError:
            log.warning("%s: the client took nothing for %g s; its stream is closed",
                        scope.get("path"), self.send_timeout)


#: about how many bytes one write of a stream carries (a frame larger than this is one write)
STREAM_PIECE = 64 * 1024


def pieces(frames: list[bytes], size: int = STREAM_PIECE) -> Iterator[bytes]:
    """``frames`` joined into writes of about ``size`` bytes (whole frames each)."""
    piece: list[bytes] = []
    length = 0
    for frame in frames:
        if piece and length + len(frame) > size:
            yield b"".join(piece)
            piece, length = [], 0
        piece.append(frame)
        length += len(frame)
    if piece:
        yield b"".join(piece)


def encode_delta(piece: ModelDelta) -> bytes:
    """A piece of a streamed model answer as its SSE frame: ``event: delta``, no ``id:``."""
    return ServerSentEvent(_data(piece.to_dict()), event="delta").encode()


def encode_event(ev: Event) -> bytes:
    """One stored event as its SSE frame: ``id:`` seq, ``event:`` kind, ``data:`` JSON."""
    return ServerSentEvent(_data(ev.to_dict()), id=str(ev.seq), event=str(ev.kind)).encode()


async def _events(request: Request, run_id: str, after: int, kinds: set[str] | None,
                  meta: dict[str, object]) -> AsyncIterator[ServerSentEvent | bytes]:
    svc = service(request)
    last_seq = after
    opening = True  # the metadata goes first, once the feed read the log (its last_seq)
    try:
        async for batch in feeds(request).events(
                run_id, after, opened=lambda seq: meta.__setitem__("last_seq", seq),
                deltas=kinds is None):
            if opening:
                opening = False
                yield ServerSentEvent(_data(meta), event="metadata", retry=3000)
            if isinstance(batch, bytes):  # pieces of a model's answer, as they arrive
                yield batch
                continue
            if batch is None:  # (the run's status commits with its last event)
                record = await svc.runtime.run_io(svc.store.get_run, run_id)
                yield ServerSentEvent(_data({"run_id": run_id, "status": str(record.status),
                                             "last_seq": last_seq}), event="end")
                return
            last_seq = batch[-1][0].seq
            # frames encoded once by the feed for every stream of the run, sent in pieces
            # of about STREAM_PIECE bytes (a replay of 600 small events is one send, not
            # 600): the server writes a piece only once the client took the one before, so
            # a client that stops reading holds one piece here, never the whole log
            for piece in pieces([frame for ev, frame in batch
                                 if kinds is None or ev.kind in kinds]):
                yield piece
    except Exception as exc:  # the store failed mid-stream: say so, then close
        error = api_error(exc)
        if error is None:
            log.exception("run %s: the stream stopped", run_id)
            error = ApiError(500, "internal", f"the stream stopped: {type(exc).__name__}")
        if opening:
            yield ServerSentEvent(_data(meta), event="metadata", retry=3000)
        yield ServerSentEvent(_data(error.body()), event="error")
