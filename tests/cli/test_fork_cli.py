"""``chainlab fork``: the plan (nothing written), a fork that reuses what did not change and
waits for approval of a side effect, bad input (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import TOOLS, chainlab, write

CHAIN = """
name: adds
steps:
  - {id: one, tool: add, args: {a: 1, b: 2}}
  - {id: two, tool: fail, args: {message: "nope"}, depends_on: [one]}
  - {id: three, tool: charge, args: {amount: "{{ steps.one.output }}"}, depends_on: [two]}
"""


def _failed_run(tmp_path: Path) -> str:
    chain = write(tmp_path / "c.yaml", CHAIN)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--json", cwd=tmp_path)
    assert r.code == 1, r.err
    return str(r.json["run_id"])


def _runs(tmp_path: Path) -> list[str]:
    r = chainlab("runs", "--json", cwd=tmp_path)
    return [row["run_id"] for row in r.json]


def test_fork_plan_then_fork_with_an_override(tmp_path: Path) -> None:
    run_id = _failed_run(tmp_path)
    r = chainlab("fork", run_id, "--plan", "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    plan = r.json
    assert [(s["step"], s["decision"]) for s in plan["steps"]] == [
        ("one", "reuse"), ("two", "rerun"), ("three", "confirm")]
    assert _runs(tmp_path) == [run_id]  # --plan writes nothing
    r = chainlab("fork", run_id, "--output", "two=null", "--json", cwd=tmp_path)
    assert r.code == 3, r.err  # suspended: the charge waits for a person
    fork_id = r.json["run_id"]
    assert r.json["steps"]["three"]["status"] == "waiting_confirmation"
    assert not (tmp_path / "ledger.jsonl").exists()  # nothing charged without approval
    r = chainlab("approve", fork_id, "three", "--json", cwd=tmp_path)  # tools from its meta
    assert r.code == 0, r.err
    charges = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert [(c["entry"], c["amount"]) for c in charges] == [("charge", 3)]


def test_fork_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    run_id = _failed_run(tmp_path)
    for args, message in [
        (["--output", "nope=1"], "run has no step 'nope'"),
        (["--args", "two=3"], "--args two: args are a JSON object, got int"),
        (["--args", "one"], "--args 'one' must be STEP=JSON"),
        (["--args", 'one={"a": "x"}'], "[invalid_args] step 'one', args.a"),
        (["--from", "zzz"], "run has no step 'zzz'"),
    ]:
        r = chainlab("fork", run_id, *args, cwd=tmp_path)
        assert r.code == 2, (args, r.out, r.err)
        assert message in r.err, (args, r.err)
    r = chainlab("fork", "no-such-run", cwd=tmp_path)
    assert r.code == 2 and "no run 'no-such-run'" in r.err
    assert _runs(tmp_path) == [run_id]


def test_runs_show_the_lineage_of_a_fork() -> None:
    from chainlab.cli.views import runs_table
    from chainlab.jupyter.views import RunsTable
    from chainlab.store.base import RunRecord

    parent = RunRecord("p1", "c", "failed", 1, 0.0, 0.0, {"name": "c", "steps": []})
    child = parent.with_(run_id="f1", meta={"forked_from": "p1", "forked_at_seq": 12})
    assert (parent.lineage, child.lineage) == (None, "p1@12")
    assert [c.header for c in runs_table([parent]).columns][-1] == "updated"
    table = runs_table([child, parent])
    assert table.columns[-1].header == "forked from"
    assert list(table.columns[-1].cells) == ["p1@12", ""]
    assert "forked from p1@12" in repr(RunsTable([child, parent], "x.db"))
    assert "<th>forked from</th>" in RunsTable([child], "x.db")._repr_html_()
