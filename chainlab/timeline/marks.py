"""What the Gantt chart marks besides attempts and waits (issue 19): the run's writer
EPOCHS (a band each, a dashed line where a new driver took over), INJECTED FAULTS (a
triangle on the step it hit, or a line across the chart for a driver-level fault), and
FENCED WRITERS (a cross on each step whose write the store refused from a stale epoch).

Drawn from the same fold as the bars (``RunState.faults`` / ``RunState.fenced``) and the
event log's epochs, so a stored run, a live one and one written by another process look
alike. Colours are from the Okabe-Ito palette and readable on light and dark backgrounds;
every mark also has a word, so colour is never the only cue.
"""

from __future__ import annotations

from typing import Any

from chainlab.events import Event
from chainlab.events.fold import RunState

__all__ = ["FAULT_COLOR", "FENCED_COLOR", "epoch_spans", "mark_run"]

FAULT_COLOR = "#cc3311"  # vermillion-red: a fault someone injected
FENCED_COLOR = "#aa3377"  # reddish purple: a stale writer the store refused
EPOCH_COLOR = "#0072b2"  # blue: where a new driver took over
_BAND = ("#0072b2", 0.0), ("#0072b2", 0.06)  # every other epoch gets a faint band


def epoch_spans(events: list[Event]) -> list[tuple[int, float, float]]:
    """``(epoch, first ts, last ts)`` of each writer epoch, in log order."""
    spans: list[tuple[int, float, float]] = []
    for ev in events:
        if spans and spans[-1][0] == ev.epoch:
            spans[-1] = (ev.epoch, spans[-1][1], ev.ts)
        else:
            spans.append((ev.epoch, ev.ts, ev.ts))
    return spans


def mark_run(ax: Any, state: RunState, events: list[Event],
             row: dict[str, int]) -> list[Any]:
    """Draw the epoch bands, fault and fencing marks into ``ax`` (a matplotlib Axes, from
    chainlab.timeline: the one module that imports matplotlib) (x: seconds since the
    first event, y: ``row[step_id]``); return legend handles for what was drawn."""
    if not events:
        return []
    t0 = events[0].ts
    handles: list[Any] = []
    spans = epoch_spans(events)
    if len(spans) > 1:
        for i, (epoch, start, _) in enumerate(spans):
            stop = spans[i + 1][1] if i + 1 < len(spans) else events[-1].ts
            color, alpha = _BAND[i % 2]
            if alpha:
                ax.axvspan(start - t0, stop - t0, color=color, alpha=alpha, zorder=0.5,
                           linewidth=0)
            if not i:
                continue  # the first epoch needs no label: the chart starts with it
            ax.axvline(start - t0, color=EPOCH_COLOR, linestyle="--", linewidth=1.3, zorder=5)
            ax.text(start - t0, 1.0, f" epoch {epoch}", transform=ax.get_xaxis_transform(),
                    ha="left", va="bottom", fontsize=7.5, color=EPOCH_COLOR, zorder=6,
                    clip_on=False)
        handles.append(_key(ax, color=EPOCH_COLOR, linestyle="--",
                            label="new epoch (driver took over)"))
    for fault in state.faults:
        x = fault["ts"] - t0
        what = str(fault.get("fault"))
        step_id = fault.get("step_id")
        label = f"⚠ {what} ({fault.get('by', '?')})"
        if step_id in row:
            ax.plot([x], [row[step_id]], marker="v", markersize=9, color=FAULT_COLOR,
                    markeredgecolor="white", zorder=7, linestyle="none")
            ax.text(x, row[step_id] - 0.36, label, ha="left", va="bottom", fontsize=7,
                    color=FAULT_COLOR, zorder=7)
        else:  # a driver-level fault (kill now, second driver): across the whole chart
            ax.axvline(x, color=FAULT_COLOR, linestyle=":", linewidth=1.5, zorder=6)
            ax.text(x, 1.0, f"{label} ", transform=ax.get_xaxis_transform(), ha="right",
                    va="bottom", fontsize=7.5, color=FAULT_COLOR, zorder=7, clip_on=False)
    if state.faults:
        handles.append(_key(ax, marker="v", color=FAULT_COLOR, linestyle="none",
                            label="fault injected"))
    for refusal in state.fenced:
        x = refusal["ts"] - t0
        steps = dict.fromkeys(str(w).partition(" ")[2] for w in refusal.get("refused", []))
        for step_id in (s for s in steps if s in row):
            ax.plot([x], [row[step_id]], marker="X", markersize=10, color=FENCED_COLOR,
                    markeredgecolor="white", zorder=8, linestyle="none")
            ax.text(x, row[step_id] - 0.36, f"refused: epoch {refusal['stale_epoch']} ",
                    ha="right", va="bottom", fontsize=7, color=FENCED_COLOR, zorder=8)
        ax.axvline(x, color=FENCED_COLOR, linestyle="-.", linewidth=1.0, zorder=6)
    if state.fenced:
        handles.append(_key(ax, marker="X", color=FENCED_COLOR, linestyle="-.",
                            label="write refused (stale epoch, fenced)"))
    return handles


def _key(ax: Any, **look: Any) -> Any:
    """A legend entry: an empty line drawn with ``look`` (this module leaves importing
    matplotlib to chainlab.timeline, the one module that does)."""
    return ax.plot([], [], **look)[0]
