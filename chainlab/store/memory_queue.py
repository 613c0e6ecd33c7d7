"""The :class:`~chainlab.store.queue.Queue` of :class:`~chainlab.store.memory.MemoryStore`, as
a mixin: the same claim as the SQL stores' (:func:`chainlab.store.queue.claim_in`), in Python
under the store's lock (one claim at a time: no two claimants can spend one slot)."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from chainlab.events.status import RunStatus
from chainlab.store.base import DriverInfo, RunRecord
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

__all__ = ["MemoryFleet", "MemoryQueue"]


@dataclass(slots=True)
class MemoryFleet:
    """MemoryStore's queue limits and registered workers (guarded by the store's lock)."""

    limits: dict[str, int] = field(default_factory=dict)
    workers: dict[str, WorkerInfo] = field(default_factory=dict)


class MemoryQueue:
    """Queue limits, workers and the claim of :class:`~chainlab.store.memory.MemoryStore`."""

    if TYPE_CHECKING:
        _lock: threading.Lock
        _fleet: MemoryFleet
        _runs: dict[str, RunRecord]
        _live: dict[str, Any]
        _mail: Any

    def claim_next(self, worker: WorkerInfo, queue: str, *, stale_after_s: float,
                   skip: Collection[str] = ()) -> Claim | None:
        check_queue_name(queue)
        now = time.time()
        with self._lock:
            mine = sorted((r for r in self._runs.values() if r.queue == queue
                           and r.run_id not in skip), key=lambda r: (r.created_at, r.run_id))
            status = {r.run_id: self._live[r.run_id].status for r in mine}
            for r in mine:  # a lapsed driver's run, or a suspended one a person decided
                s = status[r.run_id]
                if s in (*IN_PROGRESS, RunStatus.SUSPENDED) and self._lapsed(r.run_id, now,
                                                                             stale_after_s):
                    if s != RunStatus.SUSPENDED:
                        return self._take(worker, r, s, "takeover")
                    if self._decided(r.run_id) and self._slot_free(queue, r.run_id):
                        return self._take(worker, r, s, "decided")
            for r in mine:
                if status[r.run_id] != RunStatus.QUEUED:
                    continue
                if not self._slot_free(queue, r.run_id):
                    return None
                if r.concurrency_key is None or not any(
                        o.concurrency_key == r.concurrency_key and o.run_id != r.run_id
                        and self._live[o.run_id].status in KEY_HELD
                        for o in self._runs.values()):
                    return self._take(worker, r, RunStatus.QUEUED, "start")
        return None

    def _lapsed(self, run_id: str, now: float, stale_after_s: float) -> bool:
        driver = self._mail.drivers.get(run_id)
        return driver is None or driver.epoch != self._live[run_id].epoch \
            or driver.beat_at < now - stale_after_s

    def _decided(self, run_id: str) -> bool:
        return any(q.run_id == run_id and q.outcome is None
                   for q in self._mail.requests.values())

    def _slot_free(self, queue: str, run_id: str) -> bool:
        limit = self._fleet.limits.get(queue)
        if limit is None:
            return True
        busy = sum(1 for r in self._runs.values() if r.queue == queue and r.run_id != run_id
                   and self._live[r.run_id].status in IN_PROGRESS)
        return busy < limit

    def _take(self, worker: WorkerInfo, record: RunRecord, status: str, kind: str) -> Claim:
        live = self._live[record.run_id]
        before = record.with_(status=status, epoch=live.epoch, updated_at=live.updated_at)
        live.epoch += 1
        if kind != "takeover":
            live.status = RunStatus.RUNNING.value
        live.updated_at = time.time()
        self._mail.drivers[record.run_id] = DriverInfo(
            worker.worker_id, worker.host, worker.pid, live.epoch, time.time())
        return Claim(before, live.epoch, kind)

    def release_claim(self, run_id: str, epoch: int, status: str, worker_id: str) -> bool:
        with self._lock:
            live = self._live.get(run_id)
            if live is None or live.epoch != epoch:
                return False
            live.status = status
            driver = self._mail.drivers.get(run_id)
            if driver is not None and driver.driver_id == worker_id:
                del self._mail.drivers[run_id]
            return True

    def set_queue_limit(self, queue: str, limit: int | None) -> None:
        check_queue_name(queue)
        check_queue_limit(limit)
        with self._lock:
            if limit is None:
                self._fleet.limits.pop(queue, None)
            else:
                self._fleet.limits[queue] = limit

    def queue_depths(self) -> list[QueueDepth]:
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for r in self._runs.values():
                status = self._live[r.run_id].status
                if r.queue is not None and status in (RunStatus.QUEUED, RunStatus.SUSPENDED,
                                                      *IN_PROGRESS):
                    counts[(r.queue, status)] = counts.get((r.queue, status), 0) + 1
            limits = list(self._fleet.limits.items())
        return depths_from_rows([(q, s, n) for (q, s), n in counts.items()], limits)

    def beat_worker(self, worker: WorkerInfo) -> None:
        with self._lock:
            self._fleet.workers[worker.worker_id] = replace(worker, beat_at=time.time(),
                                                            claimed=())

    def forget_worker(self, worker_id: str) -> None:
        with self._lock:
            self._fleet.workers.pop(worker_id, None)
            for run_id, driver in list(self._mail.drivers.items()):
                if driver.driver_id == worker_id:
                    del self._mail.drivers[run_id]

    def list_workers(self) -> list[WorkerInfo]:
        with self._lock:
            out = []
            for w in self._fleet.workers.values():
                claimed = tuple(sorted(
                    run_id for run_id, d in self._mail.drivers.items()
                    if d.driver_id == w.worker_id and d.epoch == self._live[run_id].epoch))
                out.append(replace(w, claimed=claimed))
        return sorted(out, key=lambda w: (w.name, w.started_at))
