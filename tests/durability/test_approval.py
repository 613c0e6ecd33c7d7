"""Confirmation as a durable suspend/resume across processes (DESIGN §6), each process a
fresh interpreter: start a run, let it suspend and exit; approve (or reject) in a new
process that resumes the SAME run from the store. Edited args are validated again; a
rejection blocks everything downstream; several waiting steps are routed by step id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.tools import args_hash
from tests.durability.chainlib import CRASH_COMPENSABLE_STEPS, Ledger, make_toolbox
from tests.durability.harness import (
    EXIT_DONE,
    EXIT_PLAN,
    EXIT_SUSPENDED,
    FreshChild,
    check_log,
    check_saga,
    snapshot,
)

pytestmark = pytest.mark.xdist_group("durability-processes")



def worker(folder: Path, mode: str, *extra: str, chain: str = "crash") -> FreshChild:
    n = len(list(folder.glob("worker-*.log")))
    return FreshChild([str(folder / "runs.db"), str(folder / "ledger.jsonl"), "run", mode,
                       "--chain", chain, *extra], folder / f"worker-{n}.log")


def actions(*items: list[Any]) -> tuple[str, str]:
    return "--actions", json.dumps(list(items))


def start_suspended(folder: Path, chain: str = "crash") -> dict[str, Any]:
    child = worker(folder, "start", chain=chain)
    assert child.wait() == EXIT_SUSPENDED, child.output()
    return child.result()


def test_approve_with_edited_args_in_another_process(tmp_path: Path) -> None:
    first = start_suspended(tmp_path)
    assert first["waiting"] == {"g": "waiting_confirmation"}

    # what the approver sees is in the store: args, their hash, the preview, the status
    with SQLiteStore(tmp_path / "runs.db") as store:
        runtime = Runtime(make_toolbox(Ledger(tmp_path / "ledger.jsonl")), store)
        assert [r.run_id for r in runtime.runs()] == ["run"]
        view = runtime.get_run("run")  # read-only: this process does not drive it
        assert not view.active and view.status == "suspended"
        g = view.steps["g"]
        assert g.args == {"to": "acct-2", "amount": 15}
        assert g.args_hash == args_hash(g.args)
        assert g.preview == "transfer 15 to acct-2"

    bad = worker(tmp_path, "resume", *actions(["approve", "g", {"to": "acct-2", "amount": "lots"}]))
    assert bad.wait() == EXIT_PLAN, bad.output()
    assert "amount" in bad.result()["error"] and "'g'" in bad.result()["error"]
    snap = snapshot(tmp_path / "runs.db", tmp_path / "ledger.jsonl", "run")
    assert snap.state is not None and str(snap.state.steps["g"].status) == "waiting_confirmation"
    assert not [e for e in snap.events or () if e.kind == "step_approved"]
    assert snap.ledger_count("g") == 0

    ok = worker(tmp_path, "resume", *actions(["approve", "g", {"to": "acct-2", "amount": 12}]))
    assert ok.wait() == EXIT_DONE, ok.output()
    final = snapshot(tmp_path / "runs.db", tmp_path / "ledger.jsonl", "run")
    state = final.state
    assert state is not None and state.status == "succeeded"
    assert state.outputs["g"] == {"to": "acct-2", "amount": 12}  # what ran is what was approved
    assert state.steps["g"].approval is not None and state.steps["g"].approval["edited"]
    approved = [e for e in final.events or () if e.kind == "step_approved"]
    assert [e.payload["args_hash"] for e in approved] == [args_hash({"to": "acct-2", "amount": 12})]
    # every step ran exactly once across the three processes
    assert {s: final.ledger_count(s) for s in "abcdefghi"} == dict.fromkeys("abcdefghi", 1)
    assert {e["pid"] for e in final.ledger if e["step"] in "abcdef"} == {first["pid"]}
    assert {e["pid"] for e in final.ledger if e["step"] in "ghiz"} == {ok.result()["pid"]}
    check_log(final)


def test_rejection_in_another_process_blocks_downstream(tmp_path: Path) -> None:
    start_suspended(tmp_path)
    child = worker(tmp_path, "resume", *actions(["reject", "g", "not this month"]))
    assert child.wait() == EXIT_DONE, child.output()
    final = snapshot(tmp_path / "runs.db", tmp_path / "ledger.jsonl", "run")
    state = final.state
    # under fail_fast a rejection fails the run, and what completed is undone (DESIGN §6, §8)
    assert state is not None and state.status == "rolled_back"
    assert (state.steps["g"].status, state.steps["g"].reason) == ("rejected", "not this month")
    assert (state.steps["h"].status, state.steps["h"].reason) == ("skipped", "rejected")
    assert (state.steps["i"].status, state.steps["i"].reason) == ("skipped", "rejected")
    assert final.ledger_count("g") == final.ledger_count("h") == final.ledger_count("i") == 0
    assert (str(state.steps["c"].status), str(state.steps["d"].status)) == (
        "compensated", "compensated")
    check_saga(final, "rolled_back", CRASH_COMPENSABLE_STEPS)


def test_several_waiting_steps_are_routed_by_step_id(tmp_path: Path) -> None:
    first = start_suspended(tmp_path, chain="approval")
    assert first["waiting"] == dict.fromkeys(["p1", "p2", "t"], "waiting_confirmation")
    assert first["steps"]["q"] == "succeeded"  # the branch that needs nobody kept running
    child = worker(tmp_path, "resume", *actions(["approve", "p2", {"to": "bob", "amount": 25}],
                                                ["reject", "p1", "no"], ["approve", "t"]),
                   chain="approval")
    assert child.wait() == EXIT_DONE, child.output()
    final = snapshot(tmp_path / "runs.db", tmp_path / "ledger.jsonl", "run")
    state = final.state
    assert state is not None and state.status == "failed"  # a rejection is a failure
    assert {s: str(st.status) for s, st in state.steps.items()} == {
        "a": "succeeded", "b": "succeeded", "p1": "rejected", "p2": "succeeded", "q": "succeeded",
        "r": "skipped", "s": "succeeded", "t": "succeeded"}
    assert state.outputs["p2"] == {"to": "bob", "amount": 25}
    assert state.outputs["t"] == {"account": "audit", "charged": 3}
    assert state.steps["r"].reason == "rejected"
    assert final.ledger_count("p1") == final.ledger_count("r") == 0
