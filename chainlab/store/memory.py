"""In-memory store for tests and throwaway runs (same semantics as SQLiteStore, no disk)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from chainlab.errors import (
    ExperimentNotFoundError,
    RunExistsError,
    RunNotFoundError,
    StaleEpochError,
    StoreError,
)
from chainlab.events.event import Event
from chainlab.store.base import (
    DecisionRequest,
    DriverInfo,
    RunRecord,
    answered_twice,
    check_outcome,
    check_request,
    check_run_id,
    payload_text,
    raise_if_refused,
    unknown_request,
)
from chainlab.store.experiments import EXPERIMENT_META, ExperimentRecord
from chainlab.store.memory_queue import MemoryFleet, MemoryQueue

__all__ = ["MemoryStore"]


# ---------------------------------------------------------------------- drivers and mailbox
@dataclass(slots=True)
class MemoryMail:
    """MemoryStore's drivers and requests (guarded by the store's lock)."""

    drivers: dict[str, DriverInfo] = field(default_factory=dict)
    requests: dict[int, DecisionRequest] = field(default_factory=dict)


class MemoryLiveness:
    """Heartbeats and mailbox of :class:`~chainlab.store.memory.MemoryStore`."""

    if TYPE_CHECKING:
        _lock: threading.Lock
        _mail: MemoryMail
        _runs: dict[str, RunRecord]
        _fleet: MemoryFleet

        def _get_live(self, run_id: str) -> Any: ...

    def heartbeat(self, run_id: str, epoch: int, driver: DriverInfo) -> None:
        with self._lock:
            current = self._get_live(run_id).epoch
            if current != epoch:
                raise StaleEpochError(run_id, epoch, current)
            self._mail.drivers[run_id] = replace(driver, epoch=epoch, beat_at=time.time())

    def driver_of(self, run_id: str) -> DriverInfo | None:
        with self._lock:
            found = self._mail.drivers.get(run_id)
            worker = self._fleet.workers.get(found.driver_id) if found else None
            if found is None or worker is None:
                return found
            return replace(found, worker=worker.name)

    def clear_driver(self, run_id: str, driver_id: str) -> None:
        with self._lock:
            found = self._mail.drivers.get(run_id)
            if found is not None and found.driver_id == driver_id:
                del self._mail.drivers[run_id]

    def post_request(self, run_id: str, request: DecisionRequest) -> int:
        check_request(run_id, request)
        payload = json.loads(payload_text(request))  # stored as it would be read back
        with self._lock:
            self._get_live(run_id)
            request_id = max(self._mail.requests, default=0) + 1
            self._mail.requests[request_id] = replace(
                request, request_id=request_id, payload=payload,
                created_at=request.created_at or time.time(), outcome=None, message=None,
                answered_at=None)
            return request_id

    def pending_requests(self, run_id: str, after_id: int = 0) -> list[DecisionRequest]:
        with self._lock:
            return [r for i, r in sorted(self._mail.requests.items())
                    if i > after_id and r.run_id == run_id and r.outcome is None]

    def answer_request(self, request_id: int, epoch: int, outcome: str, message: str) -> None:
        check_outcome(outcome)
        with self._lock:
            found = self._mail.requests.get(request_id)
            if found is None:
                raise unknown_request(request_id)
            current = self._get_live(found.run_id).epoch
            if current != epoch:
                raise StaleEpochError(found.run_id, epoch, current)
            if found.outcome is not None:
                raise answered_twice(request_id, found.outcome)
            self._mail.requests[request_id] = replace(found, outcome=outcome, message=message,
                                                      answered_at=time.time())

    def get_request(self, request_id: int) -> DecisionRequest:
        with self._lock:
            found = self._mail.requests.get(request_id)
        if found is None:
            raise unknown_request(request_id)
        return found


@dataclass(slots=True)
class _Live:
    """The mutable part of a run record (cheap to update per event)."""

    status: str
    epoch: int
    updated_at: float


class MemoryStore(MemoryQueue, MemoryLiveness):
    """Keeps runs and events in dictionaries. Thread-safe; everything is "durable" at once.

    Payloads are kept as given (not copied through JSON): the runtime only appends JSON data,
    and SQLiteStore is the store that checks it.
    """

    blocking = False

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._live: dict[str, _Live] = {}
        self._events: dict[str, list[Event]] = {}
        # (run_id, epoch) of writers whose writes were refused -> the epoch that won / why
        self._stale: dict[tuple[str, int], int | None] = {}
        self._failed: dict[tuple[str, int], StoreError] = {}
        self._lock = threading.Lock()
        self._mail = MemoryMail()  # driver heartbeats and decision requests
        self._keys: dict[str, str] = {}  # idempotency key -> the run it names
        self._fleet = MemoryFleet()  # queue limits and workers
        self._experiments: dict[str, ExperimentRecord] = {}

    def create_run(self, record: RunRecord, driver: DriverInfo | None = None,
                   events: Sequence[Event] = (), key: str | None = None) -> None:
        check_run_id(record.run_id)
        with self._lock:
            if record.run_id in self._runs:
                raise RunExistsError(record.run_id)
            if key is not None and key in self._keys:
                raise RunExistsError(self._keys[key], key)
            self._runs[record.run_id] = record.with_(driver=None)
            last = events[-1].ts if events else record.updated_at
            self._live[record.run_id] = _Live(record.status, record.epoch, last)
            self._events[record.run_id] = list(events)
            if key is not None:
                self._keys[key] = record.run_id
            if driver is not None:
                self._mail.drivers[record.run_id] = replace(driver, epoch=record.epoch,
                                                            beat_at=time.time())

    def run_for_key(self, key: str) -> str | None:
        with self._lock:
            return self._keys.get(key)

    def claim(self, run_id: str, expected_epoch: int, expected_seq: int | None = None,
              driver: DriverInfo | None = None) -> int:
        with self._lock:
            live = self._get_live(run_id)
            if live.epoch != expected_epoch:
                raise StaleEpochError(run_id, expected_epoch, live.epoch)
            log = self._events.get(run_id) or []
            last = log[-1].seq if log else 0
            if expected_seq is not None and last != expected_seq:
                raise StaleEpochError(run_id, expected_epoch, live.epoch,
                                      moved_on=(expected_seq, last))
            live.epoch = expected_epoch + 1
            if driver is not None:
                self._mail.drivers[run_id] = replace(driver, epoch=live.epoch,
                                                     beat_at=time.time())
            live.updated_at = time.time()
            return live.epoch

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        # the lock makes "check the epoch, then append" atomic against claim() in another
        # thread (uncontended, it costs far less than the event itself)
        with self._lock:
            live = self._live.get(run_id)
            if live is None:
                self._failed.setdefault((run_id, epoch), RunNotFoundError(run_id, self._runs))
                return
            if live.epoch != epoch or (self._stale and (run_id, epoch) in self._stale):
                self._stale.setdefault((run_id, epoch), live.epoch)
                return
            log = self._events[run_id]
            for ev in events:
                log.append(ev)
                live.updated_at = ev.ts
            if run_status is not None:
                live.status = run_status

    async def flush(self, run_id: str, epoch: int) -> None:
        raise_if_refused(self._failed, self._stale, run_id, epoch)  # (the rest is durable)

    def is_stale(self, run_id: str, epoch: int) -> bool:
        return (run_id, epoch) in self._stale

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            live = self._get_live(run_id)
            return self._runs[run_id].with_(status=live.status, epoch=live.epoch,
                                            updated_at=live.updated_at,
                                            driver=self._driving(run_id, live.epoch))

    def _driving(self, run_id: str, epoch: int) -> DriverInfo | None:
        """The run's driver at ``epoch``, with its worker's name (hold the lock)."""
        found = self._mail.drivers.get(run_id)
        if found is None or found.epoch != epoch:
            return None
        worker = self._fleet.workers.get(found.driver_id)
        return found if worker is None else replace(found, worker=worker.name)

    def _get_live(self, run_id: str) -> _Live:
        try:
            return self._live[run_id]
        except KeyError:
            raise RunNotFoundError(run_id, self._runs) from None

    def list_runs(self, limit: int | None = None, *,
                  experiment: str | None = None) -> list[RunRecord]:
        runs = [self.get_run(run_id) for run_id in list(self._runs)
                if self._runs[run_id].meta.get(EXPERIMENT_META) == experiment]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return runs[:limit] if limit else runs

    # ------------------------------------------------------------------ experiments
    def save_experiment(self, record: ExperimentRecord) -> None:
        """See :meth:`chainlab.store.experiments.Experiments.save_experiment`."""
        data = json.loads(json.dumps(record.data))  # stored as it would be read back
        with self._lock:
            self._experiments[record.experiment_id] = replace(record, data=data)

    def get_experiment(self, experiment_id: str) -> ExperimentRecord:
        """See :meth:`chainlab.store.experiments.Experiments.get_experiment`."""
        with self._lock:
            found = self._experiments.get(experiment_id)
            if found is None:
                raise ExperimentNotFoundError(experiment_id, self._experiments)
            return found

    def list_experiments(self) -> list[ExperimentRecord]:
        """See :meth:`chainlab.store.experiments.Experiments.list_experiments`."""
        with self._lock:
            found = list(self._experiments.values())
        return sorted(found, key=lambda r: (r.created_at, r.experiment_id), reverse=True)

    def delete_experiment(self, experiment_id: str) -> list[str]:
        """See :meth:`chainlab.store.experiments.Experiments.delete_experiment`."""
        self.get_experiment(experiment_id)
        with self._lock:
            runs = [run_id for run_id, r in self._runs.items()
                    if r.meta.get(EXPERIMENT_META) == experiment_id]
            for run_id in runs:
                for table in (self._runs, self._live, self._events, self._mail.drivers):
                    table.pop(run_id, None)  # type: ignore[attr-defined]
                self._mail.requests = {i: r for i, r in self._mail.requests.items()
                                       if r.run_id != run_id}
                self._keys = {k: v for k, v in self._keys.items() if v != run_id}
            del self._experiments[experiment_id]
        return runs

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        with self._lock:
            self._get_live(run_id)
            log = self._events[run_id]
            if after_seq <= 0:
                return list(log)
            return [e for e in log if e.seq > after_seq]

    def flush_sync(self, run_id: str | None = None, epoch: int = 0) -> None:
        """Nothing to wait for (every append is committed at once); with ``run_id``, raise
        as :meth:`flush` does for that writer."""
        if run_id is not None:
            raise_if_refused(self._failed, self._stale, run_id, epoch)

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
