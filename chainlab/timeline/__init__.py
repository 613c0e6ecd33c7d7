"""A run's attempts, compensations, waits and events as pandas DataFrames, and its Gantt chart.

Everything here is built from the store only (``store.get_run`` + ``store.load_events``,
folded by :class:`chainlab.events.fold.RunState`, the fold the runtime itself uses), so it
works for a live run, a finished one and one written by another process.

Plotting library: **matplotlib**, on purpose. A run timeline is a static picture that
must survive ``nbconvert`` to HTML, GitHub's notebook viewer and nbval, and render in CI with
no display: matplotlib renders headless to PNG with its Agg rasteriser and needs no browser,
no JavaScript and no kernel extension (plotly/bokeh/altair need a JS front end for their
default output and extra packages to export a PNG). The chart is drawn on a
``matplotlib.figure.Figure`` directly (no ``pyplot``): nothing touches the user's backend or
global figure state, it is safe in worker threads, and there is no double display in
Jupyter; the returned figure shows itself as PNG (``_repr_png_``). This module and
:mod:`chainlab.render` share one palette (:data:`chainlab.render.STATUS_STYLE`).

Frames (all times are ``datetime64[ns, UTC]``; NaT/NaN while something is still open):

``attempts_frame`` - one row per tool call and per compensation call, in start order:
    run_id, step_id (``parent/child`` in sub-chains), tool, kind (``call`` |
    ``compensation``: one spelling in frames, the SQL ``attempts`` view and the CLI),
    attempt (1-based, per step and kind), epoch (writer epoch), status
    (``succeeded`` | ``failed`` | ``timed_out`` | ``cancelled`` | ``interrupted`` |
    ``running``), error_kind, error, started_at, ended_at, duration_s, retry_delay_s (the
    back-off scheduled after this attempt), idempotency_key (None for effect-free tools),
    code (fingerprint of the tool's code the attempt ran; None for compensations).
    A sub-chain step has one row (tool ``chain:NAME``) spanning its steps' rows.
``compensations_frame`` - the ``kind == "compensation"`` rows of ``attempts_frame``.
``waits_frame`` - time a step spent waiting between or instead of attempts: step_id, kind
    (``backoff`` | ``confirmation`` | ``in_doubt``), started_at, ended_at, duration_s,
    outcome (``retried``, ``approved``, ``rejected``, ``resolved``, ``cancelled``, or None
    while waiting).
``events_frame`` - the event log: run_id, seq, ts, elapsed_s (since the first event), epoch,
    kind, step_id, attempt (nullable Int64), payload (dict).
``runs_frame`` - one row per run, newest first: run_id, chain_name, status, epoch,
    created_at, updated_at, duration_s (updated - created), steps (top-level step count),
    forked_from (the parent's run id for a fork, else None).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
from matplotlib.figure import Figure

from chainlab.events import Event
from chainlab.events.fold import RunState, read_run

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from chainlab.store.base import RunRecord, Store

__all__ = [
    "ATTEMPT_COLUMNS",
    "TimelineFigure",
    "attempts_frame",
    "compensations_frame",
    "diff",
    "events_frame",
    "fork_plan_frame",
    "plot_timeline",
    "runs_frame",
    "waits_frame",
]

ATTEMPT_COLUMNS = ["run_id", "step_id", "tool", "kind", "attempt", "epoch", "status",
                   "error_kind", "error", "started_at", "ended_at", "duration_s",
                   "retry_delay_s", "idempotency_key", "code"]
WAIT_COLUMNS = ["step_id", "kind", "started_at", "ended_at", "duration_s", "outcome"]
EVENT_COLUMNS = ["run_id", "seq", "ts", "elapsed_s", "epoch", "kind", "step_id", "attempt",
                 "payload"]
RUN_COLUMNS = ["run_id", "chain_name", "status", "epoch", "created_at", "updated_at",
               "duration_s", "steps", "forked_from"]


def _times(values: Iterable[float | None]) -> pd.Series:
    return pd.to_datetime(pd.Series([float("nan") if v is None else v for v in values],
                                    dtype="float64"), unit="s", utc=True)


def _load(store: Store, run_id: str) -> tuple[RunRecord, list[Event], RunState]:
    return read_run(store, run_id)  # type: ignore[no-any-return]


def attempts_frame(store: Store, run_id: str) -> pd.DataFrame:
    """Every attempt and compensation of a run (columns: see the module docstring).

    Raises RunNotFoundError for an unknown run.
    """
    _, _, state = _load(store, run_id)
    recs = state.attempts
    frame = pd.DataFrame({
        "run_id": pd.Series([run_id] * len(recs), dtype="object"),
        "step_id": pd.Series([r.step_id for r in recs], dtype="object"),
        "tool": pd.Series([r.tool for r in recs], dtype="object"),
        "kind": pd.Series([r.kind for r in recs],
                          dtype="object"),
        "attempt": pd.Series([r.attempt for r in recs], dtype="int64"),
        "epoch": pd.Series([r.epoch for r in recs], dtype="int64"),
        "status": pd.Series([str(r.status) for r in recs], dtype="object"),
        "error_kind": pd.Series([r.error_kind for r in recs], dtype="object"),
        "error": pd.Series([r.error for r in recs], dtype="object"),
        "started_at": _times(r.started_at for r in recs),
        "ended_at": _times(r.ended_at for r in recs),
        "duration_s": pd.Series([r.duration_s for r in recs], dtype="float64"),
        "retry_delay_s": pd.Series([r.retry_delay_s for r in recs], dtype="float64"),
        "idempotency_key": pd.Series([r.idempotency_key for r in recs], dtype="object"),
        # which version of the tool's code the attempt ran (a fork reruns changed tools)
        "code": pd.Series([r.code for r in recs], dtype="object"),
    }, columns=ATTEMPT_COLUMNS)
    return frame


def compensations_frame(store: Store, run_id: str) -> pd.DataFrame:
    """The compensation rows of :func:`attempts_frame` (same columns, renumbered index)."""
    frame = attempts_frame(store, run_id)
    return frame[frame["kind"] == "compensation"].reset_index(drop=True)


_WAIT_OPEN = {"step_retry_scheduled": "backoff", "step_waiting_confirmation": "confirmation",
              "step_in_doubt": "in_doubt"}
# a back-off ends when the step is due again (step_ready), not when a slot frees up
_WAIT_CLOSE: dict[str, dict[str, str | None]] = {
    "backoff": {"step_ready": "retried", "step_started": "retried", "step_cancelled": "cancelled",
                "step_skipped": "cancelled", "step_failed": "cancelled"},
    "confirmation": {"step_approved": "approved", "step_rejected": "rejected",
                     "step_skipped": "cancelled", "step_cancelled": "cancelled",
                     "step_waiting_confirmation": "asked again"},
    "in_doubt": {"step_succeeded": "resolved", "step_failed": "resolved",
                 "step_ready": "retried"},
}


def _waits(events: Iterable[Event]) -> list[tuple[str, str, float, float | None, str | None]]:
    """(step_id, kind, start, end, outcome) of every wait, in start order."""
    open_: dict[str, tuple[str, float, int]] = {}  # step -> (kind, start, row)
    rows: list[tuple[str, str, float, float | None, str | None]] = []
    for ev in events:
        step_id = ev.step_id
        if step_id is None:
            continue
        current = open_.get(step_id)
        if current is not None:
            kind, start, row = current
            closing = _WAIT_CLOSE[kind]
            outcome = closing.get(ev.kind)
            if outcome is not None:
                rows[row] = (step_id, kind, start, ev.ts, outcome)
                del open_[step_id]
        if ev.kind in _WAIT_OPEN:
            open_[step_id] = (_WAIT_OPEN[ev.kind], ev.ts, len(rows))
            rows.append((step_id, _WAIT_OPEN[ev.kind], ev.ts, None, None))
    return rows


def waits_frame(store: Store, run_id: str) -> pd.DataFrame:
    """Back-off, confirmation and in-doubt waits of a run (columns: module docstring)."""
    _, events, _ = _load(store, run_id)
    rows = _waits(events)
    return pd.DataFrame({
        "step_id": pd.Series([r[0] for r in rows], dtype="object"),
        "kind": pd.Series([r[1] for r in rows], dtype="object"),
        "started_at": _times(r[2] for r in rows),
        "ended_at": _times(r[3] for r in rows),
        "duration_s": pd.Series([None if r[3] is None else r[3] - r[2] for r in rows],
                                dtype="float64"),
        "outcome": pd.Series([r[4] for r in rows], dtype="object"),
    }, columns=WAIT_COLUMNS)


def events_frame(store: Store, run_id: str) -> pd.DataFrame:
    """The run's event log, one row per event in ``seq`` order (columns: module docstring)."""
    events = store.load_events(run_id)
    if not events:
        store.get_run(run_id)  # raises RunNotFoundError for an unknown run
    t0 = events[0].ts if events else 0.0
    return pd.DataFrame({
        "run_id": pd.Series([e.run_id for e in events], dtype="object"),
        "seq": pd.Series([e.seq for e in events], dtype="int64"),
        "ts": _times(e.ts for e in events),
        "elapsed_s": pd.Series([e.ts - t0 for e in events], dtype="float64"),
        "epoch": pd.Series([e.epoch for e in events], dtype="int64"),
        "kind": pd.Series([e.kind for e in events], dtype="object"),
        "step_id": pd.Series([e.step_id for e in events], dtype="object"),
        "attempt": pd.Series([e.attempt for e in events], dtype="Int64"),
        "payload": pd.Series([dict(e.payload) for e in events], dtype="object"),
    }, columns=EVENT_COLUMNS)


