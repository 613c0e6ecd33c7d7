"""One batch of appends as ONE statement on PostgreSQL (:data:`BATCH`), and its parameters
(:func:`batch_parameters`): the store's writer sends it in its own transaction, one round
trip and one server wake-up per batch (it was two: the epochs read, then the writes; 1.3x
the raw INSERT + COMMIT floor against 2x, measured on a unix socket with fsync on)."""

from __future__ import annotations

import time
from typing import Any

from chainlab.errors import StoreError
from chainlab.store.postgres.listen import CHANNEL
from chainlab.store.sql_rows import Offer

__all__ = ["BATCH", "batch_parameters"]


def batch_parameters(offered: list[Offer]) -> dict[str, Any]:
    """:data:`BATCH`'s parameters: the offered rows column by column, each with its
    writer's epoch, and the status each writer leaves its run in (as :func:`settle` counts
    it: the last status given, the time of the writer's last event)."""
    cols: list[list[Any]] = [[] for _ in range(9)]
    status: dict[tuple[str, int], tuple[str | None, float]] = {}
    for (_, run_id, epoch, events, run_status), rows in offered:
        if isinstance(rows, StoreError):
            continue
        for row in rows:
            for i, value in enumerate(row):
                cols[i].append(value)
            cols[8].append(epoch)
        before = status.get((run_id, epoch), (None, 0.0))[0]
        status[(run_id, epoch)] = (run_status or before,
                                   events[-1].ts if events else time.time())
    told = [(k[0], k[1], v[0], v[1]) for k, v in status.items() if v[0] is not None]
    return {"runs": sorted({item[0][1] for item in offered}), "run_id": cols[0],
            "seq": cols[1], "ts": cols[2], "epoch": cols[3], "kind": cols[4],
            "step_id": cols[5], "attempt": cols[6], "payload": cols[7], "writer": cols[8],
            "s_run": [x[0] for x in told], "s_epoch": [x[1] for x in told],
            "s_status": [x[2] for x in told], "s_ts": [x[3] for x in told],
            "channel": CHANNEL}


#: one batch, one statement: the epochs of its runs read FOR SHARE (in run id order, so two
#: writers never deadlock; a claim, FOR UPDATE, waits for it or it for the claim), the rows
#: of writers holding their run's epoch inserted, their runs' status set, one NOTIFY per run
#: with its last seq; returns the epochs (a run missing from them is unknown)
BATCH = """
WITH cur AS (
    SELECT run_id, epoch FROM runs WHERE run_id = ANY(%(runs)s::text[])
    ORDER BY run_id FOR SHARE),
new AS (
    SELECT * FROM unnest(%(run_id)s::text[], %(seq)s::bigint[], %(ts)s::float8[],
                         %(epoch)s::bigint[], %(kind)s::text[], %(step_id)s::text[],
                         %(attempt)s::int[], %(payload)s::text[], %(writer)s::bigint[])
        AS n(run_id, seq, ts, epoch, kind, step_id, attempt, payload, writer)),
ins AS (
    INSERT INTO events (run_id, seq, ts, epoch, kind, step_id, attempt, payload)
    SELECT n.run_id, n.seq, n.ts, n.epoch, n.kind, n.step_id, n.attempt, n.payload
    FROM new n JOIN cur ON cur.run_id = n.run_id AND cur.epoch = n.writer
    ORDER BY n.run_id, n.seq
    RETURNING run_id, seq),
st AS (
    UPDATE runs SET status = s.status, updated_at = s.ts
    FROM unnest(%(s_run)s::text[], %(s_epoch)s::bigint[], %(s_status)s::text[],
                %(s_ts)s::float8[]) AS s(run_id, epoch, status, ts), cur
    WHERE runs.run_id = s.run_id AND cur.run_id = s.run_id AND cur.epoch = s.epoch
    RETURNING 1),
told AS (
    SELECT pg_notify(%(channel)s, run_id || ' ' || max(seq)) FROM ins GROUP BY run_id)
SELECT run_id, epoch FROM cur
WHERE (SELECT count(*) FROM told) >= 0 AND (SELECT count(*) FROM st) >= 0
"""
