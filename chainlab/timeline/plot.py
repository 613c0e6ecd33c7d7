"""A run's Gantt chart: one row per step, a bar per attempt, the waits between them, each
step's final status; epochs, faults and fenced writers marked by :mod:`chainlab.timeline.marks`.

Plotting library: **matplotlib**, on purpose. A run timeline is a static picture that
must survive ``nbconvert`` to HTML, GitHub's notebook viewer and nbval, and render in CI with
no display: matplotlib renders headless to PNG with its Agg rasteriser and needs no browser,
no JavaScript and no kernel extension (plotly/bokeh/altair need a JS front end for their
default output and extra packages to export a PNG). The chart is drawn on a
``matplotlib.figure.Figure`` directly (no ``pyplot``): nothing touches the user's backend or
global figure state, it is safe in worker threads, and there is no double display in
Jupyter; the returned figure shows itself as PNG (``_repr_png_``). This module and
:mod:`chainlab.render` share one palette (:data:`chainlab.render.STATUS_STYLE`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from chainlab.events import Event
from chainlab.events.fold import RunState
from chainlab.timeline.frames import load, wait_spans
from chainlab.timeline.marks import mark_run

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from chainlab.store.base import RunRecord, Store

__all__ = ["DARK_BG", "DARK_FG", "DARK_LINE", "KIND_SUBCHAIN", "TimelineFigure", "plot_timeline"]


# which of the two pictures shows: JupyterLab marks its theme on <body>; elsewhere light.
# !important: JupyterLab's `.jp-RenderedHTMLCommon > img {display: block}` is more specific
# than these rules, and without chainlab's stylesheet on the page (the plain Python API, then
# run.plot_timeline()) the light theme showed both pictures (issue 29)
_THEME_CSS = (".cl-theme-dark-only{display:none !important}"
              '[data-jp-theme-light="false"] .cl-theme-dark-only{display:inline !important}'
              '[data-jp-theme-light="false"] .cl-theme-light-only{display:none !important}')
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
    record, events, state = load(store, run_id)
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
    handles, margins = _draw(ax, state, wait_spans(events), order, events, heading)
    # epochs, injected faults, fenced writers
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
    """Step ids in declaration order, sub-chain steps right after their parent, a for_each
    step's instances right after it, in item order (each one's sub-chain steps after it)."""
    out: list[str] = []

    def walk(chain: dict[str, Any], prefix: str, seen: tuple[str, ...]) -> None:
        for step in chain.get("steps", []):
            step_id = prefix + step["id"]
            out.append(step_id)
            tool = str(step.get("tool", ""))
            name = tool[len("chain:"):].strip() if tool.startswith("chain:") else None
            below = name if name and name in record.chains and name not in seen else None
            grown = state.children.get(step_id)
            if grown is not None:  # a for_each step: its instances, grouped under it
                for child in grown:
                    out.append(child)
                    if below is not None:
                        walk(record.chains[below], child + "/", (*seen, below))
            elif below is not None:
                walk(record.chains[below], step_id + "/", (*seen, below))

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
              "in_doubt": ("in_doubt", "in doubt"),
              "job": ("running", "waiting for a remote job (no slot)")}
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
        bars.add(row[step_id], start - t0, max(stop - start, min_w),
                 height=0.4 if kind == "job" else 0.22, color=st.fill,
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
        for w_step, w_kind, w_start, _, _ in waits:  # a job's attempt: the submit, then
            if w_kind == "job" and w_step == rec.step_id and rec.started_at <= w_start < stop:
                stop = w_start  # the wait is drawn as the job's wait segment
                break
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
