"""Spans sent over OTLP/HTTP (protobuf), as ``chainlab run/serve/worker --otlp URL`` and the
standard ``OTEL_EXPORTER_OTLP_*`` variables configure them (DESIGN §24).

:func:`configure_otlp` makes an SDK tracer provider with a batch span processor (spans leave
from a thread of their own: a run never waits for the collector) and sets it as the global
provider, which every :class:`~chainlab.runtime.Runtime` of the process then uses.

An endpoint that is down (refused, timed out, answering an error) never blocks a run: the
batch is dropped, ONE warning says so (:class:`DroppingExporter`), and nothing is sent for
``retry_after_s`` seconds (spans ending meanwhile are dropped quietly, counted in
``dropped``); then it is tried again, and a warning comes again only after it answered once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from chainlab.tracing import ENDPOINT_VARS, otlp_wanted

__all__ = ["DroppingExporter", "configure_otlp", "traces_url"]

log = logging.getLogger("chainlab.tracing")
TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
#: seconds one export may take when no variable says otherwise (the SDK's default is 10)
DEFAULT_TIMEOUT_S = 3.0


def traces_url(url: str) -> str:
    """The traces endpoint of ``url``: a base URL (``http://collector:4318``, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it) gets ``/v1/traces``; a URL with a path is
    taken as it is. Raises ValueError for anything but an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--otlp {url!r} is not an http(s) URL: give the collector's "
                         "OTLP/HTTP address, e.g. http://localhost:4318")
    return url.rstrip("/") + "/v1/traces" if parts.path in ("", "/") else url


class DroppingExporter(SpanExporter):
    """``inner``, except that a failed export drops its batch with one warning and stops
    sending for ``retry_after_s`` seconds (see the module docstring)."""

    def __init__(self, inner: SpanExporter, where: str, *, retry_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.inner = inner
        self.where = where
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.dropped = 0  # spans dropped since the start
        self._down_until: float | None = None
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Send ``spans`` through the inner exporter, or drop them (see the class)."""
        now = self.clock()
        if self._down_until is not None and now < self._down_until:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:  # (an exporter should not raise; if it does, it is down too)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._down_until, self._warned = None, False
            return result
        self.dropped += len(spans)
        self._down_until = now + self.retry_after_s
        if not self._warned:
            self._warned = True
            log.warning("OTLP endpoint %s did not take %d span(s): they are dropped, and "
                        "spans are dropped without another warning until it answers (tried "
                        "again every %.0f s); runs go on untouched. Check the URL and that "
                        "the collector runs.", self.where, len(spans), self.retry_after_s)
        return result

    def shutdown(self) -> None:
        """Shut the inner exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the inner exporter."""
        return bool(self.inner.force_flush(timeout_millis))


def configure_otlp(url: str | None = None, *, service: str = "chainlab",
                   **batch: Any) -> TracerProvider | None:
    """Send this process's spans to the OTLP/HTTP collector at ``url`` (see
    :func:`traces_url`) or, without one, the one the ``OTEL_EXPORTER_OTLP_*`` variables
    name; None (nothing configured) when neither names one. The provider is set as the
    global one (runtimes use it by default) and returned. ``service``: the
    ``service.name`` resource attribute unless ``OTEL_SERVICE_NAME`` says otherwise;
    ``batch``: options of the :class:`BatchSpanProcessor`.

    Raises ValueError for a ``url`` that is not an http(s) URL."""
    if not otlp_wanted(url):
        return None
    endpoint = traces_url(url) if url is not None else None
    timeout = None if any(os.environ.get(v) for v in TIMEOUT_VARS) else DEFAULT_TIMEOUT_S
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
    # (its own retry warnings, one per failed batch, are replaced by the one warning above)
    logging.getLogger(OTLPSpanExporter.__module__).setLevel(logging.CRITICAL)
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service),
                                "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource)
    where = endpoint or next(os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v))
    provider.add_span_processor(BatchSpanProcessor(DroppingExporter(exporter, where), **batch))
    trace.set_tracer_provider(provider)
    return provider
