"""The Store contract, continued: driver heartbeats and the decision mailbox (DESIGN §13),
on every store of ``conftest.STORE_KINDS`` (memory, SQLite file, SQLite :memory:,
PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from chainlab.errors import RunNotFoundError, StaleEpochError, StoreError
from chainlab.store import Store
from chainlab.store.base import DecisionRequest, DriverInfo

from .conftest import record

ME = DriverInfo("drv-1", "host-a", 4242)


def request(step_id: str = "a", action: str = "approve", run_id: str = "r1",
            **payload: object) -> DecisionRequest:
    return DecisionRequest(run_id=run_id, step_id=step_id, action=action,
                           payload=dict(payload), by="alice", created_at=50.0)


def test_heartbeat_records_the_driver_and_its_beat(store: Store) -> None:
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


def test_heartbeat_is_fenced_by_the_epoch(store: Store) -> None:
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


def test_clear_driver_forgets_only_its_own_row(store: Store) -> None:
    store.create_run(record())
    store.heartbeat("r1", 1, ME)
    store.clear_driver("r1", "someone-else")
    assert store.driver_of("r1") is not None
    store.clear_driver("r1", "drv-1")
    assert store.driver_of("r1") is None


def test_requests_are_posted_listed_and_read_back(store: Store) -> None:
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


def test_an_answer_is_fenced_and_given_once(store: Store) -> None:
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


def test_bad_requests_are_refused(store: Store) -> None:
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
