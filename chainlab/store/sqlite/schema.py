"""The SQLite schema as an append-only list of migrations (never edit a released one: add
a new one; :func:`migrate` applies what a file lacks and records it in ``schema_version``).

Tables ``runs`` and ``events``; ``attempts`` and ``step_runs`` are views over ``events``
that agree with the Python fold (``chainlab.events.fold.RunState``); ``drivers`` (heartbeats)
and ``requests`` (the decision mailbox) since migration 3; the views' SQL is in
:mod:`chainlab.store.sql_views` since migration 4; the queue's columns and tables
(:mod:`chainlab.store.sql_queue`) since migration 5.
"""

from __future__ import annotations

import contextlib
import sqlite3

from chainlab.errors import StoreError, StoreFileError
from chainlab.store.sql_experiments import experiments_schema
from chainlab.store.sql_queue import queue_schema
from chainlab.store.sql_views import view_sql

__all__ = ["MIGRATIONS", "migrate", "schema_version", "split_sql"]

_CALL_ENDS = ("'step_succeeded','step_failed','step_retry_scheduled','step_in_doubt',"
              "'step_timed_out','step_cancelled','step_ready'")

MIGRATIONS: list[str] = [
    # 1: runs and their event log; attempts and step states are views over the log
    f"""
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        chain_name TEXT NOT NULL,
        status TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        chain TEXT NOT NULL,
        chains TEXT NOT NULL DEFAULT '{{}}',
        context TEXT NOT NULL DEFAULT '{{}}',
        options TEXT NOT NULL DEFAULT '{{}}',
        meta TEXT NOT NULL DEFAULT '{{}}'
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE TABLE events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts REAL NOT NULL,
        epoch INTEGER NOT NULL,
        kind TEXT NOT NULL,
        step_id TEXT,
        attempt INTEGER,
        payload TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX events_step ON events(run_id, step_id, attempt, seq);
    CREATE VIEW attempts AS
    SELECT s.run_id, s.step_id, s.attempt,
           CASE s.kind WHEN 'step_started' THEN 'call' ELSE 'compensation' END AS kind,
           s.epoch, json_extract(s.payload, '$.tool') AS tool,
           s.ts AS started_at, e.ts AS ended_at,
           CASE WHEN e.kind IS NULL THEN 'running'
                WHEN e.kind IN ('step_succeeded', 'compensation_succeeded') THEN 'succeeded'
                WHEN e.kind = 'step_timed_out' THEN 'timed_out'
                WHEN e.kind = 'step_cancelled' THEN 'cancelled'
                WHEN e.kind = 'step_ready' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.reason') = 'interrupted' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.error_kind') = 'interrupted' THEN 'interrupted'
                WHEN json_extract(e.payload, '$.error_kind') = 'timeout' THEN 'timed_out'
                ELSE 'failed' END AS status,
           json_extract(e.payload, '$.error_kind') AS error_kind,
           json_extract(e.payload, '$.error') AS error,
           json_extract(s.payload, '$.idempotency_key') AS idempotency_key
    FROM events s
    LEFT JOIN events e ON e.run_id = s.run_id AND e.seq = (
        SELECT min(x.seq) FROM events x
        WHERE x.run_id = s.run_id AND x.step_id = s.step_id AND x.attempt = s.attempt
          AND x.seq > s.seq
          AND ((s.kind = 'step_started' AND x.kind IN ({_CALL_ENDS}))
            OR (s.kind = 'compensation_started'
                AND x.kind IN ('compensation_succeeded', 'compensation_failed'))))
    WHERE s.kind IN ('step_started', 'compensation_started');
    CREATE VIEW step_runs AS
    SELECT e.run_id, e.step_id,
           CASE e.kind
             WHEN 'step_ready' THEN 'ready' WHEN 'step_started' THEN 'running'
             WHEN 'step_succeeded' THEN 'succeeded' WHEN 'step_failed' THEN 'failed'
             WHEN 'step_retry_scheduled' THEN 'retry_wait'
             WHEN 'step_waiting_confirmation' THEN 'waiting_confirmation'
             WHEN 'step_approved' THEN 'ready' WHEN 'step_rejected' THEN 'rejected'
             WHEN 'step_skipped' THEN 'skipped' WHEN 'step_in_doubt' THEN 'in_doubt'
             WHEN 'step_cancelled' THEN 'cancelled'
             WHEN 'compensation_started' THEN 'compensating'
             WHEN 'compensation_succeeded' THEN 'compensated'
             WHEN 'compensation_failed' THEN
               CASE WHEN json_extract(e.payload, '$.will_retry') THEN 'compensating'
                    ELSE 'compensation_failed' END
           END AS status,
           e.seq AS last_seq, e.ts AS updated_at
    FROM events e
    WHERE e.step_id IS NOT NULL AND e.seq = (
        SELECT max(x.seq) FROM events x
        WHERE x.run_id = e.run_id AND x.step_id = e.step_id AND x.kind != 'step_timed_out');
    """,
    # 2: views computed with window functions over the primary key (run_id, seq), so a
    #    commit writes no secondary index (one commit per side-effecting step is the hot
    #    path); attempts: a call whose effect `reconcile` found after a crash is
    #    'interrupted' (as in RunState), plus the back-off delay after a failed attempt
    f"""
    DROP VIEW attempts;
    DROP VIEW step_runs;
    DROP INDEX events_step;
    CREATE VIEW attempts AS
    SELECT run_id, step_id, attempt, kind, epoch, tool, started_at, ended_at,
           CASE WHEN end_kind IS NULL THEN 'running'
                WHEN end_kind = 'step_succeeded' AND json_extract(end_payload, '$.reconciled')
                     THEN 'interrupted'
                WHEN end_kind IN ('step_succeeded', 'compensation_succeeded') THEN 'succeeded'
                WHEN end_kind = 'step_timed_out' THEN 'timed_out'
                WHEN end_kind = 'step_cancelled' THEN 'cancelled'
                WHEN end_kind = 'step_ready' THEN 'interrupted'
                WHEN json_extract(end_payload, '$.reason') = 'interrupted' THEN 'interrupted'
                WHEN json_extract(end_payload, '$.error_kind') = 'interrupted'
                     THEN 'interrupted'
                WHEN json_extract(end_payload, '$.error_kind') = 'timeout' THEN 'timed_out'
                ELSE 'failed' END AS status,
           json_extract(end_payload, '$.error_kind') AS error_kind,
           json_extract(end_payload, '$.error') AS error,
           idempotency_key,
           json_extract(end_payload, '$.delay_s') AS retry_delay_s
    FROM (
        SELECT run_id, step_id, attempt, kind AS start_kind,
               CASE WHEN kind = 'step_started' THEN 'call' ELSE 'compensation' END AS kind,
               epoch, json_extract(payload, '$.tool') AS tool, ts AS started_at,
               json_extract(payload, '$.idempotency_key') AS idempotency_key,
               lead(ts) OVER attempt_events AS ended_at,
               lead(kind) OVER attempt_events AS end_kind,
               lead(payload) OVER attempt_events AS end_payload
        FROM events
        WHERE attempt IS NOT NULL AND kind IN ('step_started', {_CALL_ENDS},
              'compensation_started', 'compensation_succeeded', 'compensation_failed')
        WINDOW attempt_events AS (
            PARTITION BY run_id, step_id, attempt, kind LIKE 'compensation%' ORDER BY seq))
    WHERE start_kind IN ('step_started', 'compensation_started');
    CREATE VIEW step_runs AS
    SELECT run_id, step_id,
           CASE kind
             WHEN 'step_ready' THEN 'ready' WHEN 'step_started' THEN 'running'
             WHEN 'step_succeeded' THEN 'succeeded' WHEN 'step_failed' THEN 'failed'
             WHEN 'step_retry_scheduled' THEN 'retry_wait'
             WHEN 'step_waiting_confirmation' THEN 'waiting_confirmation'
             WHEN 'step_approved' THEN 'ready' WHEN 'step_rejected' THEN 'rejected'
             WHEN 'step_skipped' THEN 'skipped' WHEN 'step_in_doubt' THEN 'in_doubt'
             WHEN 'step_cancelled' THEN 'cancelled'
             WHEN 'compensation_started' THEN 'compensating'
             WHEN 'compensation_succeeded' THEN 'compensated'
             WHEN 'compensation_failed' THEN
               CASE WHEN json_extract(payload, '$.will_retry') THEN 'compensating'
                    ELSE 'compensation_failed' END
           END AS status,
           seq AS last_seq, ts AS updated_at
    FROM (SELECT run_id, step_id, kind, payload, seq, ts,
                 row_number() OVER (PARTITION BY run_id, step_id ORDER BY seq DESC) AS latest
          FROM events WHERE step_id IS NOT NULL AND kind != 'step_timed_out')
    WHERE latest = 1;
    """,
    # 3: driver liveness (one heartbeat row per driven run) and the decision mailbox
    #    (requests a person sends to the process driving a run; the partial index keeps the
    #    driver's poll for unanswered requests cheap)
    """
    CREATE TABLE drivers (
        run_id TEXT PRIMARY KEY,
        driver_id TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        beat_at REAL NOT NULL
    );
    CREATE TABLE requests (
        request_id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        action TEXT NOT NULL,
        payload TEXT NOT NULL,
        requested_by TEXT,
        created_at REAL NOT NULL,
        expires_at REAL,
        outcome TEXT,
        message TEXT,
        answered_at REAL,
        answered_epoch INTEGER
    );
    CREATE INDEX requests_pending ON requests(run_id, request_id) WHERE outcome IS NULL;
    """,
    # 4: step_runs reads only the events that change a step's status (a step_reused fork
    #    step is 'succeeded'; a later fault_injected, write_refused or step_call_returned
    #    left it NULL); both views now come from chainlab.store.sql_views, shared with PostgreSQL
    "DROP VIEW attempts; DROP VIEW step_runs;" + view_sql("sqlite"),
    # 5: steps_added (DESIGN §17): an agent's model turn that asked for calls ends there (its
    #    attempt succeeded) and a step that grew is running
    "DROP VIEW attempts; DROP VIEW step_runs;" + view_sql("sqlite"),
    # 6: the queue a worker fleet drains (DESIGN §19): queue and concurrency key columns,
    #    idempotency keys, queue limits and the registered workers (chainlab.store.sql_queue)
    queue_schema("sqlite"),
    # 7: experiments (DESIGN §22): many runs replayed under a change, their record
    #    (chainlab.store.sql_experiments); their runs are the runs whose meta names them
    experiments_schema("sqlite"),
]


