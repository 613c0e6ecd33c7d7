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
    TraceFlags,
    set_span_in_context,
)

from chainlab.tracing.context import TRACEPARENT_META, TraceParent

__all__ = ["Pending", "Tracing", "ns"]

log = logging.getLogger("chainlab.tracing")
_OK = Status(StatusCode.OK)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _is_sdk(tracer: Any) -> bool:
    try:
        from opentelemetry.sdk.trace import Tracer
    except ImportError:  # (the API alone)
        return False
    return isinstance(tracer, Tracer)


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


class _Direct:
    """Spans handed straight to the span processor of the SDK's tracer (its public
    ``span_processor``, ``resource``, ``sampler`` and ``id_generator``), as finished
    ``ReadableSpan`` objects: a chainlab span is made whole when it ends, so the SDK's
    per-span machinery (context, locks, limits on a live span) is not needed; this makes a
    span about three times cheaper (benchmarks/bench_tracing.py) and lets a durable span
    carry the id every process derives. The processors' ``on_start`` is not called (no span
    is live), and a run is sampled once, as a whole (:meth:`Tracing.sampled`)."""

    def __init__(self, tracer: Any):
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.processor = tracer.span_processor
        self.resource = tracer.resource
        self.sampler = tracer.sampler
        self.ids = tracer.id_generator
        self.scope = InstrumentationScope("chainlab", _version())
        self.readable, self.event = ReadableSpan, Event

    def emit(self, pending: Pending, trace_id: int, span_id: int | None, end_ts: float,
             error: str | None) -> None:
        ctx = SpanContext(trace_id, span_id if span_id is not None
                          else self.ids.generate_span_id(), False, _SAMPLED)
        span = self.readable(
            pending.name, ctx, pending.parent, self.resource, pending.attrs,
            tuple(self.event(name, attrs, ns(ts)) for name, ts, attrs in pending.events),
            kind=pending.kind, status=_OK if error is None else Status(StatusCode.ERROR,
                                                                        error),
            start_time=ns(pending.start_ts), end_time=ns(end_ts),
            instrumentation_scope=self.scope)
        self.processor.on_end(span)


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
        # the SDK's tracer: spans go straight to its processor (see _Direct); another
        # provider's: through the tracer API (a durable span then gets an id of its own)
        self._direct = _Direct(self.tracer) if _is_sdk(self.tracer) else None
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
    def sampled(self, trace_id: int, parent: SpanContext | None) -> bool:
        """Whether a run's trace is recorded, decided once for the whole run by the SDK's
        sampler (deterministic for a trace id under a ratio sampler, the parent's flag under
        a parent-based one: every process decides alike). Another provider samples each
        span itself: True."""
        if self._direct is None:
            return True
        result = self._direct.sampler.should_sample(self._context(parent), trace_id, "run")
        return bool(result.decision.is_sampled())

    def emit(self, pending: Pending, trace_id: int, span_id: int | None, end_ts: float,
             error: str | None) -> None:
        """The span ``pending`` describes, ended at ``end_ts`` (``error``: its status
        description; None: ok), in trace ``trace_id``. ``span_id``: a durable span's id
        (see :mod:`chainlab.tracing.context`); None: a new id."""
        if self._direct is not None:
            self._direct.emit(pending, trace_id, span_id, end_ts, error)
            return
        parent = pending.parent
        if parent is None and span_id is not None:  # a root: through the API, only a parent
            # carries the trace id; the derived id stands in (the root gets an id of its own)
            parent = SpanContext(trace_id, span_id, True, _SAMPLED)
        span = self.tracer.start_span(pending.name, self._context(parent), pending.kind,
                                      pending.attrs, start_time=ns(pending.start_ts))
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