def runs_frame(store: Store, limit: int | None = None) -> pd.DataFrame:
    """Runs in the store, newest first (columns: module docstring)."""
    runs = store.list_runs(limit)
    return pd.DataFrame({
        "run_id": pd.Series([r.run_id for r in runs], dtype="object"),
        "chain_name": pd.Series([r.chain_name for r in runs], dtype="object"),
        "status": pd.Series([str(r.status) for r in runs], dtype="object"),
        "epoch": pd.Series([r.epoch for r in runs], dtype="int64"),
        "created_at": _times(r.created_at for r in runs),
        "updated_at": _times(r.updated_at for r in runs),
        "duration_s": pd.Series([r.updated_at - r.created_at for r in runs], dtype="float64"),
        "steps": pd.Series([len(r.chain.get("steps", [])) for r in runs], dtype="int64"),
        # lineage: the run a fork was started from (None for a run started from a chain)
        "forked_from": pd.Series([r.meta.get("forked_from") for r in runs], dtype="object"),
    }, columns=RUN_COLUMNS)


# which of the two pictures shows: JupyterLab marks its theme on <body>; elsewhere light
_THEME_CSS = (".cl-theme-dark-only{display:none}"
              '[data-jp-theme-light="false"] .cl-theme-dark-only{display:inline}'
              '[data-jp-theme-light="false"] .cl-theme-light-only{display:none}')
