"""Forks (DESIGN §11): the decision table, ledgers of tool calls (in this process and in a
new one from SQLite), approval of side-effecting descendants, forks of forks, bad input."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import (
    DecisionError,
    PlanError,
    RunNotFoundError,
    RunStateError,
    UnknownStepError,
)
from chainlab.events import EventKind, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.tools import Reconciliation

ROOT = Path(__file__).resolve().parents[2]


def make_toolbox(ledger: list[str], *, limit: int = 5) -> Toolbox:
    """fetch -> parse (fails above ``limit``) -> send (side effect); tally (effect-free) and
    mail (side effect) on their own; upsert: idempotent side effect with a reconcile."""
    tb = Toolbox("fork-tests")

    @tb.tool
    def fetch(n: int) -> int:
        ledger.append("fetch")
        return n * 2

    @tb.tool(retry={"max_attempts": 1})
    def parse(x: int) -> int:
        ledger.append("parse")
        if x > limit:
            raise ValueError(f"{x} is too big")
        return x + 1

    @tb.tool(side_effects=True)
    def send(v: int) -> str:
        ledger.append("send")
        return f"sent {v}"

    @tb.tool
    def tally(k: int) -> int:
        ledger.append("tally")
        return k

    @tb.tool(side_effects=True)
    def mail(to: str) -> str:
        ledger.append("mail")
        return f"mailed {to}"

    @tb.tool(side_effects=True, idempotent=True,
             reconcile=lambda args, key: Reconciliation(applied=False))
    def upsert(v: int) -> int:
        ledger.append("upsert")
        return v

    return tb


CHAIN = {
    "name": "pipeline",
    "steps": [
        {"id": "a", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
        {"id": "b", "tool": "parse", "args": {"x": "{{ steps.a.output }}"}},
        {"id": "c", "tool": "send", "args": {"v": "{{ steps.b.output }}"}},
        {"id": "d", "tool": "tally", "args": {"k": 7}},
        {"id": "e", "tool": "mail", "args": {"to": "ops"}},
        {"id": "u", "tool": "upsert", "args": {"v": "{{ steps.b.output }}"}},
    ],
}


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"run-{next(counter)}"


class World:
    def __init__(self, store: Any = None, limit: int = 5) -> None:
        self.ledger: list[str] = []
        self.toolbox = make_toolbox(self.ledger, limit=limit)
        self.store = store if store is not None else MemoryStore()
        self.runtime = Runtime(self.toolbox, self.store, id_factory=ids())
        self.chain = Chain.from_dict(CHAIN)

    async def parent(self, n: int = 2) -> Any:
        """A finished parent; side-effecting steps need no approval there."""
        run = await self.runtime.start(self.chain, {"n": n})
        await run.wait()
        return run

    def calls(self) -> list[str]:
        out = list(self.ledger)
        self.ledger.clear()
        return out


# ============================================================================ the table
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ({}, dict(a="reuse", b="reuse", c="reuse", d="reuse", e="reuse", u="reuse")),
        ({"args": {"a": {"n": 1}}},
         dict(a="rerun", b="rerun", c="confirm", d="reuse", e="reuse", u="rerun")),
        ({"context": {"n": 1}},
         dict(a="rerun", b="rerun", c="confirm", d="reuse", e="reuse", u="rerun")),
        ({"context": {"unused": 1}},
         dict(a="reuse", b="reuse", c="reuse", d="reuse", e="reuse", u="reuse")),
        ({"outputs": {"b": 5}},  # the same output as the parent's: nothing downstream moves
         dict(a="reuse", b="override", c="reuse", d="reuse", e="reuse", u="reuse")),
        ({"outputs": {"b": 9}},
         dict(a="reuse", b="override", c="confirm", d="reuse", e="reuse", u="rerun")),
        ({"rerun": ["d"]}, dict(a="reuse", b="reuse", c="reuse", d="rerun", e="reuse", u="reuse")),
        ({"rerun": "e"}, dict(a="reuse", b="reuse", c="reuse", d="reuse", e="confirm", u="reuse")),
        ({"rerun": ["a"]},
         dict(a="rerun", b="rerun", c="confirm", d="reuse", e="reuse", u="rerun")),
        ({"args": {"e": {"to": "dev"}}},
         dict(a="reuse", b="reuse", c="reuse", d="reuse", e="confirm", u="reuse")),
    ],
)
async def test_fork_plan_rows(edits: dict[str, Any], expected: dict[str, str]) -> None:
    w = World()
    parent = await w.parent()
    assert parent.status == RunStatus.SUCCEEDED
    plan = await w.runtime.fork_plan(parent.run_id, **edits)
    assert plan.decisions == expected
    assert plan.parent_run_id == parent.run_id
    assert plan.parent_seq == parent.last_seq


@pytest.mark.anyio
async def test_reasons_name_what_changed() -> None:
    w = World()
    parent = await w.parent()
    plan = await w.runtime.fork_plan(parent.run_id, args={"a": {"n": 1}})
    reasons = {r.step_id: r.reason for r in plan.rows}
    assert reasons == {
        "a": "args changed (n: 2 -> 1)",
        "b": "upstream 'a' runs again",
        "c": "upstream 'b' runs again; side-effecting: needs approval",
        "d": "succeeded; same tool, code and args",
        "e": "succeeded; same tool, code and args",
        "u": "upstream 'b' runs again",
    }
    reuse = plan.row("d")
    assert (reuse.source_run, reuse.source_attempt, reuse.output) == (parent.run_id, 1, 7)
    assert reuse.code == w.toolbox.get("tally").fingerprint


@pytest.mark.anyio
async def test_a_redefined_tool_reruns_its_steps() -> None:
    w = World()
    parent = await w.parent()

    def parse(x: int) -> int:  # edited body: a new code fingerprint
        w.ledger.append("parse")
        return x + 100

    w.toolbox._tools.pop("parse")
    w.toolbox.tool(parse, retry={"max_attempts": 1})
    plan = await w.runtime.fork_plan(parent.run_id)
    assert plan.decisions == dict(a="reuse", b="rerun", c="confirm", d="reuse", e="reuse",
                                  u="rerun")
    assert plan.row("b").reason.startswith("tool code changed (")


@pytest.mark.anyio
async def test_a_chain_with_another_tool_reruns_that_step() -> None:
    w = World()
    parent = await w.parent()
    data = json.loads(json.dumps(CHAIN))
    data["steps"][3]["tool"] = "fetch"
    data["steps"][3]["args"] = {"n": 7}
    plan = await w.runtime.fork_plan(parent.run_id, chain=Chain.from_dict(data))
    assert plan.row("d").decision == "rerun"
    assert plan.row("d").reason == "tool changed (tally -> fetch)"


# ============================================================================ ledgers
@pytest.mark.anyio
async def test_retry_from_the_failure_calls_only_the_failed_step_and_its_descendants() -> None:
    w = World()
    parent = await w.parent(n=4)  # fetch -> 8, parse fails
    assert parent.status == RunStatus.FAILED
    assert sorted(w.calls()) == ["fetch", "mail", "parse", "tally"]
    w.toolbox._tools.pop("parse")  # fix the tool: accept bigger numbers

    def parse(x: int) -> int:
        w.ledger.append("parse")
        return x + 1

    w.toolbox.tool(parse, retry={"max_attempts": 1})
    before = [e.to_dict() for e in parent.event_list()]
    fork = await w.runtime.fork(parent.run_id)
    result = await fork.wait()
    assert result.status == RunStatus.SUSPENDED
    assert result.waiting == {"c": "waiting_confirmation"}
    assert sorted(w.calls()) == ["parse", "upsert"]  # fetch, tally, mail reused; send waits
    card = next(e for e in fork.event_list() if e.kind == EventKind.STEP_WAITING_CONFIRMATION)
    assert card.payload["fork"]["note"] == f"skipped in run {parent.run_id}"
    await fork.approve("c")
    result = await fork.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs == {"a": 8, "b": 9, "c": "sent 9", "d": 7, "e": "mailed ops",
                              "u": 9}
    assert w.calls() == ["send"]
    # the parent is untouched: same events, same epoch
    assert [e.to_dict() for e in parent.event_list()] == before
    assert w.store.get_run(parent.run_id).epoch == 1
    assert fork.record.meta == {"forked_from": parent.run_id, "forked_at_seq": len(before)}
    kinds = [e.kind for e in fork.event_list()[:5]]
    assert kinds == [EventKind.RUN_STARTED, EventKind.RUN_FORKED, EventKind.STEP_REUSED,
                     EventKind.STEP_REUSED, EventKind.STEP_REUSED]
    reused = {e.step_id: e.payload for e in fork.event_list() if e.kind == EventKind.STEP_REUSED}
    assert sorted(reused) == ["a", "d", "e"]
    assert reused["a"]["source_run"] == parent.run_id and reused["a"]["source_attempt"] == 1


@pytest.mark.anyio
async def test_a_side_effecting_descendant_never_runs_without_approval() -> None:
    w = World()
    parent = await w.parent()
    w.calls()
    fork = await w.runtime.fork(parent.run_id, args={"a": {"n": 1}})
    result = await fork.wait()
    assert result.waiting == {"c": "waiting_confirmation"}
    assert "send" not in w.calls()
    card = fork.steps["c"]
    assert card.args == {"v": 3}
    payload = next(e for e in fork.event_list() if e.kind == EventKind.STEP_WAITING_CONFIRMATION)
    assert payload.payload["fork"]["note"] == (
        f'ran in run {parent.run_id} with args {{"v": 5}}, output "sent 5"')
    await fork.reject("c", "not again")
    result = await fork.wait()
    assert "send" not in w.calls()
    assert result.steps["c"] == "rejected"


@pytest.mark.anyio
async def test_override_the_failed_step() -> None:
    w = World()
    parent = await w.parent(n=4)
    w.calls()
    fork = await w.runtime.fork(parent.run_id, outputs={"b": 3})
    result = await fork.wait()
    assert w.calls() == ["upsert"]
    assert result.waiting == {"c": "waiting_confirmation"}
    assert fork.steps["b"].reused == {"decision": "override", "source_run": fork.run_id,
                                      "source_attempt": None, "code": None, "tool": "parse",
                                      "origin": "override"}


@pytest.mark.anyio
async def test_fork_of_a_fork_points_at_where_the_output_was_made() -> None:
    w = World()
    parent = await w.parent(n=4)
    first = await w.runtime.fork(parent.run_id, outputs={"b": 3})
    await first.wait()
    await first.approve("c")
    assert (await first.wait()).status == RunStatus.SUCCEEDED
    w.calls()
    plan = await w.runtime.fork_plan(first.run_id)
    assert set(plan.decisions.values()) == {"reuse"}
    assert plan.row("a").source_run == parent.run_id  # fetch ran in the grandparent
    assert plan.row("c").source_run == first.run_id
    assert plan.row("b").reason == f"output given in run {first.run_id}"
    second = await w.runtime.fork(first.run_id)
    result = await second.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert w.calls() == []
    assert result.outputs == (await first.wait()).outputs
    assert second.forked_from == {"forked_from": first.run_id,
                                  "forked_at_seq": first.last_seq}
    third = await w.runtime.fork_plan(second.run_id, args={"a": {"n": 1}})
    assert third.decisions["c"] == "confirm"


@pytest.mark.anyio
async def test_fork_a_suspended_run() -> None:
    w = World()
    data = json.loads(json.dumps(CHAIN))
    data["steps"][2]["confirm"] = True
    run = await w.runtime.start(Chain.from_dict(data), {"n": 2})
    assert (await run.wait()).waiting == {"c": "waiting_confirmation"}
    plan = await w.runtime.fork_plan(run.run_id)
    assert plan.decisions == dict(a="reuse", b="reuse", c="confirm", d="reuse", e="reuse",
                                  u="reuse")
    assert plan.row("c").reason == (
        "waiting_confirmation in the parent; side-effecting: needs approval")


@pytest.mark.anyio
async def test_reused_steps_never_call_their_tool_in_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    w = World(store)
    parent = await w.parent(n=4)
    await store.flush(parent.run_id, 1)
    store.close()
    script = (
        "import anyio, json, sys\n"
        "from chainlab.runtime import Runtime\n"
        "from chainlab.store import SQLiteStore\n"
        "from tests.runtime.test_fork import make_toolbox\n"
        "ledger = []\n"
        "async def main():\n"
        "    store = SQLiteStore(sys.argv[1])\n"
        "    rt = Runtime(make_toolbox(ledger, limit=100), store)\n"
        "    plan = await rt.fork_plan(sys.argv[2])\n"
        "    fork = await rt.fork(sys.argv[2])\n"
        "    result = await fork.wait()\n"
        "    await rt.aclose()\n"
        "    store.close()\n"
        "    print(json.dumps({'ledger': ledger, 'plan': plan.decisions,\n"
        "                      'waiting': result.waiting, 'fork': fork.run_id}))\n"
        "anyio.run(main)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(db), parent.run_id], cwd=ROOT, capture_output=True,
        text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # limit=100 changes no code, so only the failed step and its descendants run
    assert report["plan"] == dict(a="reuse", b="rerun", c="confirm", d="reuse", e="reuse",
                                  u="rerun")
    assert sorted(report["ledger"]) == ["parse", "upsert"]
    assert report["waiting"] == {"c": "waiting_confirmation"}
    again = SQLiteStore(db)
    try:
        stored = Runtime(make_toolbox([]), again).get_run(report["fork"])
        assert stored.steps["a"].reused is not None and stored.steps["a"].output == 8
        assert stored.record.meta["forked_from"] == parent.run_id
    finally:
        again.close()


# ============================================================================ sub-chains
@pytest.mark.anyio
async def test_sub_chain_steps_are_reused_together_or_run_together() -> None:
    w = World()
    inner = Chain.from_dict({"name": "inner", "steps": [
        {"id": "x", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
        {"id": "y", "tool": "tally", "args": {"k": "{{ steps.x.output }}"}},
    ]})
    w.toolbox.add_chain(inner)
    outer = Chain.from_dict({"name": "outer", "steps": [
        {"id": "g", "tool": "chain:inner", "args": {"n": "{{ context.n }}"}},
        {"id": "z", "tool": "tally", "args": {"k": "{{ steps.g.output.y }}"}},
    ]})
    run = await w.runtime.start(outer, {"n": 3})
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    w.calls()
    fork = await w.runtime.fork(run.run_id)
    assert (await fork.wait()).outputs == run.outputs
    assert w.calls() == []
    plan = await w.runtime.fork_plan(run.run_id, rerun=["g/y"])
    assert plan.decisions == {"g": "rerun", "g/x": "rerun", "g/y": "rerun", "z": "rerun"}
    fork = await w.runtime.fork(run.run_id, rerun=["g/y"])
    assert (await fork.wait()).status == RunStatus.SUCCEEDED
    assert sorted(w.calls()) == ["fetch", "tally", "tally"]


# ============================================================================ bad input
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("edits", "error", "match"),
    [
        ({"args": {"zz": {"n": 1}}}, UnknownStepError, "no step 'zz'"),
        ({"outputs": {"bb": 1}}, UnknownStepError, "no step 'bb'; did you mean 'b'"),
        ({"rerun": ["nope"]}, UnknownStepError, "no step 'nope'"),
        ({"args": {"a": {"n": "many"}}}, PlanError, r"\[invalid_args\] step 'a', args.n: "
         "n='many' does not fit tool 'fetch'"),
        ({"args": {"b": {"x": "ten"}}}, PlanError, r"\[invalid_args\] step 'b', args.x: "
         "x='ten' does not fit tool 'parse'"),
        ({"args": {"a": "n=1"}}, PlanError, "must be a mapping"),
        ({"outputs": {"b": "not a number"}}, DecisionError,
         "output given for step 'b' does not fit tool 'parse': output: Input should be a "
         "valid integer"),
        ({"context": {"n": object()}}, PlanError, "context must be JSON data"),
        ({"chain": Chain.from_dict({"name": "x", "steps": [{"id": "a", "tool": "fech"}]})},
         PlanError, "fech"),
    ],
)
async def test_bad_input_is_a_clear_error_and_writes_nothing(
    edits: dict[str, Any], error: type[Exception], match: str
) -> None:
    w = World()
    parent = await w.parent()
    events = [e.to_dict() for e in parent.event_list()]
    with pytest.raises(error, match=match):
        await w.runtime.fork_plan(parent.run_id, **edits)
    with pytest.raises(error, match=match):
        await w.runtime.fork(parent.run_id, **edits)
    assert [r.run_id for r in w.store.list_runs()] == [parent.run_id]
    assert [e.to_dict() for e in parent.event_list()] == events


@pytest.mark.anyio
async def test_unknown_run_and_running_run() -> None:
    w = World()
    with pytest.raises(RunNotFoundError, match="no run 'missing'"):
        await w.runtime.fork("missing")
    run = await w.runtime.start(w.chain, {"n": 2}, paused=True)
    with pytest.raises(RunStateError, match="it is paused; a fork starts from a suspended or "
                       "finished run"):
        await w.runtime.fork(run.run_id)
    assert len(w.store.list_runs()) == 1
    await run.cancel()
    await run.wait()


@pytest.mark.anyio
async def test_a_sub_chain_output_cannot_be_overridden_as_a_whole() -> None:
    w = World()
    w.toolbox.add_chain(Chain.from_dict({"name": "inner", "steps": [
        {"id": "x", "tool": "tally", "args": {"k": 1}}]}))
    run = await w.runtime.start(Chain.from_dict({"name": "o", "steps": [
        {"id": "g", "tool": "chain:inner"}]}))
    await run.wait()
    with pytest.raises(DecisionError, match=r"sub-chain step: give the outputs of its steps "
                       r"\(g/x\)"):
        await w.runtime.fork_plan(run.run_id, outputs={"g": {"x": 1}})


def test_plan_text_table() -> None:
    import anyio

    async def main() -> str:
        w = World()
        parent = await w.parent(n=4)
        return str(await w.runtime.fork_plan(parent.run_id))

    text = anyio.run(main)
    assert text.splitlines() == [
        "step  tool    parent     decision  reason",
        "a     fetch   succeeded  reuse     succeeded; same tool, code and args",
        "b     parse   failed     rerun     failed in the parent: execution_failed",
        "c     send    skipped    confirm   upstream 'b' runs again; side-effecting: needs "
        "approval",
        "d     tally   succeeded  reuse     succeeded; same tool, code and args",
        "e     mail    succeeded  reuse     succeeded; same tool, code and args",
        "u     upsert  skipped    rerun     upstream 'b' runs again",
    ]


@pytest.mark.anyio
async def test_timeline_diff_of_a_run_and_its_fork() -> None:
    pytest.importorskip("pandas")
    from chainlab.timeline import diff

    w = World()
    parent = await w.parent(n=4)
    fork = await w.runtime.fork(parent.run_id, outputs={"b": 3}, rerun=["d"])
    await fork.wait()
    await fork.approve("c")
    await fork.wait()
    frame = diff(parent, fork)
    cols = ["step_id", "status_a", "status_b", "attempts_a", "attempts_b", "same_output",
            "fork_b", "code_changed"]
    rows = [[None if v is pd_na() else v for v in r] for r in frame[cols].values.tolist()]
    assert rows == [
        ["a", "succeeded", "succeeded", 1, 0, True, "reuse", False],
        ["b", "failed", "succeeded", 1, 0, None, "override", None],
        ["c", "skipped", "succeeded", 0, 1, None, "-", None],
        ["d", "succeeded", "succeeded", 1, 1, True, "-", False],
        ["e", "succeeded", "succeeded", 1, 0, True, "reuse", False],
        ["u", "skipped", "succeeded", 0, 1, None, "-", None],
    ]
    assert (frame["duration_b_s"] >= 0).all()
    runs = w.runtime.runs_frame()
    lineage = dict(zip(runs["run_id"], runs["forked_from"], strict=True))
    assert lineage == {fork.run_id: parent.run_id, parent.run_id: None}
    assert list(fork.attempts()["code"]) == [
        w.toolbox.get(t).fingerprint for t in fork.attempts()["tool"]]


def pd_na() -> Any:
    import pandas as pd

    return pd.NA

