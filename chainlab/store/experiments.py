"""Experiments in a store (DESIGN §22): the :class:`ExperimentRecord` an experiment keeps, the
:class:`Experiments` protocol every store implements (memory, SQLite, PostgreSQL: one
contract suite, :mod:`chainlab.testing.store_contract`), and how its runs are marked.

An experiment's replays are ordinary runs whose meta names the experiment
(:data:`EXPERIMENT_META`); ``list_runs`` keeps them out of the ordinary run list unless
asked for one experiment's runs, and ``delete_experiment`` deletes them with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["EXPERIMENT_META", "ExperimentRecord", "Experiments"]

#: the key of a run's meta that names the experiment it is a replay of
EXPERIMENT_META = "experiment"


@dataclass(frozen=True, slots=True)
class ExperimentRecord:
    """One experiment as stored: its id, name, when it was made, and its ``data`` (JSON:
    the recorded runs, the change described, the tools listed live, the scorers' values by
    run, its status)."""

    experiment_id: str
    name: str
    created_at: float
    data: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Experiments(Protocol):
    """What a store keeps of experiments."""

    def save_experiment(self, record: ExperimentRecord) -> None:
        """Store ``record`` (a new one, or a newer version of the same id)."""

    def get_experiment(self, experiment_id: str) -> ExperimentRecord:
        """Raises ExperimentNotFoundError (naming the ids it has)."""

    def list_experiments(self) -> list[ExperimentRecord]:
        """Every experiment, newest first."""

    def delete_experiment(self, experiment_id: str) -> list[str]:
        """Delete the experiment and its runs (their logs, drivers, requests) in one
        transaction; returns the deleted run ids. Raises ExperimentNotFoundError."""
