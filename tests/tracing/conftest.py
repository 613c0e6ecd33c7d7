"""Traces made with the real OpenTelemetry SDK: a provider whose spans land in the SDK's
in-memory exporter (``SimpleSpanProcessor``: each span exported as it ends)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Traced:
    """A tracer provider and what it exported."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, (name, [s.name for s in self.spans()])
        return found[0]


@pytest.fixture
def traced() -> Iterator[Traced]:
    found = Traced()
    yield found
    found.provider.shutdown()


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
