"""A run's place in a trace, kept with the run (DESIGN §24): pure stdlib, no OpenTelemetry.

A run is ONE trace, whichever processes drive it (a start, a resume after a crash, a worker's
takeover, a server driven over HTTP). What a process needs to continue that trace is derived
from what every process reads of the run, its record:

* the run's parent, when it has one: a W3C ``traceparent`` kept in the record's meta under
  :data:`TRACEPARENT_META` (an incoming ``traceparent`` header of ``POST /runs``, or the span
  that was current when the run was started in a traced process);
* the trace id: the parent's, else one derived from the run id;
* the ids of the spans that outlive a process (the run's root span ``run CHAIN``, an agent
  step's ``invoke_agent`` span): derived from the trace id and the run id, so a span made by
  any process parents to them without asking anyone (:func:`durable_span_id`). Such a span is
  emitted ONCE, by the process that sees it end, with its recorded start time.

A ``traceparent`` that does not parse is ignored (the run gets a trace of its own) with one
warning naming it (:func:`parse_traceparent`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TRACEPARENT_META", "RunTrace", "TraceParent", "durable_span_id", "kept_parent",
           "parse_traceparent", "run_trace"]

log = logging.getLogger("chainlab.tracing")

#: the key of a run's meta that keeps its parent span, as a W3C traceparent
TRACEPARENT_META = "traceparent"

# version 00: 2 hex, 32 hex trace id, 16 hex parent id, 2 hex flags (W3C Trace Context)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed W3C ``traceparent``: the trace, the parent span, the flags (sampled: 01)."""

    trace_id: int
    span_id: int
    flags: int

    def header(self) -> str:
        """The ``traceparent`` text (version 00)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


def parse_traceparent(text: Any, *, where: str = "traceparent") -> TraceParent | None:
    """The parent ``text`` names, or None (with ONE warning naming ``where`` and the value)
    when it is not a valid W3C traceparent (version ``ff``, an all-zero id, wrong lengths,
    upper case, not text): the run then starts a trace of its own."""
    if text is None:
        return None
    found = _TRACEPARENT.fullmatch(text.strip()) if isinstance(text, str) else None
    if found is not None and found[1] != "ff":
        trace_id, span_id = int(found[2], 16), int(found[3], 16)
        if trace_id and span_id:
            return TraceParent(trace_id, span_id, int(found[4], 16))
    log.warning("%s %.80r is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>): ignored, "
                "the run starts a trace of its own", where, text)
    return None


@dataclass(frozen=True, slots=True)
class RunTrace:
    """Where a run sits in its trace: the trace id, its root span's id, and the parent span
    of that root (None: the root has no parent)."""

    trace_id: int
    root_span_id: int
    parent: TraceParent | None

    def span_id(self, key: str) -> int:
        """The id of the run's durable span ``key`` (``step/ID`` of an agent step)."""
        return durable_span_id(self.trace_id, f"{self.root_span_id:016x}/{key}")


def _digest(text: str, nbytes: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:nbytes], "big")
    return value or 1  # (an all-zero id is invalid: 1 in 2**64 of being needed)


def durable_span_id(trace_id: int, key: str) -> int:
    """The span id ``key`` has in trace ``trace_id``: the same in every process."""
    return _digest(f"{trace_id:032x}/{key}", 8)


def run_trace(run_id: str, meta: Mapping[str, Any]) -> RunTrace:
    """The trace of run ``run_id`` from its record's ``meta`` (see the module docstring).
    A parent kept in the meta that does not parse (an old or hand-edited record) is ignored
    with one warning."""
    parent = parse_traceparent(meta.get(TRACEPARENT_META), where=f"run {run_id}'s meta "
                               f"{TRACEPARENT_META}") if TRACEPARENT_META in meta else None
    trace_id = parent.trace_id if parent is not None else _digest(f"chainlab-run/{run_id}", 16)
    return RunTrace(trace_id, durable_span_id(trace_id, f"run/{run_id}"), parent)


def kept_parent(meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``meta`` as a new run keeps it: a parent (:data:`TRACEPARENT_META`) that does not
    parse is dropped, with one warning (the run starts a trace of its own)."""
    if meta is None or TRACEPARENT_META not in meta:
        return meta
    parent = parse_traceparent(meta[TRACEPARENT_META])
    kept = {k: v for k, v in meta.items() if k != TRACEPARENT_META}
    return kept if parent is None else {**kept, TRACEPARENT_META: parent.header()}
