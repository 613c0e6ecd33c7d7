"""An experiment's result (DESIGN §22): :class:`Experiment`, its rows read from the store
(:mod:`.experiment_rows` compares each recorded run with its replay), its table, picture and
diffs. Made by :mod:`chainlab.runtime.experiments`; the table and the picture are drawn by
:mod:`chainlab.timeline.experiments` (loaded when asked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chainlab.store.experiments import ExperimentRecord

__all__ = ["Experiment"]


class Experiment:
    """An experiment's result, read from the store: one row per recorded run (``rows()``,
    ``table()``), a readable diff per run (``diff``), a picture (``plot``)."""

    def __init__(self, record: ExperimentRecord, rows: list[dict[str, Any]],
                 diff_of: Callable[[str], str]):
        self.record = record
        self._rows = rows
        self._diff_of = diff_of  # a run's diff, read from the store when asked

    @property
    def experiment_id(self) -> str:
        """Its id (``runtime.experiment_result(id)`` reads it back)."""
        return self.record.experiment_id

    @property
    def name(self) -> str:
        """Its name (its id unless one was given)."""
        return self.record.name

    def rows(self) -> list[dict[str, Any]]:
        """One dict per recorded run: ``run``, ``new_run``, ``outcome`` (same, changed,
        needs_live_effect, waiting, unfinished, not_started), ``changed``, statuses and
        outputs before and after, ``calls_added``, ``calls_removed``, ``args_changed``,
        ``needs_live_effect`` (the calls not made), ``effects_made`` (side effects the
        replay made: only approved ``live=`` calls), tokens, cost and makespan before and
        after, and one ``score:NAME`` per scorer (its value, or ``error: ...``)."""
        return [dict(r) for r in self._rows]

    def table(self) -> Any:
        """The rows as a pandas DataFrame (needs ``chainlab[jupyter]``)."""
        from chainlab.timeline.experiments import experiment_frame

        return experiment_frame(self._rows)

    def plot(self) -> Any:
        """A matplotlib figure of what changed across the runs: each run's outcome, and its
        tokens before and after (needs ``chainlab[jupyter]``)."""
        from chainlab.timeline.experiments import plot_experiment

        return plot_experiment(self._rows, title=self.name)

    def diff(self, run_id: str) -> str:
        """The readable diff of one run (its recorded id or its replay's): status, output,
        each step whose args, output or status changed, the model's answers. Raises
        KeyError naming the runs it has."""
        for row in self._rows:
            if run_id in (row["run"], row["new_run"]):
                return self._diff_of(row["run"])
        raise KeyError(f"run {run_id!r} is not in experiment {self.experiment_id!r}; its "
                       f"runs: {', '.join(r['run'] for r in self._rows)}")

    @property
    def needs_live_effect(self) -> list[str]:
        """Every call the replays stopped at (``run: step=tool(args)``), not made."""
        return [f"{r['run']}: {c}" for r in self._rows for c in r["needs_live_effect"]]

    def __repr__(self) -> str:
        outcomes: dict[str, int] = {}
        for row in self._rows:
            outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
        said = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
        return f"<Experiment {self.experiment_id!r} {self.name!r}: {said}>"
