"""What a :class:`~chainlab.runtime.Runtime` traces its runs with (:class:`Tracing`): a tracer
of its provider, how spans are made under a parent given by ids (a run's durable spans, whose
ids every process derives: :mod:`chainlab.tracing.context`), and the one way a content
reaches a span (:meth:`Tracing.content`: only with ``capture_content``, always through the
redaction seam). The spans themselves are made from a run's events in
:mod:`chainlab.tracing.spans`.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    set_span_in_context,
)

from chainlab.tracing.context import TRACEPARENT_META, TraceParent

__all__ = ["Pending", "Tracing", "ns"]

log = logging.getLogger("chainlab.tracing")
_OK = Status(StatusCode.OK)


@dataclass(slots=True)
class Pending:
    """A span to make once it ends (made in one call then: :meth:`Tracing.emit`): its name,
    parent (None: a root), start (an event's ``ts``), attributes, kind and span events
    ``(name, ts, attributes)``."""

    name: str
    parent: SpanContext | None
    start_ts: float
    attrs: dict[str, Any]
    kind: SpanKind = SpanKind.INTERNAL
    events: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)


def _version() -> str | None:
    try:
        return importlib.metadata.version("chainlab")
    except importlib.metadata.PackageNotFoundError:  # (a source tree on sys.path)
        return None


def ns(ts: float) -> int:
    """Seconds since the epoch (an event's ``ts``) as a span's nanoseconds."""
    return int(ts * 1e9)


class _PinnedIds:
    """The ids a tracer gives a new span: its own generator's, except while a durable span
    (whose id every process derives) is made (see :meth:`Tracing.durable`)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.trace_id: int | None = None
        self.span_id: int | None = None

    def generate_trace_id(self) -> int:
        return self.trace_id if self.trace_id is not None else self.inner.generate_trace_id()

    def generate_span_id(self) -> int:
        return self.span_id if self.span_id is not None else self.inner.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return bool(self.inner.is_trace_id_random())


class Tracing:
    """What a :class:`~chainlab.runtime.Runtime` traces its runs with: a tracer of
    ``provider`` and whether contents go to spans (``capture_content``), through ``redact``
    (the redaction seam: a function of a value returning what may leave the process)."""

    def __init__(self, provider: Any, *, capture_content: bool = False,
                 redact: Callable[[Any], Any] | None = None):
        self.provider = provider
        self.tracer = provider.get_tracer("chainlab", _version())
        self.capture_content = capture_content
        self.redact = redact
        # a durable span's id is pinned while it is made: only the SDK's tracer lets us
        ids = getattr(self.tracer, "id_generator", None)  # (a third-party provider: absent)
        self._ids = _PinnedIds(ids) if ids is not None else None
        if self._ids is not None:
            self.tracer.id_generator = self._ids
        self._lock = threading.Lock()
        # the context of each parent span, made once (a run's root: once per run)
        self._contexts: dict[tuple[int, int], Context] = {}

    # ------------------------------------------------------------------ the run's place
    def parent_meta(self, meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """``meta`` with the span current here kept as the new run's parent (when there is
        one and the meta names none): a run started inside a traced request belongs to it."""
        if meta is not None and TRACEPARENT_META in meta:
            return dict(meta)
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None if meta is None else dict(meta)
        parent = TraceParent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
        return {**dict(meta or {}), TRACEPARENT_META: parent.header()}

    # ------------------------------------------------------------------ spans
    def emit(self, pending: Pending, trace_id: int, span_id: int | None, end_ts: float,
             error: str | None) -> None:
        """The span ``pending`` describes, ended at ``end_ts`` (``error``: its status
        description; None: ok). ``span_id``: a durable span's id (see
        :mod:`chainlab.tracing.context`), made with ``trace_id`` pinned too when it has no
        parent; None: a new id. One call of the tracer, all attributes at once."""
        ctx = self._context(pending.parent)
        if span_id is None:
            span = self.tracer.start_span(pending.name, ctx, pending.kind, pending.attrs,
                                          start_time=ns(pending.start_ts))
        else:
            with self._lock:
                if self._ids is not None:
                    self._ids.trace_id, self._ids.span_id = trace_id, span_id
                try:
                    span = self.tracer.start_span(pending.name, ctx, pending.kind,
                                                  pending.attrs,
                                                  start_time=ns(pending.start_ts))
                finally:
                    if self._ids is not None:
                        self._ids.trace_id = self._ids.span_id = None
        for name, ts, attrs in pending.events:
            span.add_event(name, attrs, timestamp=ns(ts))
        span.set_status(_OK if error is None else Status(StatusCode.ERROR, error))
        span.end(end_time=ns(end_ts))

    def _context(self, parent: SpanContext | None) -> Context:
        if parent is None:
            return Context()
        key = (parent.trace_id, parent.span_id)
        ctx = self._contexts.get(key)
        if ctx is None:
            if len(self._contexts) > 10_000:  # (a long-lived runtime: forget old runs')
                self._contexts.clear()
            ctx = self._contexts[key] = set_span_in_context(NonRecordingSpan(parent),
                                                            Context())
        return ctx

    def content(self, value: Any) -> str | None:
        """``value`` as a span may carry it: None unless ``capture_content``; else redacted
        (``redact``) and as JSON text. A redactor that raises keeps the value out (one
        warning), never lets it through unredacted."""
        if not self.capture_content:
            return None
        if self.redact is not None:
            try:
                value = self.redact(value)
            except Exception as exc:
                log.warning("the redactor %r failed (%s): the content is left out of the span",
                            self.redact, exc)
                return None
        return json.dumps(value, default=str, ensure_ascii=False)
