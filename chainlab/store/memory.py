"""In-memory store for tests and throwaway runs (same semantics as SQLiteStore, no disk)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from chainlab.errors import RunNotFoundError, StaleEpochError, StoreError
from chainlab.store.base import Event, RunRecord

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keeps runs and events in dictionaries. Thread-safe; everything is "durable" at once."""

    blocking = False

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        # mutable part of each run: [status, epoch, updated_at] (cheap to update per event)
        self._live: dict[str, list[object]] = {}
        self._events: dict[str, list[Event]] = {}
        self._stale: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def create_run(self, record: RunRecord) -> None:
        with self._lock:
            if record.run_id in self._runs:
                raise StoreError(f"run {record.run_id!r} already exists")
            self._runs[record.run_id] = record
            self._live[record.run_id] = [record.status, record.epoch, record.updated_at]
            self._events[record.run_id] = []

    def claim(self, run_id: str, expected_epoch: int) -> int:
        with self._lock:
            live = self._get_live(run_id)
            if live[1] != expected_epoch:
                raise StaleEpochError(run_id, expected_epoch, live[1])  # type: ignore[arg-type]
            live[1] = expected_epoch + 1
            live[2] = time.time()
            return expected_epoch + 1

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        # no lock: list.append and item assignment are atomic under the GIL, and an epoch
        # bump (claim) takes the lock, so a stale writer is refused from then on
        live = self._live.get(run_id)
        if live is None or live[1] != epoch:
            self._stale.add((run_id, epoch))
            return
        log = self._events[run_id]
        for ev in events:
            log.append(ev)
            live[2] = ev.ts
        if run_status is not None:
            live[0] = run_status

    async def flush(self, run_id: str, epoch: int) -> None:
        if (run_id, epoch) in self._stale:
            raise StaleEpochError(run_id, epoch, self._live[run_id][1])  # type: ignore[arg-type]

    def is_stale(self, run_id: str, epoch: int) -> bool:
        return (run_id, epoch) in self._stale

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            live = self._get_live(run_id)
            return self._runs[run_id].with_(status=live[0], epoch=live[1], updated_at=live[2])

    def _get_live(self, run_id: str) -> list[object]:
        try:
            return self._live[run_id]
        except KeyError:
            raise RunNotFoundError(run_id, self._runs) from None

    def list_runs(self, limit: int | None = None) -> list[RunRecord]:
        runs = [self.get_run(rid) for rid in list(self._runs)]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return runs[:limit] if limit else runs

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        with self._lock:
            self._get_live(run_id)
            return [e for e in self._events[run_id] if e.seq > after_seq]

    def close(self) -> None:
        pass