DARK_BG, DARK_FG, DARK_LINE = "#1e1e1e", "#d8d8d8", "#777777"


class TimelineFigure(Figure):
    """A matplotlib Figure that shows itself as PNG in Jupyter without pyplot; as HTML it
    carries a light and a dark picture and the notebook's theme shows one (issue 18: a
    white box in the dark theme)."""

    def _repr_png_(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=self.dpi, facecolor="white")
        return buf.getvalue()

    def _repr_html_(self) -> str:
        import base64

        light = base64.b64encode(self._repr_png_()).decode()
        dark = base64.b64encode(self.dark_png()).decode()
        return (f"<style>{_THEME_CSS}</style>"
                f'<img class="cl-theme-light-only" src="data:image/png;base64,{light}"/>'
                f'<img class="cl-theme-dark-only" src="data:image/png;base64,{dark}"/>')

    def dark_png(self) -> bytes:
        """The same chart on a dark background with light text (a copy is recoloured)."""
        import io
        import pickle

        fig = pickle.loads(pickle.dumps(self))
        fig.patch.set_facecolor(DARK_BG)
        for text in fig.texts:
            text.set_color(DARK_FG)
        for ax in fig.axes:
            _darken(ax)
        for legend in fig.legends:
            _darken_legend(legend)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=self.dpi, facecolor=DARK_BG)
        return buf.getvalue()


