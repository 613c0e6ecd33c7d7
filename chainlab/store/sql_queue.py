"""The queue (:mod:`chainlab.store.queue`) on SQL: the migration both SQL stores apply, the
statements, and :class:`SqlQueue`, the one implementation of the
:class:`~chainlab.store.queue.Queue` protocol that SQLiteStore and PostgresStore share; each
provides a write transaction as a :class:`Tx` (``_queue_tx``) and a read (``_queue_rows``).

The claim (:func:`claim_in`) reads and writes only inside that transaction: on PostgreSQL
the candidate row is taken ``FOR UPDATE SKIP LOCKED`` (no claimant waits for another's row)
and a limit or a key is counted again under an advisory transaction lock of that queue or
key; on SQLite the transaction is ``BEGIN IMMEDIATE``, one writer at a time.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from chainlab.events.status import RunStatus
from chainlab.store.base import RunRecord
from chainlab.store.queue import (
    IN_PROGRESS,
    KEY_HELD,
    Claim,
    QueueDepth,
    WorkerInfo,
    check_queue_limit,
    check_queue_name,
    depths_from_rows,
)

__all__ = ["WORKER_COLUMNS", "SqlQueue", "Tx", "claim_in", "claim_sql", "queue_schema"]

_IN_PROGRESS = ", ".join(f"'{s}'" for s in IN_PROGRESS)
_KEY_HELD = ", ".join(f"'{s}'" for s in KEY_HELD)


def queue_schema(dialect: str) -> str:
    """The migration that adds the queue to a SQL store (``"postgres"`` or ``"sqlite"``):
    the runs' ``queue`` and ``concurrency_key`` columns (and the indexes the claim reads),
    ``run_keys`` (idempotency keys, each naming one run), ``queues`` (limits) and
    ``workers`` (who serves which queues, beating when)."""
    real = "DOUBLE PRECISION" if dialect == "postgres" else "REAL"
    return f"""
    ALTER TABLE runs ADD COLUMN queue TEXT;
    ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
    CREATE INDEX runs_queue ON runs (queue, status, created_at, run_id)
        WHERE queue IS NOT NULL;
    CREATE INDEX runs_key_held ON runs (concurrency_key)
        WHERE concurrency_key IS NOT NULL AND status IN ({_KEY_HELD});
    CREATE INDEX drivers_driver ON drivers (driver_id);
    CREATE TABLE run_keys (
        idempotency_key TEXT PRIMARY KEY,
        run_id TEXT NOT NULL
    );
    CREATE TABLE queues (
        queue TEXT PRIMARY KEY,
        max_running INTEGER
    );
    CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        queues TEXT NOT NULL,
        concurrency INTEGER NOT NULL,
        started_at {real} NOT NULL,
        beat_at {real} NOT NULL,
        state TEXT NOT NULL,
        note TEXT NOT NULL DEFAULT ''
    );
    """


#: the columns of ``workers`` as :class:`~chainlab.store.queue.WorkerInfo` reads them
WORKER_COLUMNS = ("worker_id, name, host, pid, queues, concurrency, started_at, beat_at, "
                  "state, note")


class Tx(Protocol):
    """One open write transaction of a SQL store: statements use ``%s`` placeholders (the
    SQLite store turns them into ``?``)."""

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def lock(self, name: str) -> None:
        """Serialise with every other transaction that locks ``name`` until this one ends
        (PostgreSQL: an advisory transaction lock; SQLite: nothing, it is serialised)."""

    def record(self, run_id: str) -> RunRecord: ...

    def put_driver(self, run_id: str, worker: WorkerInfo, epoch: int) -> None: ...


def claim_sql(dialect: str) -> dict[str, str]:
    """The claim's statements in ``dialect`` (``"postgres"`` or ``"sqlite"``)."""
    pg = dialect == "postgres"
    skip = "r.run_id <> ALL(%s)" if pg else "r.run_id NOT IN (SELECT value FROM json_each(%s))"
    lock = " FOR UPDATE OF r SKIP LOCKED" if pg else ""
    return {
        # a lapsed driver's run, or a suspended one with a decision waiting: oldest first
        "moved": f"""
            SELECT r.run_id, r.status FROM runs r
            LEFT JOIN drivers d ON d.run_id = r.run_id
            WHERE r.queue = %s AND r.status IN ({_IN_PROGRESS}, 'suspended') AND {skip}
              AND (d.run_id IS NULL OR d.epoch <> r.epoch OR d.beat_at < %s)
              AND (r.status <> 'suspended' OR EXISTS (SELECT 1 FROM requests q
                   WHERE q.run_id = r.run_id AND q.outcome IS NULL))
            ORDER BY r.created_at, r.run_id LIMIT 1{lock}""",
        # the oldest queued run whose key is free (counted again under the key's lock)
        "queued": f"""
            SELECT r.run_id, r.status FROM runs r
            WHERE r.queue = %s AND r.status = 'queued' AND {skip}
              AND (r.concurrency_key IS NULL OR NOT EXISTS (SELECT 1 FROM runs x
                   WHERE x.concurrency_key = r.concurrency_key AND x.status IN ({_KEY_HELD})))
            ORDER BY r.created_at, r.run_id LIMIT 1{lock}""",
        "limit": "SELECT max_running FROM queues WHERE queue = %s",
        "busy": f"SELECT count(*) FROM runs WHERE queue = %s AND status IN ({_IN_PROGRESS}) "
                "AND run_id <> %s",
        "key_busy": f"SELECT 1 FROM runs WHERE concurrency_key = %s AND status IN "
                    f"({_KEY_HELD}) AND run_id <> %s LIMIT 1",
        "claim": "UPDATE runs SET status = %s, epoch = epoch + 1, updated_at = %s "
                 "WHERE run_id = %s",
    }


