"""The rows a SQL store's transaction writes, shared by SQLiteStore and PostgresStore: a
batch of appends sorted out by the fencing rule (:func:`offer`, then :func:`settle` once the
runs' epochs are known; :func:`sort_batch` both at once), an event's row
(:func:`event_rows`, its payload as compact JSON: :data:`dumps`), and a run's record
(:func:`insert_run`, :func:`run_select`, :func:`record_of`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from chainlab._json import json_encoder
from chainlab.errors import RunNotFoundError, StoreError
from chainlab.events.event import Event
from chainlab.store.base import DriverInfo, RunRecord

__all__ = ["Append", "Offer", "dumps", "event_rows", "insert_run", "not_text", "offer",
           "record_of", "run_select", "settle", "sort_batch"]

# one queued append: ("append", run_id, epoch, events, run_status)
Append = tuple[str, str, int, tuple[Event, ...], "str | None"]


def sort_batch(
    appends: list[Append],
    epoch_of: Callable[[str], int | None],
    stale: dict[tuple[str, int], int | None],
    failed: dict[tuple[str, int], StoreError],
    written: dict[tuple[str, int], int | None],
) -> tuple[list[tuple[Any, ...]], dict[str, tuple[str | None, float]]]:
    """Inside one transaction: the event rows of every append whose writer still holds its
    run's epoch (``epoch_of``: the committed epoch, None for no such run), and the status and
    last event time per run. A stale writer goes to ``stale``, an unknown run or a payload
    that is not JSON to ``failed`` (each refuses that writer from then on); ``written``
    gets the first seq each accepted writer adds (what is lost if the commit fails)."""
    return settle(offer(appends, stale, failed), epoch_of, stale, failed, written)


#: an append offered to a transaction, with its rows (or why they cannot be written)
Offer = tuple[Append, "list[tuple[Any, ...]] | StoreError"]


def offer(appends: list[Append], stale: dict[tuple[str, int], Any],
          failed: dict[tuple[str, int], Any]) -> list[Offer]:
    """Every append of a writer not refused yet, with its event rows, or the StoreError of a
    payload that is not JSON (that writer's later appends are left out: no gap)."""
    out: list[Offer] = []
    bad: set[tuple[str, int]] = set()
    for item in appends:
        key = (item[1], item[2])
        if key in stale or key in failed or key in bad:
            continue
        rows = event_rows(item[3])
        if isinstance(rows, StoreError):
            bad.add(key)
        out.append((item, rows))
    return out


def settle(
    offered: list[Offer],
    epoch_of: Callable[[str], int | None],
    stale: dict[tuple[str, int], int | None],
    failed: dict[tuple[str, int], StoreError],
    written: dict[tuple[str, int], int | None],
) -> tuple[list[tuple[Any, ...]], dict[str, tuple[str | None, float]]]:
    """:func:`sort_batch` for appends already offered (:func:`offer`)."""
    rows: list[tuple[Any, ...]] = []
    runs: dict[str, tuple[str | None, float]] = {}
    for (_, run_id, epoch, events, status), new in offered:
        key = (run_id, epoch)
        if key in stale or key in failed:
            continue
        current = epoch_of(run_id)
        if current is None:
            failed[key] = RunNotFoundError(run_id)
            continue
        if current != epoch:
            stale[key] = current
            continue
        if isinstance(new, StoreError):
            failed[key] = new
            continue
        written.setdefault(key, events[0].seq if events else None)
        rows.extend(new)
        prev_status = runs.get(run_id, (None, 0.0))[0]
        last_ts = events[-1].ts if events else time.time()
        runs[run_id] = (status or prev_status, last_ts)
    return rows, runs


def event_rows(events: tuple[Event, ...]) -> list[tuple[Any, ...]] | StoreError:
    """The events table's rows for these events, or the StoreError of a payload that is not
    JSON data (nothing of the batch is written then)."""
    rows = []
    for ev in events:
        try:
            payload = dumps(ev.payload)
        except (TypeError, ValueError) as exc:
            return StoreError(
                f"run {ev.run_id!r}: event {ev} has a payload that is not JSON data ({exc}); "
                "nothing more from this writer is stored")
        rows.append((ev.run_id, ev.seq, ev.ts, ev.epoch, str(ev.kind), ev.step_id, ev.attempt,
                     payload))
    return rows


#: compact, strict JSON (no NaN): what the stores write (TypeError, ValueError for what is
#: not JSON data)
dumps = json_encoder(allow_nan=False)


def run_select(dialect: str) -> str:
    """``SELECT``'s columns and ``FROM`` that :func:`record_of` reads (add ``WHERE`` /
    ``ORDER BY``): a commit touches only the events table unless the status changes (the hot
    path writes one page less), so a run's ``updated_at`` is the later of the row's and its
    last event's time; the driver (with its fleet worker's name) is joined in when it holds
    the run's current epoch. ``dialect``: ``"sqlite"`` or ``"postgres"``."""
    later = "greatest" if dialect == "postgres" else "max"
    return (
        f"runs.run_id, chain_name, status, runs.epoch, created_at, {later}(updated_at, "
        "coalesce((SELECT e.ts FROM events e WHERE e.run_id = runs.run_id ORDER BY e.seq "
        "DESC LIMIT 1), updated_at)), chain, chains, context, options, meta, queue, "
        "concurrency_key, d.driver_id, d.host, d.pid, d.epoch, d.beat_at, w.name "
        "FROM runs LEFT JOIN drivers d ON d.run_id = runs.run_id AND d.epoch = runs.epoch "
        "LEFT JOIN workers w ON w.worker_id = d.driver_id")


def record_of(row: tuple[Any, ...] | Any) -> RunRecord:
    """A RunRecord from a runs row read with its driver (JSON columns as text): the 13
    columns of the runs table, then the driver's 5 and its worker's name (None when no
    driver holds the run's current epoch)."""
    driver = None
    if len(row) > 13 and row[13] is not None:
        driver = DriverInfo(row[13], row[14], int(row[15]), int(row[16]), float(row[17]),
                            row[18])
    return RunRecord(run_id=row[0], chain_name=row[1], status=row[2], epoch=row[3],
                     created_at=row[4], updated_at=row[5], chain=json.loads(row[6]),
                     chains=json.loads(row[7]), context=json.loads(row[8]),
                     options=json.loads(row[9]), meta=json.loads(row[10]),
                     queue=row[11], concurrency_key=row[12], driver=driver)


def insert_run(conn: Any, record: RunRecord, key: str | None, mark: str) -> None:
    """Insert ``record`` (and its idempotency ``key``) on a SQL connection, inside the
    caller's transaction; ``mark`` is the dialect's placeholder (``?`` or ``%s``)."""
    marks = ",".join([mark] * 13)
    conn.execute(
        "INSERT INTO runs (run_id, chain_name, status, epoch, created_at, updated_at, chain, "
        f"chains, context, options, meta, queue, concurrency_key) VALUES ({marks})",
        (record.run_id, record.chain_name, record.status, record.epoch, record.created_at,
         record.updated_at, dumps(record.chain), dumps(record.chains), dumps(record.context),
         dumps(record.options), dumps(record.meta), record.queue, record.concurrency_key))
    if key is not None:
        conn.execute(f"INSERT INTO run_keys (idempotency_key, run_id) VALUES ({mark},{mark})",
                     (key, record.run_id))


def not_text(run_id: str, exc: UnicodeEncodeError) -> StoreError:
    """The refusal of a new run holding text the database cannot store (a lone surrogate)."""
    return StoreError(
        f"run {run_id!r} was not created: it holds text that is not valid Unicode ({exc.reason}"
        f": {exc.object[exc.start:exc.end]!r}); nothing of it was stored. Pass text without "
        "lone surrogates (e.g. decode bytes with errors='replace')")
