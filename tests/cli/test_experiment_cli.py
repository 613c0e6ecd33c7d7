"""``chainlab experiment``: the plan (nothing written), an experiment whose recorded charge is
answered from the recording (never made again) and whose changed charge stops at
needs_live_effect, the stored table read back (``--show``, ``--list``, ``--diff``), bad input
(exit 1, nothing started), replays kept out of ``chainlab runs``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .helpers import TOOLS, chainlab, env, write

CHAIN = """
name: bill
inputs: {n: {type: integer}}
steps:
  - {id: one, tool: add, args: {a: "{{ context.n }}", b: 2}}
  - {id: two, tool: charge, args: {amount: "{{ steps.one.output }}"}}
"""


def _charges(tmp_path: Path) -> list[int]:
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line)["amount"] for line in lines if '"charge"' in line]


def _recorded(tmp_path: Path) -> list[str]:
    """Two runs of CHAIN (charges of 3 and 7), their ids."""
    chain = write(tmp_path / "c.yaml", CHAIN)
    ids = []
    for n in (1, 5):
        r = chainlab("run", str(chain), "--tools", TOOLS, "--context", json.dumps({"n": n}),
                     "--json", cwd=tmp_path)
        assert r.code == 0, r.err
        ids.append(r.json["run_id"])
    return ids


def test_experiment_table_plan_show_and_bad_input(tmp_path: Path) -> None:
    ids = _recorded(tmp_path)
    assert _charges(tmp_path) == [3, 7]
    changed = write(tmp_path / "c2.yaml", CHAIN.replace("b: 2", "b: 3"))
    r = chainlab("experiment", *ids, "--chain", str(changed), "--plan", "--json",
                 cwd=tmp_path)
    assert r.code == 0, r.err
    assert {(s["step"], s["decision"]) for s in r.json["steps"]} == {
        ("one", "live"), ("two", "at_run_time")}
    r = chainlab("experiment", *ids, "--json", "--name", "same", cwd=tmp_path)
    assert r.code == 0, r.err
    assert [row["outcome"] for row in r.json["rows"]] == ["same", "same"]
    assert _charges(tmp_path) == [3, 7]  # answered from the recording: not charged again
    r = chainlab("experiment", *ids, "--chain", str(changed), cwd=tmp_path)
    assert r.code == 0, r.err
    assert "needs_live_effect" in r.out and "two=charge" in r.out
    assert _charges(tmp_path) == [3, 7]  # a NEW charge is not made
    # --live: the new charge waits for a person; `chainlab approve` makes it (toolbox kept)
    r = chainlab("experiment", ids[0], "--chain", str(changed), "--live", "charge", "--json",
                 cwd=tmp_path)
    assert r.code == 0, r.err
    (row,) = r.json["rows"]
    assert row["outcome"] == "waiting" and _charges(tmp_path) == [3, 7]
    r = chainlab("approve", row["new_run"], "two", cwd=tmp_path)
    assert r.code == 0, r.err
    assert _charges(tmp_path) == [3, 7, 4]  # made once, after approval
    listed = chainlab("experiment", "--list", "--json", cwd=tmp_path).json[1:]
    assert [e["name"] for e in listed][1] == "same"
    shown = chainlab("experiment", "--show", listed[0]["experiment"], "--json", cwd=tmp_path)
    assert [row["outcome"] for row in shown.json["rows"]] == ["needs_live_effect"] * 2
    text = chainlab("experiment", "--show", listed[0]["experiment"], "--diff", ids[0],
                    cwd=tmp_path).out
    assert "~ two:" in text and "needs_live_effect: NOT made" in text
    runs = [row["run_id"] for row in chainlab("runs", "--json", cwd=tmp_path).json]
    assert sorted(runs) == sorted(ids)  # the replays are kept out of `chainlab runs`
    r = chainlab("experiment", ids[0], "nope", cwd=tmp_path)
    assert r.code == 1 and "run 'nope' does not exist" in r.err, r.err
    r = chainlab("experiment", "--show", "exp-nope", cwd=tmp_path)
    assert r.code == 1 and "no experiment 'exp-nope'" in r.err, r.err


def test_export_test_of_an_experiment(tmp_path: Path) -> None:
    ids = _recorded(tmp_path)
    changed = write(tmp_path / "c2.yaml", CHAIN.replace("b: 2", "b: 3"))
    r = chainlab("experiment", *ids, "--chain", str(changed), "--json", cwd=tmp_path)
    experiment_id = r.json.get("experiment")
    assert experiment_id, r.out
    r = chainlab("export-test", "--experiment", experiment_id, "-o", "tests/test_exp.py",
                 cwd=tmp_path)
    assert r.code == 0, r.err
    text = (tmp_path / "tests" / "test_exp.py").read_text()
    assert "'needs_live_effect'" in text
    charges = _charges(tmp_path)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_exp.py"], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert _charges(tmp_path) == charges  # the exported test made no charge