def claim_in(tx: Tx, sql: dict[str, str], worker: WorkerInfo, queue: str, *,
             stale_after_s: float, skip: Collection[str],
             bind: Callable[[list[str]], Any]) -> Claim | None:
    """The claim (:mod:`chainlab.store.queue`) inside the caller's transaction; ``bind``
    turns a list of run ids into the dialect's parameter (a list; JSON text)."""
    now = time.time()
    avoid = sorted(skip)
    moved = tx.one(sql["moved"], (queue, bind(avoid), now - stale_after_s))
    if moved is not None and (moved[1] != RunStatus.SUSPENDED
                              or _slot_free(tx, sql, queue, moved[0])):
        return _take(tx, sql, worker, moved[0], moved[1], now)
    for _ in range(32):  # each pass skips one queued run whose key turned out to be busy
        row = tx.one(sql["queued"], (queue, bind(avoid)))
        if row is None or not _slot_free(tx, sql, queue, row[0]):
            return None
        key = tx.record(row[0]).concurrency_key
        if key is not None:
            tx.lock(f"key:{key}")
            if tx.one(sql["key_busy"], (key, row[0])) is not None:
                avoid.append(row[0])
                continue
        return _take(tx, sql, worker, row[0], row[1], now)
    return None


def _slot_free(tx: Tx, sql: dict[str, str], queue: str, run_id: str) -> bool:
    """Whether ``queue``'s fleet-wide limit leaves a slot for ``run_id`` (counted under the
    queue's lock, so two claimants never both take the last slot)."""
    row = tx.one(sql["limit"], (queue,))
    if row is None or row[0] is None:
        return True
    tx.lock(f"queue:{queue}")
    busy = tx.one(sql["busy"], (queue, run_id))
    return int(busy[0] if busy else 0) < int(row[0])


def _take(tx: Tx, sql: dict[str, str], worker: WorkerInfo, run_id: str, status: str,
          now: float) -> Claim:
    record = tx.record(run_id)
    kind = {RunStatus.QUEUED: "start", RunStatus.SUSPENDED: "decided"}.get(
        RunStatus(status), "takeover")
    # a start and a decided run take a slot now (the next claim counts it); a takeover keeps
    # the status its old driver left (that run never gave its slot back)
    new_status = status if kind == "takeover" else RunStatus.RUNNING.value
    tx.run(sql["claim"], (new_status, now, run_id))
    tx.put_driver(run_id, worker, record.epoch + 1)
    return Claim(record, record.epoch + 1, kind)


