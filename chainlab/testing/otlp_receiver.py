"""A small, real OTLP/HTTP trace receiver for tests and demos (``chainlab[otel]``): a thread
serving ``POST /v1/traces`` on a loopback port, decoding each request's protobuf body
(``ExportTraceServiceRequest``) with ``opentelemetry-proto``, keeping the spans it got.

    with OtlpReceiver() as receiver:
        configure_otlp(receiver.url)            # or chainlab run ... --otlp receiver.url
        ...
        spans = receiver.wait_for(lambda spans: any(s.name == "run orders" for s in spans))

Each span is a :class:`ReceivedSpan` (ids as ints, attributes as Python values, the
resource's attributes beside it). ``down()`` makes it answer 503 to every request (an
endpoint that is down but listening); ``up()`` takes requests again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["OtlpReceiver", "ReceivedSpan", "decode"]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ns: int
    end_ns: int
    status: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    resource: dict[str, Any] = field(default_factory=dict)


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one OTLP/HTTP protobuf request body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(
                    s.name, int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big"),
                    int.from_bytes(s.parent_span_id, "big") if s.parent_span_id else None,
                    s.start_time_unix_nano, s.end_time_unix_nano, s.status.code,
                    _attrs(s.attributes),
                    tuple((e.name, _attrs(e.attributes)) for e in s.events), resource))
    return out


class OtlpReceiver:
    """The receiver (see the module docstring); ``url`` is its base URL."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._down = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.requests += 1
                    down = receiver._down
                if down or self.path != "/v1/traces":
                    self.send_response(503 if down else 404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def down(self) -> None:
        """Answer 503 to every request from now on."""
        with self._lock:
            self._down = True

    def up(self) -> None:
        """Take requests again."""
        with self._lock:
            self._down = False

    def received(self) -> list[ReceivedSpan]:
        """The spans received so far."""
        with self._lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 20.0
                 ) -> list[ReceivedSpan]:
        """The spans received once ``check(spans)`` holds. Raises TimeoutError after
        ``timeout_s`` seconds, listing what came."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.received()
            if check(spans):
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(f"the receiver got {[s.name for s in spans]} in "
                                   f"{timeout_s} s")
            time.sleep(0.02)
