"""The Store contract, one suite for every implementation: MemoryStore, SQLiteStore on a
file and SQLiteStore(':memory:') (DESIGN §7)."""

from __future__ import annotations

import contextlib

import anyio
import pytest

from chainlab.errors import RunNotFoundError, StaleEpochError, StoreError
from chainlab.store import Store

from .conftest import ev, record

pytestmark = pytest.mark.anyio


def test_create_and_get_run(store: Store) -> None:
    rec = record()
    store.create_run(rec)
    assert store.get_run("r1") == rec


def test_creating_an_existing_run_is_refused(store: Store) -> None:
    store.create_run(record())
    with pytest.raises(StoreError, match="'r1' already exists"):
        store.create_run(record(status="failed"))
    assert store.get_run("r1").status == "running"


def test_unknown_runs_are_named(store: Store) -> None:
    store.create_run(record("run-alpha"))
    for call in (lambda: store.get_run("run-alpah"), lambda: store.load_events("run-alpah"),
                 lambda: store.claim("run-alpah", 1)):
        with pytest.raises(RunNotFoundError, match=r"'run-alpah'.*did you mean 'run-alpha'"):
            call()
    assert issubclass(RunNotFoundError, KeyError | StoreError)


def test_list_runs_newest_first(store: Store) -> None:
    for i, t in enumerate([5.0, 9.0, 1.0]):
        store.create_run(record(f"r{i}", created_at=t))
    assert [r.run_id for r in store.list_runs()] == ["r1", "r0", "r2"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["r1", "r0"]


async def test_append_flush_load_in_order(store: Store) -> None:
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


async def test_run_status_commits_with_its_event(store: Store) -> None:
    store.create_run(record())
    store.append("r1", 1, [ev(1, "run_suspended", step_id=None)], run_status="suspended")
    store.append("r1", 1, [ev(2)])  # no status: unchanged
    await store.flush("r1", 1)
    run = store.get_run("r1")
    assert (run.status, run.updated_at) == ("suspended", 1002.0)
    assert [r.status for r in store.list_runs()] == ["suspended"]


def test_claim_is_a_compare_and_swap(store: Store) -> None:
    store.create_run(record())
    assert store.claim("r1", 1) == 2
    with pytest.raises(StaleEpochError) as info:
        store.claim("r1", 1)
    assert (info.value.epoch, info.value.current) == (1, 2)
    assert store.claim("r1", 2) == 3
    assert store.get_run("r1").epoch == 3


async def test_a_stale_writer_is_refused_and_stays_refused(store: Store) -> None:
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


async def test_writes_racing_a_claim_commit_whole_or_not_at_all(store: Store) -> None:
    store.create_run(record())
    events = [ev(i) for i in range(1, 201)]
    for e in events:
        store.append("r1", 1, [e])
    store.claim("r1", 1)  # lands somewhere in the stream of writes
    with contextlib.suppress(StaleEpochError):
        await store.flush("r1", 1)
    seqs = [e.seq for e in store.load_events("r1")]
    assert seqs == list(range(1, len(seqs) + 1))  # a prefix: nothing after a refusal


async def test_writing_to_an_unknown_run_fails_at_flush(store: Store) -> None:
    store.append("ghost", 1, [ev(1, run_id="ghost")])
    with pytest.raises(RunNotFoundError, match="'ghost'"):
        await store.flush("ghost", 1)


async def test_a_refused_writer_does_not_disturb_other_runs(store: Store) -> None:
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


async def test_reads_from_worker_threads_see_committed_events(store: Store) -> None:
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


def test_event_value_object() -> None:
    e = ev(7, "step_started", payload={"x": 1})
    assert str(e) == "[7] step_started a"
    assert e.to_dict()["payload"] == {"x": 1}
    with pytest.raises(AttributeError):
        e.seq = 8  # type: ignore[misc]