def _darken(ax: Axes) -> None:
    ax.set_facecolor(DARK_BG)
    ax.tick_params(colors=DARK_FG, which="both")
    for spine in ax.spines.values():
        spine.set_color(DARK_LINE)
    titles = [getattr(ax, f"_{loc}_title", None) for loc in ("left", "right")]
    for label in (ax.xaxis.label, ax.yaxis.label, ax.title, *titles):
        if label is not None:
            label.set_color(DARK_FG)
    for line in [*ax.get_xgridlines(), *ax.get_ygridlines()]:
        line.set_color("#444444")
    for text in ax.texts:
        # notes beside the bars (muted grey) turn light; captions ON the light bars and on
        # their own boxes keep their dark text
        if text.get_bbox_patch() is None and text.get_verticalalignment() == "bottom":
            text.set_color(DARK_FG)
    legend = ax.get_legend()
    if legend is not None:
        _darken_legend(legend)


def _darken_legend(legend: Any) -> None:
    legend.get_frame().set_facecolor(DARK_BG)
    legend.get_frame().set_edgecolor(DARK_LINE)
    for text in legend.get_texts():
        text.set_color(DARK_FG)
    legend.get_title().set_color(DARK_FG)


def plot_timeline(store: Store, run_id: str, *, ax: Axes | None = None,
                  width: float = 10.0, title: str | None = None) -> Figure:
    """A Gantt chart of a run: one row per step, a bar per attempt coloured by its outcome,
    hatched bars for compensations, thin bars for back-off, confirmation and in-doubt waits,
    each step's final status at the right. Draws into ``ax`` when given, else into a new
    figure ``width`` inches wide. Returns the figure (save it with ``fig.savefig(...)``).

    Raises RunNotFoundError for an unknown run.
    """
    record, events, state = _load(store, run_id)
    order = _step_order(record, state)
    if ax is None:
        rows = max(len(order), 1)  # 0.34 in per row; beyond 60 steps 0.14 in, smaller text
        height = 1.6 + (0.34 * rows if rows <= 60 else 20.4 + 0.14 * (rows - 60))
        fig = TimelineFigure(figsize=(width, min(height, 60.0)), dpi=100)
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
    else:
        fig = ax.figure  # type: ignore[assignment]
    heading = title if title is not None else (
        f"{record.chain_name} · run {state.status or record.status}")
    handles, margins = _draw(ax, state, _waits(events), order, events, heading)
    from chainlab.timeline.marks import mark_run  # epochs, injected faults, fenced writers

    handles += mark_run(ax, state, events, {step_id: i for i, step_id in enumerate(order)})
    if isinstance(fig, TimelineFigure):
        _place(fig, handles, margins)
    else:
        ax.legend(handles=handles, loc="best", fontsize=8)
    return fig


