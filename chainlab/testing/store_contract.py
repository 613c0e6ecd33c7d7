"""The store contract: the tests every :class:`~chainlab.store.Store` must pass, one class
per protocol (:class:`RunLogContract`, :class:`DriversContract`, :class:`MailboxContract`,
:class:`ExperimentsContract`), and :class:`StoreContract` for all of them. chainlab runs
them against MemoryStore, SQLiteStore (a file and ``:memory:``) and PostgresStore; a
third-party store runs them the same way::

    import pytest
    from chainlab.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self):
            s = MyStore()
            yield s
            s.close()

The async tests need the ``anyio`` pytest plugin (installed with anyio); this module needs
pytest, so only test code imports it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import anyio
import pytest

from chainlab.errors import (
    ExperimentNotFoundError,
    RunNotFoundError,
    StaleEpochError,
    StoreError,
)
from chainlab.events.event import Event, EventKind
from chainlab.store.base import DecisionRequest, DriverInfo, RunRecord, Store
from chainlab.store.experiments import EXPERIMENT_META, ExperimentRecord

__all__ = ["DriversContract", "ExperimentsContract", "MailboxContract", "RunLogContract",
           "StoreContract", "ev",
           "record"]

ME = DriverInfo("drv-1", "host-a", 4242)


def ev(seq: int, kind: str = "step_ready", *, epoch: int = 1, run_id: str = "r1",
       step_id: str | None = "a", payload: dict[str, Any] | None = None) -> Event:
    """An event with ts = 1000 + seq."""
    return Event(run_id, seq, 1000.0 + seq, epoch, EventKind(kind), step_id, None,
                 payload or {})


def record(run_id: str = "r1", *, created_at: float = 100.0, epoch: int = 1,
           status: str = "running") -> RunRecord:
    """A run record with a little of everything in it."""
    return RunRecord(run_id=run_id, chain_name="c", status=status, epoch=epoch,
                     created_at=created_at, updated_at=created_at,
                     chain={"name": "c", "steps": [{"id": "a", "tool": "t"}]},
                     chains={"sub": {"name": "sub"}}, context={"k": [1, "two", None]},
                     options={"max_concurrency": 2}, meta={"who": "test"})


def request(step_id: str = "a", action: str = "approve", run_id: str = "r1",
            **payload: object) -> DecisionRequest:
    return DecisionRequest(run_id=run_id, step_id=step_id, action=action,
                           payload=dict(payload), by="alice", created_at=50.0)


class _Base:
    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"


class RunLogContract(_Base):
    """Runs and their event log: create, claim (fencing), append, flush, read."""

    def test_create_and_get_run(self, store: Store) -> None:
        rec = record()
        store.create_run(rec)
        assert store.get_run("r1") == rec

    def test_creating_an_existing_run_is_refused(self, store: Store) -> None:
        store.create_run(record())
        with pytest.raises(StoreError, match="'r1' already exists"):
            store.create_run(record(status="failed"))
        assert store.get_run("r1").status == "running"

    def test_unknown_runs_are_named(self, store: Store) -> None:
        store.create_run(record("run-alpha"))
        for call in (lambda: store.get_run("run-alpah"), lambda: store.load_events("run-alpah"),
                     lambda: store.claim("run-alpah", 1)):
            with pytest.raises(RunNotFoundError, match=r"'run-alpah'.*did you mean 'run-alpha'"):
                call()
        assert issubclass(RunNotFoundError, KeyError | StoreError)

    def test_list_runs_newest_first(self, store: Store) -> None:
        for i, t in enumerate([5.0, 9.0, 1.0]):
            store.create_run(record(f"r{i}", created_at=t))
        assert [r.run_id for r in store.list_runs()] == ["r1", "r0", "r2"]
        assert [r.run_id for r in store.list_runs(limit=2)] == ["r1", "r0"]

    async def test_append_flush_load_in_order(self, store: Store) -> None:
        store.create_run(record())
        payload = {"output": {"rows": [1, 2.5, None, True], "text": "naïve ✓"}, "args": {}}
        batches = [[ev(1, "run_started", step_id=None)],
                   [ev(2), ev(3, "step_started", payload=payload)],
                   [ev(4, "step_succeeded", payload=payload)]]
        for batch in batches:
            store.append("r1", 1, batch)
        await store.flush("r1", 1)
        events = store.load_events("r1")
        assert events == [e for batch in batches for e in batch]
        assert [e.seq for e in store.load_events("r1", after_seq=2)] == [3, 4]
        assert store.load_events("r1", after_seq=4) == []

    async def test_run_status_commits_with_its_event(self, store: Store) -> None:
        store.create_run(record())
        store.append("r1", 1, [ev(1, "run_suspended", step_id=None)], run_status="suspended")
        store.append("r1", 1, [ev(2)])  # no status: unchanged
        await store.flush("r1", 1)
        run = store.get_run("r1")
        assert (run.status, run.updated_at) == ("suspended", 1002.0)
        assert [r.status for r in store.list_runs()] == ["suspended"]

    def test_claim_is_a_compare_and_swap(self, store: Store) -> None:
        store.create_run(record())
        assert store.claim("r1", 1) == 2
        with pytest.raises(StaleEpochError) as info:
            store.claim("r1", 1)
        assert (info.value.epoch, info.value.current) == (1, 2)
        assert store.claim("r1", 2) == 3
        assert store.get_run("r1").epoch == 3

    async def test_a_stale_writer_is_refused_and_stays_refused(self, store: Store) -> None:
        store.create_run(record())
        store.append("r1", 1, [ev(1)])
        await store.flush("r1", 1)
        assert store.claim("r1", 1) == 2  # another process took over
        store.append("r1", 1, [ev(2, "run_failed", step_id=None)], run_status="failed")
        with pytest.raises(StaleEpochError) as info:
            await store.flush("r1", 1)
        assert (info.value.run_id, info.value.epoch, info.value.current) == ("r1", 1, 2)
        assert store.is_stale("r1", 1) and not store.is_stale("r1", 2)
        assert [e.seq for e in store.load_events("r1")] == [1]
        assert store.get_run("r1").status == "running"  # the status change was refused too
        store.append("r1", 1, [ev(3)])
        with pytest.raises(StaleEpochError):
            await store.flush("r1", 1)
        store.append("r1", 2, [ev(2, epoch=2)])  # the new owner writes on
        await store.flush("r1", 2)
        assert [(e.seq, e.epoch) for e in store.load_events("r1")] == [(1, 1), (2, 2)]

    async def test_writes_racing_a_claim_commit_whole_or_not_at_all(self, store: Store) -> None:
        store.create_run(record())
        events = [ev(i) for i in range(1, 201)]
        for e in events:
            store.append("r1", 1, [e])
        store.claim("r1", 1)  # lands somewhere in the stream of writes
        with contextlib.suppress(StaleEpochError):
            await store.flush("r1", 1)
        seqs = [e.seq for e in store.load_events("r1")]
        assert seqs == list(range(1, len(seqs) + 1))  # a prefix: nothing after a refusal

    async def test_writing_to_an_unknown_run_fails_at_flush(self, store: Store) -> None:
        store.append("ghost", 1, [ev(1, run_id="ghost")])
        with pytest.raises(RunNotFoundError, match="'ghost'"):
            await store.flush("ghost", 1)

    async def test_a_refused_writer_does_not_disturb_other_runs(self, store: Store) -> None:
        store.create_run(record("r1"))
        store.create_run(record("r2"))
        store.claim("r1", 1)
        for seq in (1, 2, 3):  # interleaved, most likely in one group commit
            store.append("r1", 1, [ev(seq, run_id="r1")])
            store.append("r2", 1, [ev(seq, run_id="r2")])
        with pytest.raises(StaleEpochError):
            await store.flush("r1", 1)
        await store.flush("r2", 1)
        assert store.load_events("r1") == []
        assert [e.seq for e in store.load_events("r2")] == [1, 2, 3]

    async def test_reads_from_worker_threads_see_committed_events(self, store: Store) -> None:
        store.create_run(record())
        counts: list[int] = []

        def read() -> None:
            for _ in range(50):
                counts.append(len(store.load_events("r1")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, read)
            for seq in range(1, 301):
                store.append("r1", 1, [ev(seq)])
                if seq % 30 == 0:
                    await store.flush("r1", 1)
        await store.flush("r1", 1)
        assert counts == sorted(counts)  # never goes back
        assert len(store.load_events("r1")) == 300

    def test_event_value_object(self) -> None:
        e = ev(7, "step_started", payload={"x": 1})
        assert str(e) == "[7] step_started a"
        assert e.to_dict()["payload"] == {"x": 1}
        with pytest.raises(AttributeError):
            e.seq = 8  # type: ignore[misc]

    def test_a_run_id_is_checked_when_the_run_is_created(self, store: Store) -> None:
        for bad in ("", "x" * 201, "two words", "new\nline"):
            with pytest.raises(ValueError, match="run id"):
                store.create_run(record(bad))
        assert store.list_runs() == []


class DriversContract(_Base):
    """Who drives a run: heartbeats fenced by the epoch; a driver known from the start."""

    def test_heartbeat_records_the_driver_and_its_beat(self, store: Store) -> None:
        store.create_run(record())
        assert store.driver_of("r1") is None
        before = time.time()
        store.heartbeat("r1", 1, ME)
        found = store.driver_of("r1")
        assert found is not None
        assert (found.driver_id, found.host, found.pid, found.epoch) == ("drv-1", "host-a", 4242, 1)
        assert before - 1 <= found.beat_at <= time.time() + 1
        store.heartbeat("r1", 1, DriverInfo("drv-1", "host-a", 4242))
        assert store.driver_of("r1").beat_at >= found.beat_at  # type: ignore[union-attr]

    def test_heartbeat_is_fenced_by_the_epoch(self, store: Store) -> None:
        store.create_run(record())
        store.heartbeat("r1", 1, ME)
        assert store.claim("r1", 1) == 2  # another process took over
        with pytest.raises(StaleEpochError) as info:
            store.heartbeat("r1", 1, ME)
        assert (info.value.epoch, info.value.current) == (1, 2)
        assert store.driver_of("r1").driver_id == "drv-1"  # type: ignore[union-attr]
        store.heartbeat("r1", 2, DriverInfo("drv-2", "host-b", 7))
        now = store.driver_of("r1")
        assert now is not None and (now.driver_id, now.host, now.pid, now.epoch) == (
            "drv-2", "host-b", 7, 2)
        with pytest.raises(RunNotFoundError):
            store.heartbeat("nope", 1, ME)

    def test_clear_driver_forgets_only_its_own_row(self, store: Store) -> None:
        store.create_run(record())
        store.heartbeat("r1", 1, ME)
        store.clear_driver("r1", "someone-else")
        assert store.driver_of("r1") is not None
        store.clear_driver("r1", "drv-1")
        assert store.driver_of("r1") is None

    def test_a_driver_given_at_creation_or_claim_is_recorded_with_it(self,
                                                                     store: Store) -> None:
        store.create_run(record(), ME)
        found = store.driver_of("r1")
        assert found is not None and (found.driver_id, found.epoch) == ("drv-1", 1)
        store.claim("r1", 1, None, DriverInfo("drv-2", "host-b", 7))
        now = store.driver_of("r1")
        assert now is not None and (now.driver_id, now.epoch) == ("drv-2", 2)


class MailboxContract(_Base):
    """Decisions sent to a run's driver, answered once, by its current epoch."""

    def test_requests_are_posted_listed_and_read_back(self, store: Store) -> None:
        store.create_run(record())
        store.create_run(record("r2"))
        first = store.post_request("r1", request(args={"amount": 3}, note="ok by me"))
        other = store.post_request("r2", request(run_id="r2"))
        second = store.post_request("r1", request("b", "reject", reason="too much"))
        assert first < other < second
        pending = store.pending_requests("r1")
        assert [r.request_id for r in pending] == [first, second]
        got = pending[0]
        assert (got.run_id, got.step_id, got.action, got.payload, got.by, got.created_at) == (
            "r1", "a", "approve", {"args": {"amount": 3}, "note": "ok by me"}, "alice", 50.0)
        assert got.outcome is None and got.message is None and got.answered_at is None
        assert not got.answered
        assert [r.request_id for r in store.pending_requests("r1", after_id=first)] == [second]
        assert store.get_request(second).payload == {"reason": "too much"}

    def test_an_answer_is_fenced_and_given_once(self, store: Store) -> None:
        store.create_run(record())
        request_id = store.post_request("r1", request())
        with pytest.raises(ValueError, match="'maybe'"):
            store.answer_request(request_id, 1, "maybe", "?")
        store.answer_request(request_id, 1, "refused", "step 'a' is not waiting")
        got = store.get_request(request_id)
        assert (got.outcome, got.message) == ("refused", "step 'a' is not waiting")
        assert got.answered and got.answered_at is not None
        assert store.pending_requests("r1") == []
        with pytest.raises(StoreError, match="already answered"):
            store.answer_request(request_id, 1, "applied", "")

        later = store.post_request("r1", request())
        store.claim("r1", 1)  # taken over: the old driver may not answer any more
        with pytest.raises(StaleEpochError):
            store.answer_request(later, 1, "applied", "")
        assert store.get_request(later).outcome is None
        store.answer_request(later, 2, "applied", "")
        assert store.get_request(later).outcome == "applied"

    def test_bad_requests_are_refused(self, store: Store) -> None:
        store.create_run(record())
        with pytest.raises(RunNotFoundError):
            store.post_request("nope", request(run_id="nope"))
        with pytest.raises(ValueError, match="'r2'"):
            store.post_request("r1", request(run_id="r2"))
        with pytest.raises(ValueError, match="'launch'"):
            store.post_request("r1", request(action="launch"))
        with pytest.raises(ValueError, match="JSON"):
            store.post_request("r1", request(output=object()))
        with pytest.raises(StoreError, match="no decision request 999"):
            store.get_request(999)
        with pytest.raises(StoreError, match="no decision request 999"):
            store.answer_request(999, 1, "applied", "")
        assert store.pending_requests("r1") == []


