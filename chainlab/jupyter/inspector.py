"""The step inspector, the event log tail and the timeline tab of the run widget."""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events import Event
from chainlab.events.fold import BACKGROUND_NOTE
from chainlab.jupyter.inbox import pretty, tool_of

if TYPE_CHECKING:
    from chainlab.jupyter.widgets import RunWidget

__all__ = ["EventLog", "StepInspector", "TimelineTab", "event_line"]

esc = html.escape
# the attempts table in the Timeline tab (run.attempts() has every column)
SHOWN_COLUMNS = ("step_id", "tool", "kind", "attempt", "epoch", "status", "error_kind", "error",
                 "duration_s")


class StepInspector(W.VBox):
    """Pick a step: its status, resolved args, output, attempts, error, idempotency key."""

    def __init__(self, widget: RunWidget):
        self.widget = widget
        self.picker = W.Dropdown(description="step", options=[],
                                 style={"description_width": "initial"})
        self.details = W.HTML()
        self.picker.observe(lambda _: self.refresh(), names="value")
        super().__init__([self.picker, self.details])
        self.add_class("cl-inspector")
        self._last = ""

    def select(self, step_id: str) -> None:
        """Show ``step_id``. Raises ValueError listing the steps."""
        if step_id not in self.picker.options:
            raise ValueError(f"no step {step_id!r}; steps: {', '.join(self.picker.options)}")
        self.picker.value = step_id

    def refresh(self) -> None:
        run = self.widget.run
        ids = tuple(run.steps)
        if tuple(self.picker.options) != ids:
            current = self.picker.value
            self.picker.options = ids
            self.picker.value = current if current in ids else (ids[0] if ids else None)
        step_id = self.picker.value
        if step_id is None:
            return
        text = self.render(step_id)
        if text != self._last:
            self._last = self.details.value = text

    def render(self, step_id: str) -> str:
        run = self.widget.run
        st = run.steps[step_id]
        rows = [("status", st.status + (f" ({st.reason})" if st.reason else "")
                 + (f" · {BACKGROUND_NOTE}" if st.background else "")),
                ("tool", tool_of(self.widget, step_id)),
                ("attempts", str(st.attempts) + (f", compensations {st.compensations}"
                                                 if st.compensations else "")),
                ("idempotency key", st.idempotency_key or "-")]
        if step_id in run.state.estimates:
            rows.append(("expected", f"~{run.state.estimates[step_id]:.3g} s "
                                     f"(release order: {run.state.priority})"))
        if st.error:
            rows.append(("error", f"{st.error_kind or ''}: {st.error}"))
        if st.approval:
            edited = " (args edited)" if st.approval.get("edited") else ""
            rows.append(("approval", f"{st.approval.get('note') or 'approved'}{edited}"))
        table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        parts = [f'<table class="cl-kv">{table}</table>',
                 f'<div class="cl-label">resolved args</div>{pretty(st.args)}']
        if st.output is not None or st.status == "succeeded":
            parts.append(f'<div class="cl-label">output</div>{pretty(st.output)}')
        attempts = [a for a in run.state.attempts if a.step_id == step_id]
        if attempts:
            lines = "".join(
                f"<tr><td>{a.kind} #{a.attempt}</td><td>epoch {a.epoch}</td>"
                f"<td>{esc(str(a.status))}</td>"
                f"<td>{'' if a.duration_s is None else f'{a.duration_s:.3f} s'}</td>"
                f"<td>{esc((a.error_kind or '') + (': ' + a.error if a.error else ''))}</td></tr>"
                for a in attempts)
            head = ("<tr><th>attempt</th><th>epoch</th><th>status</th><th>duration</th>"
                    "<th>error</th></tr>")
            parts.append(f'<div class="cl-label">attempts</div><table class="cl-table">{head}'
                         f"{lines}</table>")
        return "".join(parts)


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
        extra = str(p.get("reason") or "")
    elif ev.kind == "run_resumed":
        extra = f"{p.get('reason', '')}" + (f", epoch {p['epoch']}" if "epoch" in p else "")
    elif ev.kind == "run_suspended":
        extra = ", ".join(f"{k}: {v}" for k, v in p.get("waiting", {}).items())
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
        tail = list(self.events)[-self.lines:]
        hidden = len(self.events) - len(tail)
        head = f"... {hidden} earlier events (run.event_log() has them all)\n" if hidden else ""
        text = head + "\n".join(event_line(ev) for ev in tail)
        value = f'<pre class="cl-pre">{esc(text)}</pre>'
        if value != self._shown:
            self._shown = self.value = value


class TimelineTab(W.VBox):
    """The attempts table and the Gantt chart, drawn on demand from the store."""

    def __init__(self, widget: RunWidget):
        self.widget = widget
        self.draw_button = W.Button(description="Redraw", icon="refresh",
                                    tooltip="read the attempts from the store again")
        self.out = W.Output(layout=W.Layout(overflow="auto"))
        self.drawn_at: int | None = None  # the run's last event seq when drawn
        self.frame: Any = None  # what is shown: the attempts DataFrame and the Gantt chart
        self.figure: Any = None
        self.draw_button.on_click(lambda _: self.draw())
        super().__init__([self.draw_button, self.out])

    def shown(self) -> None:
        """The tab was selected: draw unless what is drawn is still current."""
        if self.drawn_at != self.widget.run.state.last_seq:
            self.draw()

    def draw(self) -> None:
        """(Re)draw the table and the chart (needs chainlab[jupyter]: pandas, matplotlib)."""
        run = self.widget.run
        self.drawn_at = run.state.last_seq
        self.out.clear_output()
        with self.out:
            try:
                from IPython.display import display

                from chainlab.timeline import attempts_frame, plot_timeline

                frame = attempts_frame(run.runtime.store, run.run_id)
                self.frame = frame[[c for c in frame.columns if c in SHOWN_COLUMNS]]
                self.figure = plot_timeline(run.runtime.store, run.run_id)
                display(self.frame)
                display(self.figure)
            except Exception as exc:
                self.widget.show_error(exc, action="draw the timeline")

