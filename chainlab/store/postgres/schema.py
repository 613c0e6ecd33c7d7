"""The PostgreSQL schema as an append-only list of migrations (never edit a released one: add
a new one; :func:`migrate` applies what a database lacks and records it in
``chainlab_schema_version``), as ``sqlite_schema`` does for SQLite files.

Tables ``runs`` and ``events`` (since migration 2 ``drivers`` and ``requests``, since 4 the
queue's ``run_keys``, ``queues`` and ``workers``) in the
connection's schema (``search_path``; give each deployment its own database or schema).
Payloads and records are JSON text, byte for byte what the SQLite store keeps (``jsonb``
would re-order keys and refuse ``\\u0000``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.store.sql_experiments import experiments_schema
from chainlab.store.sql_queue import queue_schema
from chainlab.store.sql_views import view_sql

if TYPE_CHECKING:  # only for type hints: importing this module never imports psycopg
    import psycopg

__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "migrate", "schema_version"]

#: key of the advisory lock that serialises migrations of one database across processes
MIGRATION_LOCK = 0x636861696E6C6162 & 0x7FFFFFFFFFFFFFFF  # "chainlab"

MIGRATIONS: list[str] = [
    # 1: runs and their event log (the source of truth)
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        chain_name TEXT NOT NULL,
        status TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        chain TEXT NOT NULL,
        chains TEXT NOT NULL DEFAULT '{}',
        context TEXT NOT NULL DEFAULT '{}',
        options TEXT NOT NULL DEFAULT '{}',
        meta TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX runs_created ON runs (created_at);
    CREATE TABLE events (
        run_id TEXT NOT NULL REFERENCES runs (run_id),
        seq BIGINT NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        epoch BIGINT NOT NULL,
        kind TEXT NOT NULL,
        step_id TEXT,
        attempt INTEGER,
        payload TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    # 2: driver liveness (one heartbeat row per driven run) and the decision mailbox
    #    (requests a person sends to the process driving a run; the partial index keeps the
    #    driver's read of unanswered requests cheap)
    """
    CREATE TABLE drivers (
        run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
        driver_id TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        epoch BIGINT NOT NULL,
        beat_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE requests (
        request_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (run_id),
        step_id TEXT NOT NULL,
        action TEXT NOT NULL,
        payload TEXT NOT NULL,
        requested_by TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        outcome TEXT,
        message TEXT,
        answered_at DOUBLE PRECISION,
        answered_epoch BIGINT
    );
    CREATE INDEX requests_pending ON requests (run_id, request_id) WHERE outcome IS NULL;
    """,
    # 3: the attempts and step_runs views over the event log, as on SQLite
    view_sql("postgres"),
    # 4: steps_added (DESIGN §17): an agent's model turn that asked for calls ends there (its
    #    attempt succeeded) and a step that grew is running
    "DROP VIEW attempts; DROP VIEW step_runs;" + view_sql("postgres"),
    # 5: the queue a worker fleet drains (DESIGN §19): queue and concurrency key columns,
    #    idempotency keys, queue limits and the registered workers (chainlab.store.sql_queue)
    queue_schema("postgres"),
    # 6: experiments (DESIGN §22): many runs replayed under a change, their record
    #    (chainlab.store.sql_experiments); their runs are the runs whose meta names them
    experiments_schema("postgres"),
]


def schema_version(conn: psycopg.Connection) -> int:
    """How far the database of ``conn`` is migrated (0: not a chainlab database yet)."""
    row = conn.execute("SELECT to_regclass('chainlab_schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute("SELECT max(version) FROM chainlab_schema_version").fetchone()
    return int(row[0] or 0) if row else 0


def migrate(conn: psycopg.Connection) -> int:
    """Apply the migrations the database lacks, in one transaction under an advisory lock
    (two processes opening a new database at once migrate it once). A current database is
    only read. Returns the version found before migrating (for the caller's check: a
    NEWER version than ``len(MIGRATIONS)`` is refused by the caller, which knows where)."""
    current = schema_version(conn)
    if current >= len(MIGRATIONS):
        return current
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS chainlab_schema_version "
                     "(version INTEGER PRIMARY KEY)")
        found = schema_version(conn)  # another process may have migrated meanwhile
        for version in range(found + 1, len(MIGRATIONS) + 1):
            conn.execute(MIGRATIONS[version - 1])
            conn.execute("INSERT INTO chainlab_schema_version (version) VALUES (%s)",
                         (version,))
    return current
