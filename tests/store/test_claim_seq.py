"""The Store contract for ``claim(run_id, expected_epoch, expected_seq)``: check-and-claim in
one step, on every store (MemoryStore, SQLiteStore on a file and on ':memory:')."""

from __future__ import annotations

import threading

import pytest

from chainlab.errors import RunNotFoundError, StaleEpochError
from chainlab.store import Store

from .conftest import ev, record

pytestmark = pytest.mark.anyio


async def _log(store: Store, *seqs: int, epoch: int = 1) -> None:
    store.append("r1", epoch, [ev(s, epoch=epoch) for s in seqs])
    await store.flush("r1", epoch)


def test_a_run_without_events_is_at_seq_0(store: Store) -> None:
    store.create_run(record())
    assert store.claim("r1", 1, expected_seq=0) == 2
    assert store.get_run("r1").epoch == 2


async def test_claim_succeeds_when_the_log_is_where_the_caller_read_it(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1, 2, 3)
    assert store.claim("r1", 1, expected_seq=3) == 2
    assert store.get_run("r1").epoch == 2
    assert store.is_stale("r1", 1) is False  # nothing of epoch 1 was refused yet
    store.append("r1", 1, [ev(4)])  # the old owner is fenced off as with a plain claim
    with pytest.raises(StaleEpochError):
        await store.flush("r1", 1)


async def test_claim_fails_when_the_log_moved_on(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1, 2)
    seen = 2  # what a caller read before deciding
    await _log(store, 3)  # the owner wrote on meanwhile
    with pytest.raises(StaleEpochError) as info:
        store.claim("r1", 1, expected_seq=seen)
    err = info.value
    assert (err.run_id, err.epoch, err.current, err.moved_on) == ("r1", 1, 1, (2, 3))
    assert str(err) == ("run 'r1' moved on since it was read (last event 2, now 3): another "
                        "process decided or drives it; read it again")
    assert store.get_run("r1").epoch == 1  # nothing was claimed
    await _log(store, 4)  # the owner is not fenced off by a failed claim
    assert [e.seq for e in store.load_events("r1")] == [1, 2, 3, 4]
    assert store.claim("r1", 1, expected_seq=4) == 2


async def test_a_log_behind_the_caller_also_fails(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1)
    with pytest.raises(StaleEpochError) as info:
        store.claim("r1", 1, expected_seq=5)
    assert info.value.moved_on == (5, 1)


async def test_a_moved_epoch_is_reported_as_such_first(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1)
    assert store.claim("r1", 1) == 2
    with pytest.raises(StaleEpochError) as info:
        store.claim("r1", 1, expected_seq=7)
    assert (info.value.epoch, info.value.current, info.value.moved_on) == (1, 2, None)
    assert "writer epoch 1 is stale (the store is at epoch 2)" in str(info.value)


def test_unknown_run_with_expected_seq(store: Store) -> None:
    store.create_run(record("run-alpha"))
    with pytest.raises(RunNotFoundError, match=r"'run-alpah'.*did you mean 'run-alpha'"):
        store.claim("run-alpah", 1, expected_seq=0)


async def test_only_committed_events_count(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1)
    store.append("r1", 1, [ev(2)])
    await store.flush("r1", 1)
    with pytest.raises(StaleEpochError, match=r"last event 1, now 2"):
        store.claim("r1", 1, expected_seq=1)


async def test_racing_claims_on_the_same_state_have_one_winner(store: Store) -> None:
    store.create_run(record())
    await _log(store, 1, 2)
    start = threading.Barrier(8)
    won: list[int] = []
    lost: list[StaleEpochError] = []

    def claim() -> None:
        start.wait()
        try:
            won.append(store.claim("r1", 1, expected_seq=2))
        except StaleEpochError as exc:
            lost.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won == [2] and len(lost) == 7
    assert {(e.epoch, e.current) for e in lost} == {(1, 2)}
    assert store.get_run("r1").epoch == 2