def schema_version(conn: sqlite3.Connection) -> int:
    """How far the database of ``conn`` is migrated (0: not a chainlab database yet)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                    "name = 'schema_version'").fetchone() is None:
        return 0
    return int(conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0)


def migrate(conn: sqlite3.Connection, path: str, *, readonly: bool = False) -> None:
    """Apply the migrations the file lacks. A current file is only read (no write lock, so
    opening never waits behind another process's write transaction).

    Raises StoreError (a newer schema), StoreFileError (``readonly`` and an older schema).
    """
    current = schema_version(conn)
    if current == len(MIGRATIONS):
        return
    _check(current, path, readonly)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        current = schema_version(conn)  # another process may have migrated meanwhile
        _check(current, path, readonly)
        for version in range(current + 1, len(MIGRATIONS) + 1):
            for statement in split_sql(MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # a failed COMMIT already rolled back
            conn.execute("ROLLBACK")
        raise


def _check(current: int, path: str, readonly: bool) -> None:
    if current > len(MIGRATIONS):
        raise StoreError(f"{path} has schema version {current}, newer than this chainlab "
                         f"understands ({len(MIGRATIONS)}); upgrade chainlab")
    if readonly and current < len(MIGRATIONS):
        raise StoreFileError(
            path, "old_schema", f"{path!r} has schema version {current}, older than this "
            f"chainlab's ({len(MIGRATIONS)}), and a read-only open cannot upgrade it",
            "run a command that writes to it first (`chainlab resume`, or SQLiteStore(path) "
            "in Python) to upgrade it")


def split_sql(script: str) -> list[str]:
    """Split a migration into statements (our migrations have no ';' inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
