"""The JSON view of a run (chainlab.render.json): exact dicts for runs with a retry, a
confirmation, an in-doubt step and a fork (on a ManualClock, so every time is exact), and
JSON data whatever a tool put in its preview or output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chainlab.events import Event, EventKind, RunState
from chainlab.events.fold import read_run
from chainlab.render import record_dict, run_dict
from chainlab.store.base import RunRecord

from .scenarios import T0, Lab, retry_chain, saga_chain

pytestmark = pytest.mark.anyio


def view(lab: Lab, run_id: str) -> dict[str, Any]:
    record, _, state = read_run(lab.store, run_id)
    data = run_dict(record, state)
    assert json.loads(json.dumps(data, allow_nan=False)) == data  # JSON data, as it is
    return data


def call(attempt: int, start: float, end: float | None, status: str, *,
         error_kind: str | None = None, error: str | None = None,
         retry_delay_s: float | None = None, kind: str = "call") -> dict[str, Any]:
    return {"attempt": attempt, "kind": kind, "status": status, "started_at": T0 + start,
            "ended_at": None if end is None else T0 + end, "error_kind": error_kind,
            "error": error, "retry_delay_s": retry_delay_s, "usage": None}


def step(status: str, attempts: list[dict[str, Any]], output: Any = None, *,
         reason: str | None = None, error_kind: str | None = None, error: str | None = None,
         reused: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": status, "attempts": attempts, "output": output, "reason": reason,
            "error_kind": error_kind, "error": error, "reused": reused, "usage": None}


PARSED = {"tag": "ok", "rows": [1, 2, 3]}


async def test_a_run_with_a_retry() -> None:
    lab = Lab()
    run = await lab.start(retry_chain())
    await run.wait()
    assert view(lab, run.run_id) == {
        "run_id": "run-1", "chain": "retries", "status": "succeeded", "epoch": 1,
        "created_at": T0, "updated_at": T0 + 9.5, "lineage": None, "queue": None,
        "worker": None, "last_seq": 14,
        "steps": {
            "fetch": step("succeeded", [
                call(1, 0, 1, "failed", error_kind="transient", error="503 from upstream (1)",
                     retry_delay_s=2.0),
                call(2, 3, 4, "failed", error_kind="transient", error="503 from upstream (2)",
                     retry_delay_s=4.0),
                call(3, 8, 9, "succeeded"),
            ], "ok"),
            "parse": step("succeeded", [call(1, 9, 9.5, "succeeded")], PARSED),
        },
        "outputs": {"fetch": "ok", "parse": PARSED},
        "waiting": [],
        "usage": {},
        "output": None,
        "grants": [],
    }


async def test_a_confirmation_then_a_step_in_doubt() -> None:
    lab = Lab()
    run = await lab.start(saga_chain())
    await run.wait()  # pay waits for approval
    assert view(lab, run.run_id) == {
        "run_id": "run-1", "chain": "saga", "status": "suspended", "epoch": 1,
        "created_at": T0, "updated_at": T0 + 0.5, "lineage": None, "queue": None,
        "worker": None, "last_seq": 6,
        "steps": {
            "charge": step("succeeded", [call(1, 0, 0.5, "succeeded")], {"id": "ch-10"}),
            "pay": step("waiting_confirmation", []),
            "ship": step("pending", []),
        },
        "outputs": {"charge": {"id": "ch-10"}},
        "waiting": [{"step_id": "pay", "tool": "pay", "kind": "confirm",
                     "args": {"amount": 5}, "preview": {"amount": 5}, "error": None,
                     "since": T0 + 0.5}],
        "usage": {},
        "output": None,
        "grants": [],
    }
    lab.clock.advance(3.0)
    await run.approve("pay", note="ok", by="ada")
    await run.wait()  # ship went in doubt
    data = view(lab, run.run_id)
    doubt = "ConnectionError: connection reset after sending"
    assert (data["status"], data["last_seq"], data["updated_at"]) == ("suspended", 14, T0 + 5.5)
    assert data["steps"]["pay"] == {
        **step("succeeded", [call(1, 3.5, 4, "succeeded")], {"id": "pay-5"}),
        "decided": {"action": "approved", "by": "ada", "text": "ada"}}  # who (DESIGN §21)
    assert data["steps"]["ship"] == step(
        "in_doubt", [call(1, 4, 5.5, "failed", error_kind="transient", error=doubt)],
        reason="transient", error_kind="transient", error=doubt)
    assert data["waiting"] == [{
        "step_id": "ship", "tool": "ship", "kind": "in_doubt",
        "args": {"seconds": 1.5, "fail": "unsure"}, "preview": f"transient: {doubt}",
        "error": f"transient: {doubt}", "since": T0 + 5.5}]
    lab.clock.advance(2.0)
    await run.resolve("ship", fail=True)
    await run.wait()  # rolled back: nothing waits, compensations are attempts too
    data = view(lab, run.run_id)
    assert (data["status"], data["waiting"]) == ("rolled_back", [])
    assert data["steps"]["charge"]["attempts"][-1] == call(
        1, 7.75, 8.0, "succeeded", kind="compensation")


async def test_the_same_waiting_items_as_the_team_inbox() -> None:
    from chainlab.runtime.coordination.inbox import waiting_decisions

    lab = Lab()
    run = await lab.start(saga_chain())
    await run.wait()
    lab.clock.advance(3.0)
    await run.approve("pay")
    await run.wait()
    [inbox] = waiting_decisions(lab.store)
    [waiting] = view(lab, run.run_id)["waiting"]
    assert waiting == {k: v for k, v in inbox.to_dict().items()
                       if k in ("step_id", "tool", "kind", "args", "preview", "error", "since")}


async def test_a_fork_carries_its_lineage_and_what_it_reused() -> None:
    lab = Lab()
    async with lab.runtime:
        run = await lab.start(retry_chain())
        await run.wait()
        fork = await lab.runtime.fork(run.run_id, rerun="parse")
        await fork.wait()
    code = lab.toolbox.get("flaky").fingerprint
    assert view(lab, fork.run_id) == {
        "run_id": "run-2", "chain": "retries", "status": "succeeded", "epoch": 1,
        "created_at": T0 + 9.5, "updated_at": T0 + 10, "last_seq": 7,
        "lineage": {"forked_from": "run-1", "at_seq": 14}, "queue": None, "worker": None,
        "steps": {
            "fetch": step("succeeded", [], "ok", reason="reused from run run-1", reused={
                "decision": "reuse", "source_run": "run-1", "source_attempt": 3,
                "code": code, "tool": "flaky", "origin": "call"}),
            "parse": step("succeeded", [call(1, 9.5, 10, "succeeded")], PARSED),
        },
        "outputs": {"fetch": "ok", "parse": PARSED},
        "waiting": [],
        "usage": {},
        "output": None,
        "grants": [],
    }
    assert record_dict(lab.store.get_run(fork.run_id)) == {
        "run_id": "run-2", "chain": "retries", "status": "succeeded", "epoch": 1,
        "created_at": T0 + 9.5, "updated_at": T0 + 10, "steps": 2,
        "meta": {"forked_from": "run-1", "forked_at_seq": 14},
        "lineage": {"forked_from": "run-1", "at_seq": 14}, "queue": None, "worker": None}
    assert record_dict(lab.store.get_run(run.run_id))["lineage"] is None


def test_what_is_not_json_is_shown_by_its_repr() -> None:
    class Thing:
        def __repr__(self) -> str:
            return "<thing>"

    record = RunRecord("r", "c", "running", 1, T0, T0, {"name": "c", "steps": [
        {"id": "a", "tool": "t"}]})
    events = [Event("r", 1, T0, 1, EventKind.RUN_STARTED),
              Event("r", 2, T0, 1, EventKind.STEP_READY, step_id="a"),
              Event("r", 3, T0, 1, EventKind.STEP_WAITING_CONFIRMATION, step_id="a", payload={
                  "args": {"n": 1}, "preview": {"what": Thing(), "how": float("nan")}})]
    state = RunState.from_events("r", events, ["a"])
    data = run_dict(record, state)
    assert data["waiting"][0]["preview"] == {"what": "<thing>", "how": "nan"}
    assert data["steps"]["a"]["status"] == "waiting_confirmation"
    json.dumps(data, allow_nan=False)


def test_before_any_event_the_record_says_the_status() -> None:
    record = RunRecord("r", "c", "created", 0, T0, T0, {"name": "c", "steps": [
        {"id": "a", "tool": "t"}]})
    data = run_dict(record, RunState("r", ["a"]))
    assert (data["status"], data["last_seq"], data["waiting"]) == ("created", 0, [])
    assert data["steps"] == {"a": step("pending", [])}
