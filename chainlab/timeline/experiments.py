"""An experiment (DESIGN §22) as data and a picture: its rows as a pandas DataFrame
(:func:`experiment_frame`, one row per recorded run) and what changed across the runs
(:func:`plot_experiment`: each run's outcome, its tokens before and after). The rows come
from :class:`chainlab.runtime.experiments.Experiment`, read from the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from chainlab.timeline.plot import TimelineFigure

__all__ = ["EXPERIMENT_COLUMNS", "OUTCOME_COLORS", "experiment_frame", "plot_experiment"]

#: the frame's columns, in order (then one ``score:NAME`` per scorer)
EXPERIMENT_COLUMNS = [
    "run", "new_run", "outcome", "changed", "status_before", "status_after",
    "output_before", "output_after", "calls_added", "calls_removed", "args_changed",
    "needs_live_effect", "effects_made", "tokens_before", "tokens_after", "cost_before",
    "cost_after", "makespan_before", "makespan_after"]

#: the colour of each outcome in the picture (the run widget's status palette)
OUTCOME_COLORS = {
    "same": "#9e9e9e", "changed": "#1e88e5", "needs_live_effect": "#fb8c00",
    "waiting": "#8e24aa", "unfinished": "#6d4c41", "not_started": "#e0e0e0"}


def experiment_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The experiment's rows as a frame (columns :data:`EXPERIMENT_COLUMNS`, then the
    scorers'); lists (calls added, removed...) are shown as ``; ``-joined text."""
    scores = sorted({k for r in rows for k in r if k.startswith("score:")})
    data = [{k: ("; ".join(v) if isinstance(v, list) else v) for k, v in r.items()}
            for r in rows]
    return pd.DataFrame(data, columns=[*EXPERIMENT_COLUMNS, *scores])


def plot_experiment(rows: Sequence[dict[str, Any]], *, title: str = "experiment",
                    width: float = 9.0) -> TimelineFigure:
    """One bar pair per recorded run, tokens before (light) and after (its outcome's
    colour); the outcome written beside each run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Patch

    n = max(len(rows), 1)
    fig = TimelineFigure(figsize=(width, 1.2 + 0.45 * n), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    labels = [str(r["run"]) for r in rows]
    before = [float(r.get("tokens_before") or 0) for r in rows]
    after = [float(r.get("tokens_after") or 0) for r in rows]
    ys = list(range(len(rows)))
    ax.barh([y + 0.2 for y in ys], before, height=0.38, color="#cfd8dc", label="before")
    ax.barh([y - 0.2 for y in ys], after, height=0.38,
            color=[OUTCOME_COLORS.get(str(r["outcome"]), "#000000") for r in rows])
    top = max([*before, *after, 1.0])
    for y, r in zip(ys, rows, strict=True):
        ax.text(top * 1.02, y, str(r["outcome"]), va="center", fontsize=8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel("tokens (light: recorded run; coloured: replay, by outcome)")
    ax.set_title(title, fontsize=10)
    seen = dict.fromkeys(str(r["outcome"]) for r in rows)
    ax.legend(handles=[Patch(color=OUTCOME_COLORS.get(o, "#000000"), label=o) for o in seen],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.subplots_adjust(left=0.24, right=0.8, top=0.9, bottom=0.12 + 0.2 / n)
    return fig
