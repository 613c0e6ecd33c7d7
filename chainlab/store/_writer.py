"""The write path shared by the SQL stores: one writer thread with group commit, and the
durability barrier the runtime awaits.

``append`` only queues; the :class:`GroupCommitWriter` thread drains whatever has queued up
and hands it to its store's ``commit`` as ONE transaction (group commit), so the event loop
never touches the database for writes and a burst of events costs one commit. ``await
flush(run_id, epoch)`` (:func:`wait_for`) waits until everything queued before it is
committed, then raises what the writer recorded for that run and epoch: StaleEpochError
when a newer epoch took the run over, the StoreError that lost a batch. SQLiteStore and
PostgresStore differ only in how they open a connection and what one transaction does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from chainlab.errors import RunNotFoundError, StoreError
from chainlab.events.event import Event
from chainlab.store.base import DriverInfo, RunRecord, raise_if_refused

__all__ = ["Append", "GroupCommitWriter", "WriterStore", "dumps", "event_rows", "insert_run",
           "not_text", "record_of", "run_select", "sort_batch", "wait_for"]

log = logging.getLogger(__name__)

# one queued append: ("append", run_id, epoch, events, run_status)
Append = tuple[str, str, int, tuple[Event, ...], "str | None"]


class GroupCommitWriter(threading.Thread):
    """Drains the queue; each batch of appends is one ``commit`` call (one transaction).
    ``flush``/``stop`` items carry a callback run once the batch before them is committed."""

    def __init__(self, name: str, commit: Callable[[list[Append]], None],
                 start: Callable[[], None] | None = None,
                 finish: Callable[[], None] | None = None,
                 failed: dict[tuple[str, int], StoreError] | None = None):
        super().__init__(name=name, daemon=True)
        self._failed = failed  # where a commit that raised (a chainlab bug) is recorded
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.batches = 0  # batches of appends handed to commit (transactions, for benchmarks)
        self._commit = commit
        self._on_start = start
        self._on_finish = finish

    def run(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            while True:
                batch = [self.queue.get()]
                while True:
                    try:
                        batch.append(self.queue.get_nowait())
                    except queue.Empty:
                        break
                appends = [item for item in batch if item[0] == "append"]
                if appends:
                    self.batches += 1
                    try:
                        self._commit(appends)  # type: ignore[arg-type]
                    except Exception as exc:  # never die with waiters queued behind
                        log.exception("%s: a commit raised; its writers fail from now on",
                                      self.name)
                        if self._failed is not None:
                            for item in appends:
                                self._failed.setdefault((item[1], item[2]), StoreError(
                                    f"could not commit run {item[1]!r}'s events: {exc!r} "
                                    "(a chainlab bug: please report it)"))
                stop = False
                for item in batch:
                    if item[0] in ("flush", "stop"):
                        callback: Callable[[], None] = item[1]
                        with contextlib.suppress(Exception):  # a waiter's problem, not ours
                            callback()
                        stop = stop or item[0] == "stop"
                if stop:
                    return
        finally:
            if self._on_finish is not None:
                self._on_finish()


class WriterStore:
    """The queueing half of a SQL store: ``append``, ``flush``, ``flush_sync``, ``is_stale``
    and stopping the writer. A subclass sets the fields in ``_init_writes`` and provides
    ``_new_writer`` (and may refuse appends in ``_check_append``)."""

    _closed: bool
    _stale: dict[tuple[str, int], int | None]
    _failed: dict[tuple[str, int], StoreError]
    _saved: dict[str, int]  # run_id -> last seq this store committed
    _writer: GroupCommitWriter | None
    _writer_lock: threading.Lock

    def _init_writes(self) -> None:
        self._closed = False
        self._stale = {}
        self._failed = {}
        self._saved = {}
        self._writer = None
        self._writer_lock = threading.Lock()

    def _new_writer(self) -> GroupCommitWriter:
        raise NotImplementedError

    def _check_append(self) -> None:
        """Raise if this store takes no writes (closed; a read-only file)."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    def _get_writer(self) -> GroupCommitWriter:
        writer = self._writer
        if writer is None:
            with self._writer_lock:
                if self._closed:
                    raise StoreError(f"{self!r} is closed")
                if self._writer is None:
                    self._writer = self._new_writer()
                    self._writer.start()
                writer = self._writer
        return writer

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        self._check_append()
        self._get_writer().queue.put(("append", run_id, epoch, tuple(events), run_status))

    async def flush(self, run_id: str, epoch: int) -> None:
        if self._writer is not None and not self._closed:
            await wait_for(self._writer)
        raise_if_refused(self._failed, self._stale, run_id, epoch)

    def flush_sync(self, run_id: str | None = None, epoch: int = 0) -> None:
        """Block until everything appended so far is committed (for inline readers, scripts
        and tests; the runtime's driver uses ``await flush(...)``). With ``run_id``, raise
        as :meth:`flush` does for that writer."""
        if self._writer is not None and not self._closed:
            done = threading.Event()
            self._writer.queue.put(("flush", done.set))
            done.wait()
        if run_id is not None:
            raise_if_refused(self._failed, self._stale, run_id, epoch)

    def is_stale(self, run_id: str, epoch: int) -> bool:
        return (run_id, epoch) in self._stale

    def _stop_writer(self) -> bool:
        """Mark the store closed and stop the writer after it committed what is queued.
        Returns False when it was closed already."""
        with self._writer_lock:
            if self._closed:
                return False
            self._closed = True
        if self._writer is not None:
            done = threading.Event()
            self._writer.queue.put(("stop", done.set))
            done.wait()
            self._writer.join()
        return True

    def _lost(self, run_id: str, first_unsaved: int | None = None) -> str:
        """What of a run's events is durable, for an error that loses the rest."""
        saved = self._saved.get(run_id)
        if saved is None and first_unsaved is not None:
            saved = first_unsaved - 1
        if saved is None:
            return f"nothing of run {run_id!r} was saved"
        return f"nothing after seq {saved} of run {run_id!r} was saved"


async def wait_for(writer: GroupCommitWriter) -> None:
    """Wait (without blocking the loop) until the writer committed what is queued now."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): wait in a worker thread
        import anyio

        done = threading.Event()
        writer.queue.put(("flush", done.set))
        await anyio.to_thread.run_sync(done.wait)
        return
    fut = loop.create_future()

    def set_result() -> None:
        if not fut.done():
            fut.set_result(None)

    def resolve() -> None:  # called on the writer thread
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(set_result)

    writer.queue.put(("flush", resolve))
    await fut


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
    rows: list[tuple[Any, ...]] = []
    runs: dict[str, tuple[str | None, float]] = {}
    for _, run_id, epoch, events, status in appends:
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
        new = event_rows(events)
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


def dumps(value: Any) -> str:
    """Compact, strict JSON (no NaN): what the stores write."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


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
