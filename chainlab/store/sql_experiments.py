"""Experiments (:mod:`chainlab.store.experiments`) on SQL: the migration both SQL stores
apply and :class:`SqlExperiments`, the one implementation SQLiteStore and PostgresStore share,
over the same write transaction (``_queue_tx``, a :class:`~chainlab.store.sql_queue.Tx`) and
read (``_queue_rows``) as their queue."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from chainlab._store_errors import ExperimentNotFoundError
from chainlab.store.experiments import EXPERIMENT_META, ExperimentRecord
from chainlab.store.sql_queue import Tx

__all__ = ["SqlExperiments", "experiments_schema", "listing", "ordinary_runs", "runs_of"]

#: the tables that hold a run's rows (its record last)
_RUN_TABLES = ("events", "drivers", "requests", "run_keys", "runs")


def experiments_schema(dialect: str) -> str:
    """The migration that adds ``experiments`` to a SQL store (``"postgres"`` or
    ``"sqlite"``)."""
    real = "DOUBLE PRECISION" if dialect == "postgres" else "REAL"
    return f"""
    CREATE TABLE experiments (
        experiment_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at {real} NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX experiments_created ON experiments (created_at);
    """


def _meta_key(dialect: str) -> str:
    if dialect == "postgres":
        return f"(runs.meta::jsonb ->> '{EXPERIMENT_META}')"
    return f"json_extract(runs.meta, '$.{EXPERIMENT_META}')"


def ordinary_runs(dialect: str) -> str:
    """The WHERE clause of an ordinary run list: no experiment's replays."""
    return f" WHERE {_meta_key(dialect)} IS NULL"


def runs_of(dialect: str) -> str:
    """The WHERE clause of one experiment's runs (one parameter: its id)."""
    return f" WHERE {_meta_key(dialect)} = %s"


class SqlExperiments:
    """``save/get/list/delete_experiment`` of a SQL store (see
    :class:`chainlab.store.experiments.Experiments`)."""

    _queue_dialect: str

    def _queue_tx(self) -> contextlib.AbstractContextManager[Tx]:  # pragma: no cover
        raise NotImplementedError

    def _queue_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError  # pragma: no cover

    def save_experiment(self, record: ExperimentRecord) -> None:
        """See :meth:`chainlab.store.experiments.Experiments.save_experiment`."""
        with self._queue_tx() as tx:
            tx.run("DELETE FROM experiments WHERE experiment_id = %s", (record.experiment_id,))
            tx.run("INSERT INTO experiments (experiment_id, name, created_at, data) "
                   "VALUES (%s, %s, %s, %s)",
                   (record.experiment_id, record.name, record.created_at,
                    json.dumps(record.data, separators=(",", ":"))))

    def get_experiment(self, experiment_id: str) -> ExperimentRecord:
        """See :meth:`chainlab.store.experiments.Experiments.get_experiment`."""
        rows = self._queue_rows("SELECT experiment_id, name, created_at, data FROM "
                                "experiments WHERE experiment_id = %s", (experiment_id,))
        if not rows:
            raise ExperimentNotFoundError(experiment_id, [r.experiment_id for r in
                                                          self.list_experiments()])
        return _record(rows[0])

    def list_experiments(self) -> list[ExperimentRecord]:
        """See :meth:`chainlab.store.experiments.Experiments.list_experiments`."""
        return [_record(r) for r in self._queue_rows(
            "SELECT experiment_id, name, created_at, data FROM experiments "
            "ORDER BY created_at DESC, experiment_id DESC")]

    def delete_experiment(self, experiment_id: str) -> list[str]:
        """See :meth:`chainlab.store.experiments.Experiments.delete_experiment`."""
        self.get_experiment(experiment_id)  # (raises naming the known ones)
        runs = [r[0] for r in self._queue_rows(
            "SELECT runs.run_id FROM runs" + runs_of(self._queue_dialect), (experiment_id,))]
        with self._queue_tx() as tx:
            for run_id in runs:
                for table in _RUN_TABLES:
                    tx.run(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))
            tx.run("DELETE FROM experiments WHERE experiment_id = %s", (experiment_id,))
        return runs


def _record(row: Sequence[Any]) -> ExperimentRecord:
    return ExperimentRecord(str(row[0]), str(row[1]), float(row[2]), json.loads(row[3]))


def listing(dialect: str, experiment: str | None) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause and parameters of ``list_runs``: the ordinary runs, or (``experiment``)
    that experiment's runs."""
    if experiment is None:
        return ordinary_runs(dialect), ()
    return runs_of(dialect), (experiment,)
