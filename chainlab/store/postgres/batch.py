"""One batch of appends as ONE statement on PostgreSQL (:data:`BATCH`), and its parameters
(:func:`batch_parameters`): the store's writer sends it in its own transaction, one round
trip and one server wake-up per batch (it was two: the epochs read, then the writes; 1.3x
the raw INSERT + COMMIT floor against 2x, measured on a unix socket with fsync on)."""

from __future__ import annotations

import time
from typing import Any

from chainlab.errors import StoreError
from chainlab.store.postgres.listen import CHANNEL
from chainlab.store.sql_rows import Offer, dumps

__all__ = ["BATCH", "batch_parameters"]


def batch_parameters(offered: list[Offer]) -> dict[str, Any]:
    """:data:`BATCH`'s parameters: the offered rows, each with its writer's epoch, and the
    status each writer leaves its run in (as :func:`settle` counts it: the last status given,
    the time of the writer's last event), both as JSON text: two text parameters, where a
    list per column cost psycopg 90 us more of Python per batch to adapt (measured)."""
    rows: list[tuple[Any, ...]] = []
    status: dict[tuple[str, int], tuple[str | None, float]] = {}
    for (_, run_id, epoch, events, run_status), new in offered:
        if isinstance(new, StoreError):
            continue
        rows.extend((*row, epoch) for row in new)
        before = status.get((run_id, epoch), (None, 0.0))[0]
        status[(run_id, epoch)] = (run_status or before,
                                   events[-1].ts if events else time.time())
    told = [(k[0], k[1], v[0], v[1]) for k, v in status.items() if v[0] is not None]
    return {"runs": sorted({item[0][1] for item in offered}), "rows": dumps(rows),
            "status": dumps(told), "channel": CHANNEL}


#: one batch, one statement: the epochs of its runs read FOR SHARE (in run id order, so two
#: writers never deadlock; a claim, FOR UPDATE, waits for it or it for the claim), the rows
#: of writers holding their run's epoch inserted, their runs' status set, one NOTIFY per run
#: with its last seq; returns the epochs (a run missing from them is unknown). A row is a
#: JSON array: run_id, seq, ts, epoch, kind, step_id, attempt, payload (its JSON text), the
#: writer's epoch; a status: run_id, the writer's epoch, status, ts.
BATCH = """
WITH cur AS (
    SELECT run_id, epoch FROM runs WHERE run_id = ANY(%(runs)s::text[])
    ORDER BY run_id FOR SHARE),
new AS (
    SELECT x->>0 AS run_id, (x->>1)::bigint AS seq, (x->>2)::float8 AS ts,
           (x->>3)::bigint AS epoch, x->>4 AS kind, x->>5 AS step_id,
           (x->>6)::int AS attempt, x->>7 AS payload, (x->>8)::bigint AS writer
    FROM json_array_elements(%(rows)s::json) AS x),
ins AS (
    INSERT INTO events (run_id, seq, ts, epoch, kind, step_id, attempt, payload)
    SELECT n.run_id, n.seq, n.ts, n.epoch, n.kind, n.step_id, n.attempt, n.payload
    FROM new n JOIN cur ON cur.run_id = n.run_id AND cur.epoch = n.writer
    ORDER BY n.run_id, n.seq
    RETURNING run_id, seq),
st AS (
    UPDATE runs SET status = s.x->>2, updated_at = (s.x->>3)::float8
    FROM json_array_elements(%(status)s::json) AS s(x), cur
    WHERE runs.run_id = s.x->>0 AND cur.run_id = s.x->>0
      AND cur.epoch = (s.x->>1)::bigint
    RETURNING 1),
told AS (
    SELECT pg_notify(%(channel)s, run_id || ' ' || max(seq)) FROM ins GROUP BY run_id)
SELECT run_id, epoch FROM cur
WHERE (SELECT count(*) FROM told) >= 0 AND (SELECT count(*) FROM st) >= 0
"""
