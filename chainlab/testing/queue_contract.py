"""The queue contract (DESIGN §19): what a store a worker fleet drains must do
(:class:`~chainlab.store.queue.Queue`), plus the all-or-nothing creation of a run
(``create_run`` with its opening events and an idempotency key). chainlab runs it against
MemoryStore, SQLiteStore and PostgresStore, as :mod:`chainlab.testing.store_contract`::

    class TestMyStore(QueueContract):
        @pytest.fixture
        def store(self):
            ...
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chainlab.errors import RunExistsError, StoreError
from chainlab.store.base import DecisionRequest, DriverInfo, RunRecord
from chainlab.store.queue import Queue, QueueDepth, WorkerInfo
from chainlab.testing.store_contract import ev, record

__all__ = ["QueueContract", "queued", "worker"]


def queued(run_id: str, *, queue: str = "q", created_at: float = 100.0,
           key: str | None = None) -> RunRecord:
    """A queued run record (no events) of ``queue``."""
    return record(run_id, created_at=created_at, status="queued").with_(
        queue=queue, concurrency_key=key)


def worker(name: str = "w1", worker_id: str | None = None) -> WorkerInfo:
    """A worker of queue ``q``."""
    return WorkerInfo(worker_id or f"id-{name}", name, "host-a", 4242, ("q",), 2, 1.0)


class QueueContract:
    """Claims, limits, keys, workers, and all-or-nothing creation."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    def claim(self, store: Any, w: WorkerInfo | None = None, queue: str = "q",
              **kw: Any) -> Any:
        return store.claim_next(w or worker(), queue, stale_after_s=kw.pop("stale", 5.0),
                                **kw)

    # ------------------------------------------------------------------ creation
    def test_a_store_is_a_queue(self, store: Any) -> None:
        assert isinstance(store, Queue)

    def test_a_run_is_created_with_its_opening_events(self, store: Any) -> None:
        store.create_run(record(), DriverInfo("d", "h", 1), [ev(1, "run_started",
                                                                step_id=None), ev(2)])
        assert [e.seq for e in store.load_events("r1")] == [1, 2]
        assert store.driver_of("r1").driver_id == "d"

    def test_an_idempotency_key_names_one_run(self, store: Any) -> None:
        store.create_run(record("r1"), key="k1")
        assert store.run_for_key("k1") == "r1" and store.run_for_key("k2") is None
        with pytest.raises(RunExistsError, match="key 'k1' already names run 'r1'") as info:
            store.create_run(record("r2"), key="k1")
        assert info.value.run_id == "r1" and info.value.key == "k1"
        assert [r.run_id for r in store.list_runs()] == ["r1"]  # r2 was not created
        with pytest.raises(RunExistsError, match="run 'r1' already exists"):
            store.create_run(record("r1"), key="k3")
        assert store.run_for_key("k3") is None  # nor its key kept

    def test_a_refused_creation_leaves_nothing(self, store: Any) -> None:
        bad = ev(1, "run_started", step_id=None, payload={"text": "\ud800"})
        try:
            store.create_run(record(), DriverInfo("d", "h", 1), [bad], key="k")
        except StoreError as exc:
            assert "not valid Unicode" in str(exc)
            assert store.list_runs() == [] and store.run_for_key("k") is None
            assert store.driver_of("r1") is None
        else:  # a store that keeps any Python text keeps all of it
            assert store.load_events("r1")[0].payload == {"text": "\ud800"}

    # ------------------------------------------------------------------ claims
    def test_the_oldest_queued_run_is_claimed_once(self, store: Any) -> None:
        store.create_run(queued("new", created_at=200.0))
        store.create_run(queued("old", created_at=100.0))
        store.create_run(queued("other", queue="elsewhere", created_at=50.0))
        first = self.claim(store)
        assert (first.record.run_id, first.kind, first.epoch) == ("old", "start", 2)
        assert first.record.status == "queued"
        run = store.get_run("old")
        assert run.status == "running" and run.epoch == 2 and run.queue == "q"
        assert store.driver_of("old").driver_id == "id-w1"
        assert self.claim(store).record.run_id == "new"
        assert self.claim(store) is None  # the other queue is not this worker's

    def test_skipped_runs_are_left_for_others(self, store: Any) -> None:
        store.create_run(queued("a", created_at=1.0))
        store.create_run(queued("b", created_at=2.0))
        assert self.claim(store, skip={"a"}).record.run_id == "b"
        assert store.get_run("a").status == "queued"

    def test_a_live_driver_keeps_its_run_and_a_lapsed_one_loses_it(self, store: Any
                                                                   ) -> None:
        store.create_run(queued("r"))
        claim = self.claim(store, worker("w1"))
        store.heartbeat("r", claim.epoch, DriverInfo("id-w1", "host-a", 4242))
        assert self.claim(store, worker("w2")) is None
        time.sleep(0.05)
        again = self.claim(store, worker("w2"), stale=0.01)  # its beat is older than that
        assert (again.kind, again.epoch, again.record.status) == ("takeover", 3, "running")
        assert store.get_run("r").status == "running"
        assert store.driver_of("r").driver_id == "id-w2"

    def test_a_run_handed_back_is_claimed_again_at_once(self, store: Any) -> None:
        store.create_run(queued("r"))
        self.claim(store)
        store.clear_driver("r", "id-w1")  # a worker that stops cleanly
        assert self.claim(store, worker("w2")).kind == "takeover"

    def test_a_suspended_run_holds_no_worker_until_a_person_decides(self, store: Any
                                                                   ) -> None:
        store.create_run(queued("r").with_(status="suspended"))
        assert self.claim(store) is None
        store.post_request("r", DecisionRequest(run_id="r", step_id="a", action="approve"))
        claim = self.claim(store)
        assert (claim.kind, claim.record.status) == ("decided", "suspended")
        assert store.get_run("r").status == "running"

    def test_a_claim_is_handed_back_untouched(self, store: Any) -> None:
        store.create_run(queued("r"))
        claim = self.claim(store)
        assert not store.release_claim("r", claim.epoch + 1, "queued", "id-w1")
        assert store.release_claim("r", claim.epoch, "queued", "id-w1")
        run = store.get_run("r")
        assert (run.status, run.driver) == ("queued", None)
        assert store.driver_of("r") is None
        assert self.claim(store, worker("w2")).epoch == claim.epoch + 1

    # ------------------------------------------------------------------ limits
    def test_a_queue_limit_holds_across_the_fleet(self, store: Any) -> None:
        for i in range(3):
            store.create_run(queued(f"r{i}", created_at=float(i)))
        store.set_queue_limit("q", 2)
        assert self.claim(store, worker("w1")).record.run_id == "r0"
        assert self.claim(store, worker("w2")).record.run_id == "r1"
        assert self.claim(store, worker("w3")) is None  # both slots are taken
        store.append("r0", 2, [ev(1, "run_succeeded", run_id="r0", epoch=2, step_id=None)],
                     run_status="succeeded")
        store.flush_sync()
        assert self.claim(store, worker("w3")).record.run_id == "r2"
        store.set_queue_limit("q", None)
        with pytest.raises(ValueError, match="whole number"):
            store.set_queue_limit("q", 0)
        with pytest.raises(ValueError, match="simple identifier"):
            store.set_queue_limit("no spaces", 1)

    def test_one_run_per_key_at_a_time(self, store: Any) -> None:
        store.create_run(queued("a1", created_at=1.0, key="customer:a"))
        store.create_run(queued("a2", created_at=2.0, key="customer:a"))
        store.create_run(queued("b1", created_at=3.0, key="customer:b"))
        assert self.claim(store).record.run_id == "a1"
        assert self.claim(store).record.run_id == "b1"  # a2 waits for a1: skipped
        assert self.claim(store) is None
        store.append("a1", 2, [ev(1, "run_suspended", run_id="a1", epoch=2, step_id=None)],
                     run_status="suspended")
        store.flush_sync()
        assert self.claim(store) is None  # a suspended run keeps its key
        store.append("a1", 2, [ev(2, "run_failed", run_id="a1", epoch=2, step_id=None)],
                     run_status="failed")
        store.flush_sync()
        assert self.claim(store).record.run_id == "a2"

    def test_racing_claimants_never_exceed_a_limit_or_share_a_key(self, store: Any) -> None:
        for i in range(12):
            store.create_run(queued(f"r{i:02}", created_at=float(i),
                                    key=f"k{i % 3}" if i % 2 else None))
        store.set_queue_limit("q", 4)
        got: list[str] = []
        lock = threading.Lock()

        def claimant(n: int) -> None:
            for _ in range(6):
                claim = self.claim(store, worker(f"w{n}"))
                if claim is not None:
                    with lock:
                        got.append(claim.record.run_id)

        threads = [threading.Thread(target=claimant, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == len(set(got)) == 4  # four slots, each taken once
        keys = [store.get_run(r).concurrency_key for r in got]
        assert len([k for k in keys if k]) == len({k for k in keys if k})

    # ------------------------------------------------------------------ views
    def test_workers_beat_list_and_are_forgotten(self, store: Any) -> None:
        store.create_run(queued("r"))
        w = worker("w1")
        store.beat_worker(w)
        claim = self.claim(store, w)
        [listed] = store.list_workers()
        assert (listed.name, listed.claimed, listed.queues) == ("w1", ("r",), ("q",))
        assert listed.age() < 60
        assert store.get_run("r").driver.worker == "w1"
        store.forget_worker(w.worker_id)
        assert store.list_workers() == [] and store.driver_of("r") is None
        assert self.claim(store, worker("w2")).epoch == claim.epoch + 1

    def test_queue_depths(self, store: Any) -> None:
        store.create_run(queued("a"))
        store.create_run(queued("b"))
        store.create_run(queued("c", queue="other"))
        store.create_run(record("plain"))  # not in a queue
        store.set_queue_limit("idle", 3)
        self.claim(store)
        assert store.queue_depths() == [QueueDepth("idle", limit=3),
                                        QueueDepth("other", queued=1),
                                        QueueDepth("q", queued=1, in_progress=1)]
