"""The event log tail of the run widget (its Events tab): the last events, one line each,
merged from the live events and the stored log, cut at the scrubber's event while
scrubbing."""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Iterable

import ipywidgets as W

from chainlab.events import Event
from chainlab.render.display import reason_text

__all__ = ["EventLog", "event_line"]

esc = html.escape


def event_line(ev: Event) -> str:
    """One line per event: ``[12] step_failed fetch #2  transient: flaky failure``."""
    p = ev.payload
    extra = ""
    if ev.kind in ("step_failed", "step_retry_scheduled", "step_in_doubt",
                   "compensation_failed"):
        extra = f"{p.get('error_kind') or p.get('reason') or ''}: {p.get('error') or ''}"
        if "delay_s" in p:
            extra += f" (retry in {p['delay_s']:g} s)"
    elif ev.kind in ("step_rejected", "step_skipped", "step_cancelled", "run_paused"):
        word = ev.kind.removeprefix("step_").removeprefix("run_")
        extra = reason_text(word, p.get("reason"))  # never "step_cancelled a  cancelled"
    elif ev.kind == "run_resumed":
        extra = f"{p.get('reason', '')}" + (f", epoch {p['epoch']}" if "epoch" in p else "")
    elif ev.kind == "run_suspended":
        extra = ", ".join(f"{k}: {v}" for k, v in p.get("waiting", {}).items())
    elif ev.kind == "fault_injected":  # issue 19: what was injected, and by whom
        extra = " ".join(str(p[k]) for k in ("fault", "error_kind") if p.get(k)) + \
            f" (by {p.get('by', '?')})"
    elif ev.kind == "write_refused":
        extra = f"epoch {p.get('stale_epoch')} fenced: {', '.join(p.get('refused', []))}"
    elif ev.kind == "step_approved" and p.get("args") is not None:
        extra = "with edited args"
    return f"{ev}  {extra}".rstrip() if extra else str(ev)


class EventLog(W.HTML):
    """The last ``lines`` events (the whole log: ``run.event_log()``)."""

    def __init__(self, lines: int = 14):
        super().__init__()
        self.events: deque[Event] = deque(maxlen=500)
        self.lines = lines
        self.gap = False
        self.upto: int | None = None  # the scrubber's event: show the log up to it
        self._shown = ""
        self.add_class("cl-log")

    def reset(self, events: Iterable[Event]) -> None:
        self.events.clear()
        self.fill(events)

    def add(self, ev: Event) -> None:
        """A live event. One that skips a seq marks a gap (:meth:`fill` closes it)."""
        last = self.events[-1].seq if self.events else 0
        if ev.seq <= last:
            return
        if ev.seq != last + 1:
            self.gap = True
        self.events.append(ev)

    def fill(self, stored: Iterable[Event]) -> None:
        """Merge stored events in (events emitted before we subscribed, once committed)."""
        merged = {ev.seq: ev for ev in stored}
        merged.update((ev.seq, ev) for ev in self.events)
        self.events.clear()
        self.events.extend(merged[seq] for seq in sorted(merged))
        seqs = [ev.seq for ev in self.events]
        if not seqs:
            self.gap = False
            return
        contiguous = seqs[-1] - seqs[0] + 1 == len(seqs)
        from_the_start = seqs[0] == 1 or len(seqs) == self.events.maxlen  # or trimmed
        self.gap = not (contiguous and from_the_start)

    def refresh(self) -> None:
        events = [ev for ev in self.events if self.upto is None or ev.seq <= self.upto]
        tail = events[-self.lines:]
        hidden = len(events) - len(tail)
        head = f"... {hidden} earlier events (run.event_log() has them all)\n" if hidden else ""
        text = head + "\n".join(event_line(ev) for ev in tail)
        if self.upto is not None:
            later = sum(1 for ev in self.events if ev.seq > self.upto)
            text += f"\n◀ scrubbed to event {self.upto}; {later} later events hidden"
        value = f'<pre class="cl-pre">{esc(text)}</pre>'
        if value != self._shown:
            self._shown = self.value = value