class ExperimentsContract:
    """:class:`~chainlab.store.experiments.Experiments`: experiments kept, read back, listed
    and deleted with their runs; their runs kept out of the ordinary run list."""

    def test_experiments_are_saved_read_back_and_listed(self, store: Any) -> None:
        first = ExperimentRecord("e1", "first", 10.0, {"runs": ["r1"], "scores": {
            "r1": {"ok": True, "n": 1.5, "why": "error: boom"}}})
        store.save_experiment(first)
        store.save_experiment(ExperimentRecord("e2", "second", 20.0, {"runs": []}))
        assert store.get_experiment("e1") == first
        assert [e.experiment_id for e in store.list_experiments()] == ["e2", "e1"]
        newer = ExperimentRecord("e1", "first", 10.0, {"runs": ["r1"], "status": "finished"})
        store.save_experiment(newer)  # a newer version of the same experiment
        assert store.get_experiment("e1") == newer
        with pytest.raises(ExperimentNotFoundError, match="'e3'"):
            store.get_experiment("e3")

    def test_an_experiments_runs_are_kept_apart_and_deleted_with_it(self, store: Any
                                                                    ) -> None:
        store.create_run(record("r1", created_at=100.0))
        replay = record("r2", created_at=200.0)
        store.create_run(replay.with_(meta={**replay.meta, EXPERIMENT_META: "e1"}),
                         events=[ev(1, "run_started", run_id="r2", step_id=None)])
        store.save_experiment(ExperimentRecord("e1", "e", 1.0, {"runs": ["r1"]}))
        assert [r.run_id for r in store.list_runs()] == ["r1"]
        assert [r.run_id for r in store.list_runs(experiment="e1")] == ["r2"]
        assert store.delete_experiment("e1") == ["r2"]
        assert store.list_experiments() == [] and store.list_runs(experiment="e1") == []
        with pytest.raises(RunNotFoundError):
            store.get_run("r2")
        assert [r.run_id for r in store.list_runs()] == ["r1"]  # the recording stays
        assert store.load_events("r1") == []
        with pytest.raises(ExperimentNotFoundError):
            store.delete_experiment("e1")


class StoreContract(RunLogContract, DriversContract, MailboxContract, ExperimentsContract):
    """Everything a :class:`~chainlab.store.Store` must do."""