def _place(fig: Figure, handles: list[Any], margins: tuple[float, float]) -> None:
    """Margins computed from the label lengths (matplotlib's layout engines measure every
    tick label several times: seconds for a few hundred steps) and the legend below."""
    w, h = fig.get_size_inches()
    ncol = max(len(handles) if len(handles) <= 4 else -(-len(handles) // 2), 1)
    legend_rows = -(-len(handles) // ncol) if handles else 0
    bottom = 0.55 + 0.24 * legend_rows
    left, right = margins
    fig.subplots_adjust(left=min(left / w, 0.45), right=1 - min(right / w, 0.4),
                        top=1 - 0.42 / h, bottom=min(bottom / h, 0.5))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False,
                   fontsize=8.5, bbox_to_anchor=(0.5, 0.0))


def _step_order(record: RunRecord, state: RunState) -> list[str]:
    """Step ids in declaration order, sub-chain steps right after their parent."""
    out: list[str] = []

    def walk(chain: dict[str, Any], prefix: str, seen: tuple[str, ...]) -> None:
        for step in chain.get("steps", []):
            step_id = prefix + step["id"]
            out.append(step_id)
            tool = str(step.get("tool", ""))
            name = tool[len("chain:"):].strip() if tool.startswith("chain:") else None
            if name and name in record.chains and name not in seen:
                walk(record.chains[name], step_id + "/", (*seen, name))

    walk(record.chain, "", (record.chain_name,))
    known = set(out)
    out += [step_id for step_id in state.steps if step_id not in known]
    return out


# ---------------------------------------------------------------------- drawing
KIND_SUBCHAIN = "⇢"
_ATTEMPT_LOOK = {"succeeded": "succeeded", "failed": "failed", "timed_out": "failed",
                 "cancelled": "cancelled", "interrupted": "in_doubt", "running": "running"}
_COMPENSATION_LOOK = {"succeeded": "compensated", "failed": "compensation_failed",
                      "timed_out": "compensation_failed", "interrupted": "compensation_failed",
                      "cancelled": "cancelled", "running": "compensating"}
_WAIT_LOOK = {"backoff": ("retry_wait", "back-off"),
              "confirmation": ("waiting_confirmation", "waiting for approval"),
              "in_doubt": ("in_doubt", "in doubt")}
_OUTCOME_NAMES = {"succeeded": "attempt succeeded", "failed": "attempt failed",
                  "timed_out": "attempt timed out", "interrupted": "attempt interrupted",
                  "cancelled": "attempt cancelled", "running": "attempt running"}
_COMPENSATION_NAMES = {"compensated": "compensation succeeded",
                       "compensation_failed": "compensation failed",
                       "compensating": "compensation running",
                       "cancelled": "compensation cancelled"}
_LEGEND_ORDER = ([f"attempt:{k}" for k in _OUTCOME_NAMES] + [f"wait:{k}" for k in _WAIT_LOOK]
                 + [f"comp:{k}" for k in _COMPENSATION_NAMES])


class _Bars:
    """Bars collected per look and drawn as one PolyCollection each: ``barh`` makes a
    Rectangle artist per bar, which costs seconds for a few hundred steps."""

    def __init__(self) -> None:
        self.groups: dict[tuple[Any, ...], list[tuple[float, float, float]]] = {}

    def add(self, y: float, left: float, width: float, *, height: float, **look: Any) -> None:
        key = (height, *sorted(look.items()))
        self.groups.setdefault(key, []).append((y, left, width))

    def draw(self, ax: Axes) -> None:
        from matplotlib.collections import PolyCollection

        for (height, *look), bars in self.groups.items():
            h = height / 2
            verts = [[(x, y - h), (x + w, y - h), (x + w, y + h), (x, y + h)]
                     for y, x, w in bars]
            style = dict(look)
            ax.add_collection(PolyCollection(
                verts, facecolors=style["color"], edgecolors=style["edgecolor"],
                linewidths=style["linewidth"], linestyles=style.get("linestyle", "solid"),
                hatch=style.get("hatch"), zorder=style["zorder"]), autolim=False)


def _draw(ax: Axes, state: RunState, waits: list[tuple[str, str, float, float | None,
          str | None]], order: list[str], events: list[Event],
          heading: str) -> tuple[list[Any], tuple[float, float]]:
    """Draw the chart into ``ax``; return the legend handles and the left and right margins
    (inches) its labels need."""
    from matplotlib.patches import Patch

    from chainlab.render.style import MUTED_TEXT, STATUS_STYLE

    t0 = events[0].ts if events else 0.0
    t_end = max((e.ts for e in events), default=t0)
    span = (t_end - t0) or 1.0
    min_w = span * 0.006
    n = len(order)
    small = n > 60  # many rows: smaller text, no text inside bars
    fig_w = ax.figure.get_figwidth() if isinstance(ax.figure, Figure) else 10.0
    chars = max(ax.get_position().width * fig_w * 72 / 4.6, 20)

    def fits(text: str, width: float) -> bool:  # 7-pt text is ~4.6 pt per character
        return not small and width >= (len(text) + 1) * span / chars

    row = {step_id: i for i, step_id in enumerate(order)}
    handles: dict[str, Any] = {}
    bars = _Bars()
    for step_id, kind, start, end, outcome in waits:
        look, name = _WAIT_LOOK[kind]
        st = STATUS_STYLE[look]
        stop = end if end is not None else t_end
        bars.add(row[step_id], start - t0, max(stop - start, min_w), height=0.22, color=st.fill,
                 edgecolor=st.stroke, linewidth=1.0, linestyle="--", zorder=2)
        note = f"{st.badge} {stop - start:.3g} s" + (f" {outcome}" if outcome else "")
        if fits(note, stop - start):
            ax.text(start - t0 + (stop - start) / 2, row[step_id] - 0.2, note, ha="center",
                    va="bottom", fontsize=7, color=MUTED_TEXT, zorder=4)
        handles.setdefault(f"wait:{kind}", Patch(facecolor=st.fill, edgecolor=st.stroke,
                                                 linestyle="--", label=name))
    for rec in state.attempts:
        comp = rec.kind == "compensation"
        look = (_COMPENSATION_LOOK if comp else _ATTEMPT_LOOK)[str(rec.status)]
        st = STATUS_STYLE[look]
        stop = rec.ended_at if rec.ended_at is not None else t_end
        width = max(stop - rec.started_at, min_w)
        y, left = row[rec.step_id], rec.started_at - t0
        if not comp and str(rec.tool or "").startswith("chain:"):  # a sub-chain: its span
            bars.add(y, left, width, height=0.5, color="none", edgecolor=st.stroke,
                     linewidth=1.2, linestyle="--", zorder=3)
            text = f"{KIND_SUBCHAIN} {rec.tool}"
            if fits(text, width):
                ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=7.5,
                        color=MUTED_TEXT, zorder=4)
            continue
        bars.add(y, left, width, height=0.62, color=st.fill, edgecolor=st.stroke,
                 linewidth=1.4, hatch="////" if comp else None, zorder=3)
        text = f"{st.badge} undo" if comp else f"{st.badge} #{rec.attempt}"
        if fits(text, width):
            ax.text(left + width / 2, y, text, ha="center", va="center", fontsize=7.5,
                    color=st.text, zorder=4)
        key = f"comp:{look}" if comp else f"attempt:{rec.status}"
        label = _COMPENSATION_NAMES[look] if comp else _OUTCOME_NAMES[str(rec.status)]
        handles.setdefault(key, Patch(facecolor=st.fill, edgecolor=st.stroke,
                                      hatch="////" if comp else None, label=label))
    bars.draw(ax)
    label_size = 8.5 if not small else 6.5
    ax.set_ylim(n - 0.4, -0.6)
    ax.set_yticks(range(n), labels=order, fontsize=label_size)
    ax.set_xlim(-span * 0.02, span * 1.02)
    ax.set_xlabel("seconds since the run started", fontsize=9, color=MUTED_TEXT)
    ax.grid(axis="x", color="#e3e3e3", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="x", labelsize=8.5, colors="#444444")
    ax.tick_params(axis="y", colors="#444444")
    ax.set_title(heading, loc="left", fontsize=11, color="#333333")
    captions = [STATUS_STYLE[str(state.steps[step_id].status)] if step_id in state.steps else None
                for step_id in order]
    at_right = ax.get_yaxis_transform()  # x in axes fraction, y in data
    for y, (step_id, cap) in enumerate(zip(order, captions, strict=True)):
        if cap is not None:
            ax.text(1.012, y, cap.caption, transform=at_right, ha="left", va="center",
                    gid=f"status:{step_id}",
                    fontsize=label_size - 0.5, color=cap.text, clip_on=False,
                    bbox=None if small else {"facecolor": cap.fill, "edgecolor": cap.stroke,
                                             "boxstyle": "round,pad=0.25", "linewidth": 1.0})
    char = label_size * 0.62 / 72  # DejaVu Sans: ~0.6 em per character, in inches
    left = 0.3 + max((len(s) for s in order), default=1) * char
    right_margin = 0.35 + max((len(c.caption) for c in captions if c), default=1) * char
    return [handles[k] for k in _LEGEND_ORDER if k in handles], (left, right_margin)


# ---------------------------------------------------------------------- schedules, what-if
class Schedule:
    """Who ran when, in seconds from the run's start: ``frame`` (step_id, tool, start_s,
    end_s, duration_s; one row per step that took a slot) and ``makespan`` (seconds)."""

    def __init__(self, frame: pd.DataFrame, label: str):
        self.frame = frame
        self.label = label
        self.makespan = float(frame["end_s"].max()) if len(frame) else 0.0

    def __repr__(self) -> str:
        return f"<Schedule {self.label}: {len(self.frame)} steps, makespan {self.makespan:.3f} s>"


def _durations(run: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Per step: seconds in call attempts (what holds a slot), and the first start."""
    took: dict[str, float] = {}
    first: dict[str, float] = {}
    for rec in run.state.attempts:
        if rec.kind != "call" or rec.ended_at is None or rec.tool is None:
            continue
        took[rec.step_id] = took.get(rec.step_id, 0.0) + (rec.ended_at - rec.started_at)
        first.setdefault(rec.step_id, rec.started_at)
    return took, first


def schedule_of(run: Any) -> Schedule:
    """The schedule a run really had (its call attempts, from the store's fold)."""
    took, first = _durations(run)
    t0 = run.state.started_at or min(first.values(), default=0.0)
    tools = {s.id: s.tool for s in run.chain.steps}
    rows = [{"step_id": sid, "tool": tools.get(sid, ""), "start_s": first[sid] - t0,
             "end_s": first[sid] - t0 + took[sid], "duration_s": took[sid]} for sid in first]
    frame = pd.DataFrame(rows, columns=["step_id", "tool", "start_s", "end_s", "duration_s"])
    frame = frame.sort_values(["start_s"], kind="stable").reset_index(drop=True)
    return Schedule(frame, f"run {run.run_id} ({run.state.priority})")


def whatif(run: Any, *, priority: str = "critical_path",
           max_concurrency: int | None = None) -> Schedule:
    """Replay a finished run's recorded call durations on the real scheduler in virtual time
    under another release ``priority`` (``declaration`` | ``critical_path``) and/or
    ``max_concurrency``: no tool runs, nothing is written. Returns the simulated schedule.

    Raises RunStateError when this process cannot compile the run (its tools are missing).
    """
    from chainlab.errors import RunStateError
    from chainlab.runtime.history.whatif import simulate

    compiled = run.compiled()
    if compiled is None:
        raise RunStateError(f"what-if of run {run.run_id!r} needs its tools: open it with a "
                            "runtime whose toolbox has them", run_id=run.run_id)
    graph, options = compiled
    took, _ = _durations(run)
    keys = {}
    for sid, node in graph.nodes.items():
        st = run.state.steps.get(sid)
        if node.tool is not None and node.tool.serial_key and st is not None and st.args:
            keys[sid] = node.tool.resolve_serial_key(st.args)
    concurrency = max_concurrency or (1 if options.mode == "sequential"
                                      else options.max_concurrency)
    slots = simulate(graph.nodes, graph.top, took, max_concurrency=concurrency,
                     priority=priority, pools=options.pools, keys=keys)
    tools = {sid: n.step.tool for sid, n in graph.nodes.items()}
    frame = pd.DataFrame(
        [{"step_id": s.step_id, "tool": tools[s.step_id], "start_s": s.start, "end_s": s.end,
          "duration_s": s.end - s.start} for s in slots if not graph.nodes[s.step_id].is_group],
        columns=["step_id", "tool", "start_s", "end_s", "duration_s"])
    return Schedule(frame, f"what-if {priority}, concurrency {concurrency}")


def gantt_compare(a: Any, b: Any, *, width: float = 10.0) -> Figure:
    """Two schedules (a :class:`Schedule`, or a run: its real schedule) on one time axis,
    one above the other, each with its makespan marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from chainlab.render.style import STATUS_STYLE

    scheds = [x if isinstance(x, Schedule) else schedule_of(x) for x in (a, b)]
    steps = list(dict.fromkeys([*scheds[0].frame["step_id"], *scheds[1].frame["step_id"]]))
    rows = max(len(steps), 1)
    fig = TimelineFigure(figsize=(width, 1.4 + 2 * (0.9 + 0.22 * rows)), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, sharex=True)
    colour = STATUS_STYLE["succeeded"].fill
    end = max(s.makespan for s in scheds) or 1.0
    for ax, sched in zip(axes, scheds, strict=True):
        pos = {sid: i for i, sid in enumerate(steps)}
        for row in sched.frame.itertuples():
            ax.barh(pos[row.step_id], max(row.duration_s, end / 400), left=row.start_s,
                    height=0.7, color=colour, edgecolor="#333333", linewidth=0.4)
        ax.axvline(sched.makespan, color="#b03a2e", linewidth=1.2, linestyle="--")
        ax.set_title(f"{sched.label} · makespan {sched.makespan:.3f} s", fontsize=9,
                     loc="left")
        ax.set_yticks(range(len(steps)), steps, fontsize=7)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    axes[1].set_xlabel("seconds from the run's start")
    axes[1].set_xlim(0, end * 1.03)
    fig.subplots_adjust(left=0.2, right=0.98, top=0.94, bottom=0.08, hspace=0.35)
    return fig


def estimates_frame(estimates: Iterable[Any]) -> pd.DataFrame:
    """Duration estimates (:class:`chainlab.runtime.history.estimates.Estimate`) as a frame."""
    cols = ["step_id", "tool", "median_s", "p90_s", "samples", "source"]
    return pd.DataFrame([{c: getattr(e, c) for c in cols} for e in estimates], columns=cols)



# ============================================================================ time travel
DIFF_COLUMNS = ["step_id", "status_a", "status_b", "attempts_a", "attempts_b", "same_output",
                "duration_a_s", "duration_b_s", "fork_b", "code_changed"]


def _step_calls(state: RunState) -> tuple[dict[str, float], dict[str, str | None]]:
    """Per step: total call time and the code of its last call."""
    took: dict[str, float] = {}
    code: dict[str, str | None] = {}
    for rec in state.attempts:
        if rec.kind != "call":
            continue
        took[rec.step_id] = took.get(rec.step_id, 0.0) + (rec.duration_s or 0.0)
        code[rec.step_id] = rec.code
    return took, code


def diff(run_a: Any, run_b: Any) -> pd.DataFrame:
    """Compare two runs (typically a run and its fork), one row per step (steps of ``run_a``
    in order, then those only ``run_b`` has): status_a/b, attempts_a/b (tool calls),
    same_output (both succeeded with equal outputs; NA when either has none), duration_a_s/
    b_s (time in tool calls), fork_b (``reuse`` | ``override`` when ``run_b`` copied the
    step instead of running it, else ``-``), code_changed (the tool code differs between the runs'
    last calls; NA when either did not call it). ``run_a``/``run_b`` are Run handles."""
    import json

    states = [run_a.state, run_b.state]
    ids = list(dict.fromkeys([*states[0].steps, *states[1].steps]))
    (took_a, code_a), (took_b, code_b) = (_step_calls(s) for s in states)
    for st in states[1].steps.values():  # a reused step carries the code that made it
        if st.reused and st.reused.get("code"):
            code_b.setdefault(st.step_id, st.reused["code"])
    for st in states[0].steps.values():
        if st.reused and st.reused.get("code"):
            code_a.setdefault(st.step_id, st.reused["code"])
    rows = []
    for step_id in ids:
        a, b = (s.steps.get(step_id) for s in states)
        both = a is not None and b is not None and str(a.status) == str(b.status) == "succeeded"
        same = (json.dumps(a.output, sort_keys=True) == json.dumps(b.output, sort_keys=True)
                if both and a is not None and b is not None else pd.NA)
        ca, cb = code_a.get(step_id), code_b.get(step_id)
        rows.append({
            "step_id": step_id,
            "status_a": str(a.status) if a is not None else None,
            "status_b": str(b.status) if b is not None else None,
            "attempts_a": a.attempts if a is not None else 0,
            "attempts_b": b.attempts if b is not None else 0,
            "same_output": same,
            "duration_a_s": took_a.get(step_id, 0.0),
            "duration_b_s": took_b.get(step_id, 0.0),
            "fork_b": ((b.reused or {}).get("decision") if b is not None else None) or "-",
            "code_changed": (ca != cb) if ca is not None and cb is not None else pd.NA,
        })
    frame = pd.DataFrame(rows, columns=DIFF_COLUMNS)
    for col in ("same_output", "code_changed"):
        frame[col] = frame[col].astype("boolean")
    return frame


def fork_plan_frame(plan: Any) -> pd.DataFrame:
    """A fork plan (:class:`chainlab.runtime.history.fork.ForkPlan`) as a frame: step, tool,
    parent (its status in the parent run), decision, reason."""
    return pd.DataFrame(plan.table(), columns=["step", "tool", "parent", "decision", "reason"])
