"""The SQL views over the event log, for both SQL dialects: ``attempts`` (one row per call or
compensation, as ``RunState.attempts``) and ``step_runs`` (each step's status, as
``RunState.steps``). The event log stays the source of truth; these only read it, so
``select * from attempts`` works in sqlite3 and psql alike. A test checks both views against
the Python fold on SQLite and on PostgreSQL.

The migrations that create them are append-only: a later change of these views is a new
migration calling :func:`view_sql` again, never an edit of one already shipped.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["STATUS_OF_KIND", "view_sql"]

# the step status each status-changing event kind leaves (as the fold's handlers do); other
# kinds with a step id (step_timed_out, step_call_returned, fault_injected, write_refused)
# change no status and are not the step's "last" event for this view
STATUS_OF_KIND: dict[str, str] = {
    "step_ready": "ready",
    "step_started": "running",
    "steps_added": "running",  # a for_each step grew (it starts so); an agent's turn ended
    "step_succeeded": "succeeded",
    "step_reused": "succeeded",
    "step_failed": "failed",
    "step_retry_scheduled": "retry_wait",
    "step_waiting_confirmation": "waiting_confirmation",
    "step_approved": "ready",
    "step_rejected": "rejected",
    "step_skipped": "skipped",
    "step_in_doubt": "in_doubt",
    "step_cancelled": "cancelled",
    "compensation_started": "compensating",
    "compensation_succeeded": "compensated",
    "compensation_failed": "compensation_failed",  # or compensating when it will retry
}

# (steps_added ends an agent's model turn that asked for calls: its attempt succeeded)
_CALL_ENDS = ("step_succeeded", "step_failed", "step_retry_scheduled", "step_in_doubt",
              "step_timed_out", "step_cancelled", "step_ready", "steps_added")


def _quoted(kinds: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"'{k}'" for k in kinds)


def view_sql(dialect: str) -> str:
    """``DROP``-free ``CREATE VIEW`` statements of ``attempts`` and ``step_runs`` for
    ``"sqlite"`` or ``"postgres"`` (payloads are JSON text in both)."""
    text: Callable[[str, str], str]
    truthy: Callable[[str, str], str]
    number: Callable[[str, str], str]
    if dialect == "sqlite":
        text = lambda col, key: f"json_extract({col}, '$.{key}')"  # noqa: E731
        truthy = text
        number = text
    elif dialect == "postgres":
        text = lambda col, key: f"({col}::jsonb ->> '{key}')"  # noqa: E731
        truthy = lambda col, key: f"coalesce(({col}::jsonb -> '{key}') = 'true'::jsonb, false)"  # noqa: E731
        number = lambda col, key: f"({col}::jsonb ->> '{key}')::double precision"  # noqa: E731
    else:
        raise ValueError(f"unknown SQL dialect {dialect!r}: 'sqlite' or 'postgres'")
    status_cases = "\n".join(
        f"             WHEN '{kind}' THEN '{status}'"
        for kind, status in STATUS_OF_KIND.items() if kind != "compensation_failed")
    return f"""
    CREATE VIEW attempts AS
    SELECT run_id, step_id, attempt, kind, epoch, tool, started_at, ended_at,
           CASE WHEN end_kind IS NULL THEN 'running'
                WHEN end_kind = 'step_succeeded' AND {truthy('end_payload', 'reconciled')}
                     THEN 'interrupted'
                WHEN end_kind IN ('step_succeeded', 'compensation_succeeded', 'steps_added')
                     THEN 'succeeded'
                WHEN end_kind = 'step_timed_out' THEN 'timed_out'
                WHEN end_kind = 'step_cancelled' THEN 'cancelled'
                WHEN end_kind = 'step_ready' THEN 'interrupted'
                WHEN {text('end_payload', 'reason')} = 'interrupted' THEN 'interrupted'
                WHEN {text('end_payload', 'error_kind')} = 'interrupted' THEN 'interrupted'
                WHEN {text('end_payload', 'error_kind')} = 'timeout' THEN 'timed_out'
                ELSE 'failed' END AS status,
           {text('end_payload', 'error_kind')} AS error_kind,
           {text('end_payload', 'error')} AS error,
           idempotency_key,
           {number('end_payload', 'delay_s')} AS retry_delay_s
    FROM (
        SELECT run_id, step_id, attempt, kind AS start_kind,
               CASE WHEN kind = 'step_started' THEN 'call' ELSE 'compensation' END AS kind,
               epoch, {text('payload', 'tool')} AS tool, ts AS started_at,
               {text('payload', 'idempotency_key')} AS idempotency_key,
               lead(ts) OVER attempt_events AS ended_at,
               lead(kind) OVER attempt_events AS end_kind,
               lead(payload) OVER attempt_events AS end_payload
        FROM events
        WHERE attempt IS NOT NULL AND kind IN ('step_started', {_quoted(_CALL_ENDS)},
              'compensation_started', 'compensation_succeeded', 'compensation_failed')
        WINDOW attempt_events AS (
            PARTITION BY run_id, step_id, attempt, kind LIKE 'compensation%' ORDER BY seq)
    ) AS calls
    WHERE start_kind IN ('step_started', 'compensation_started');
    CREATE VIEW step_runs AS
    SELECT run_id, step_id,
           CASE kind
{status_cases}
             WHEN 'compensation_failed' THEN
               CASE WHEN {truthy('payload', 'will_retry')} THEN 'compensating'
                    ELSE 'compensation_failed' END
           END AS status,
           seq AS last_seq, ts AS updated_at
    FROM (SELECT run_id, step_id, kind, payload, seq, ts,
                 row_number() OVER (PARTITION BY run_id, step_id ORDER BY seq DESC) AS latest
          FROM events
          WHERE step_id IS NOT NULL AND kind IN ({_quoted(list(STATUS_OF_KIND))})
    ) AS changes
    WHERE latest = 1;
    """