_FLEET = {
    "depths": f"SELECT queue, status, count(*) FROM runs WHERE queue IS NOT NULL AND "
              f"status IN ('queued', 'suspended', {_IN_PROGRESS}) GROUP BY queue, status",
    "limits": "SELECT queue, max_running FROM queues",
    "set_limit": "INSERT INTO queues (queue, max_running) VALUES (%s, %s) ON CONFLICT "
                 "(queue) DO UPDATE SET max_running = excluded.max_running",
    "drop_limit": "DELETE FROM queues WHERE queue = %s",
    "beat": f"INSERT INTO workers ({WORKER_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
            "ON CONFLICT (worker_id) DO UPDATE SET beat_at = excluded.beat_at, "
            "state = excluded.state, note = excluded.note, queues = excluded.queues, "
            "concurrency = excluded.concurrency",
    "forget_drivers": "DELETE FROM drivers WHERE driver_id = %s",
    "forget": "DELETE FROM workers WHERE worker_id = %s",
    "workers": f"SELECT {WORKER_COLUMNS} FROM workers ORDER BY name, started_at",
    "claimed": "SELECT d.driver_id, d.run_id FROM drivers d JOIN runs r ON r.run_id = "
               "d.run_id AND r.epoch = d.epoch JOIN workers w ON w.worker_id = d.driver_id "
               "ORDER BY d.run_id",
    "release": "UPDATE runs SET status = %s WHERE run_id = %s AND epoch = %s",
    "release_driver": "DELETE FROM drivers WHERE run_id = %s AND driver_id = %s",
}


class SqlQueue:
    """The :class:`~chainlab.store.queue.Queue` of a SQL store, over its ``_queue_tx()``
    (a write transaction, as a :class:`Tx`) and ``_queue_rows(sql, params)`` (a read)."""

    _queue_dialect: str  # "postgres" or "sqlite"

    def _queue_tx(self) -> contextlib.AbstractContextManager[Tx]:
        raise NotImplementedError

    def _queue_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def claim_next(self, worker: WorkerInfo, queue: str, *, stale_after_s: float,
                   skip: Collection[str] = ()) -> Claim | None:
        check_queue_name(queue)
        pg = self._queue_dialect == "postgres"
        bind: Callable[[list[str]], Any] = (lambda ids: ids) if pg else json.dumps
        with self._queue_tx() as tx:
            return claim_in(tx, _claim_sql(self._queue_dialect), worker, queue,
                            stale_after_s=stale_after_s, skip=skip, bind=bind)

    def release_claim(self, run_id: str, epoch: int, status: str, worker_id: str) -> bool:
        with self._queue_tx() as tx:
            row = tx.one("SELECT epoch FROM runs WHERE run_id = %s", (run_id,))
            if row is None or int(row[0]) != epoch:
                return False
            tx.run(_FLEET["release"], (status, run_id, epoch))
            tx.run(_FLEET["release_driver"], (run_id, worker_id))
            return True

    def set_queue_limit(self, queue: str, limit: int | None) -> None:
        check_queue_name(queue)
        check_queue_limit(limit)
        with self._queue_tx() as tx:
            if limit is None:
                tx.run(_FLEET["drop_limit"], (queue,))
            else:
                tx.run(_FLEET["set_limit"], (queue, limit))

    def queue_depths(self) -> list[QueueDepth]:
        return depths_from_rows(self._queue_rows(_FLEET["depths"]),
                                self._queue_rows(_FLEET["limits"]))

    def beat_worker(self, worker: WorkerInfo) -> None:
        now = time.time()
        row = (worker.worker_id, worker.name, worker.host, worker.pid,
               json.dumps(list(worker.queues)), worker.concurrency,
               worker.started_at or now, now, worker.state, worker.note)
        with self._queue_tx() as tx:
            tx.run(_FLEET["beat"], row)

    def forget_worker(self, worker_id: str) -> None:
        with self._queue_tx() as tx:
            tx.run(_FLEET["forget_drivers"], (worker_id,))
            tx.run(_FLEET["forget"], (worker_id,))

    def list_workers(self) -> list[WorkerInfo]:
        claimed: dict[str, list[str]] = {}
        for worker_id, run_id in self._queue_rows(_FLEET["claimed"]):
            claimed.setdefault(worker_id, []).append(run_id)
        return [WorkerInfo(r[0], r[1], r[2], int(r[3]), tuple(json.loads(r[4])), int(r[5]),
                           float(r[6]), float(r[7]), r[8], r[9],
                           tuple(claimed.get(r[0], ())))
                for r in self._queue_rows(_FLEET["workers"])]


_SQL: dict[str, dict[str, str]] = {}


def _claim_sql(dialect: str) -> dict[str, str]:
    if dialect not in _SQL:
        _SQL[dialect] = claim_sql(dialect)
    return _SQL[dialect]
