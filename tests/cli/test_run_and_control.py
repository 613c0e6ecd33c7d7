"""``chainlab run`` and the commands that continue a stored run in ANOTHER process:
approve, reject, resolve, resume (after a crash), rollback. Each checks the exit code, the
report, and the side effects the tools wrote."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import TOOLS, chainlab, env, ledger, write

ADD = """
name: adds
steps:
  - {id: one, tool: add, args: {a: 1, b: 2}}
  - {id: two, tool: add, args: {a: "{{ steps.one.output }}", b: 10}}
"""

PAYOUT = """
name: payout
steps:
  - {id: fee, tool: charge, args: {amount: 3}}
  - id: send
    tool: transfer
    depends_on: [fee]
    args: {to: "{{ context.to }}", amount: 100}
"""

PAY = """
name: pay
steps:
  - {id: pay, tool: pay, args: {amount: 7}}
  - {id: after, tool: add, args: {a: 1, b: 1}, depends_on: [pay]}
"""


def test_run_succeeds_with_json_result(tmp_path: Path) -> None:
    chain = write(tmp_path / "adds.yaml", ADD)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    data = r.json
    assert data["status"] == "succeeded"
    assert data["outputs"] == {"one": 3, "two": 13}
    assert [a["status"] for a in data["steps"]["two"]["attempts"]] == ["succeeded"]
    assert data["lineage"] is None and data["chain"] == "adds"  # the run's JSON view
    assert (tmp_path / ".chainlab" / "chainlab.db").is_file()


def test_run_report_and_progress_lines(tmp_path: Path) -> None:
    chain = write(tmp_path / "adds.yaml", ADD)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--concurrency", "1", cwd=tmp_path)
    assert r.code == 0
    assert "succeeded" in r.out and "one" in r.out and "two" in r.out
    assert "✓ one succeeded" in r.err and "✔ run" in r.err  # not a TTY: one line per event


def test_a_failed_run_exits_1(tmp_path: Path) -> None:
    chain = write(tmp_path / "f.yaml", """
name: fails
steps:
  - {id: boom, tool: fail, args: {message: no such account}}
""")
    r = chainlab("run", str(chain), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 1
    assert "failed" in r.out and "permanent: no such account" in r.out


def test_suspend_then_approve_in_another_process(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--context", '{"to": "alice"}',
                 cwd=tmp_path)
    assert r.code == 3, r.out + r.err
    run_id = r.run_id()
    assert f"chainlab approve {run_id} send" in r.out
    assert f"chainlab reject {run_id} send --reason" in r.out
    assert "send 100 to alice" in r.out  # the preview
    assert [e["entry"] for e in ledger(tmp_path)] == ["charge"]  # nothing sent yet

    # a new process: no --tools (the run remembers them), no context (stored)
    r2 = chainlab("approve", run_id, "send", "--note", "ok by me", "--json", cwd=tmp_path)
    assert r2.code == 0, r2.err
    assert r2.json["status"] == "succeeded"
    assert r2.json["outputs"]["send"] == {"to": "alice", "amount": 100}
    assert [e["entry"] for e in ledger(tmp_path)] == ["charge", "transfer"]

    shown = chainlab("show", run_id, cwd=tmp_path)
    assert shown.code == 0 and "succeeded" in shown.out and "transfer" in shown.out


FANOUT = """
name: payouts
steps:
  - id: send
    tool: transfer
    for_each: "{{ context.to }}"
    as: who
    args: {to: "{{ who }}", amount: "{{ index }}"}
"""


def test_approve_all_instances_of_a_for_each_step(tmp_path: Path) -> None:
    """``chainlab approve RUN STEP --all`` decides every waiting instance at once, each with
    its own args (issue 35 item 5)."""
    chain = write(tmp_path / "fanout.yaml", FANOUT)
    r = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": ["ann", "bo", "cy"]}',
                 cwd=tmp_path)
    assert r.code == 3, r.out + r.err
    run_id = r.run_id()
    assert ledger(tmp_path) == []  # nothing sent yet: three instances wait
    bad = chainlab("approve", run_id, "send", "--all", "--args", "{}", cwd=tmp_path)
    assert bad.code == 2 and "--all approves each step with its own args" in bad.err
    r2 = chainlab("approve", run_id, "send", "--all", "--note", "all three", "--json",
                  cwd=tmp_path)
    assert r2.code == 0, r2.err
    assert "approved 3 steps under send, each with its own args: send[0], send[1], " \
        "send[2]" in r2.err
    assert r2.json["status"] == "succeeded"
    assert r2.json["outputs"]["send"] == [{"to": "ann", "amount": 0}, {"to": "bo", "amount": 1},
                                          {"to": "cy", "amount": 2}]
    assert sorted((e["to"], e["amount"]) for e in ledger(tmp_path)) == [
        ("ann", 0), ("bo", 1), ("cy", 2)]  # each exactly once, with its own args
    again = chainlab("approve", run_id, "send", "--all", cwd=tmp_path)
    assert again.code != 0 and "nothing waits for a confirmation at or under step 'send'" \
        in again.err


def test_approve_with_edited_args(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    run_id = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": "alice"}',
                      cwd=tmp_path).run_id()
    write(tmp_path / "args.json", '{"to": "bob", "amount": 5}')
    r = chainlab("approve", run_id, "send", "--args", "@args.json", "--json", cwd=tmp_path)
    assert r.code == 0
    assert ledger(tmp_path)[-1] == {"entry": "transfer", "to": "bob", "amount": 5}


def test_approve_with_args_that_do_not_fit_is_a_usage_error(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    run_id = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": "alice"}',
                      cwd=tmp_path).run_id()
    r = chainlab("approve", run_id, "send", "--args", '{"to": "bob", "amount": "lots"}',
                 cwd=tmp_path)
    assert r.code == 2
    assert "amount" in r.err and "args do not fit tool" in r.err
    [waiting] = chainlab("show", run_id, "--json", cwd=tmp_path).json["waiting"]
    assert (waiting["step_id"], waiting["kind"]) == ("send", "confirm")
    assert chainlab("runs", "--json", cwd=tmp_path).json[0]["epoch"] == 1  # not taken over


def test_reject_rolls_back_what_was_done(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    run_id = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": "alice"}',
                      cwd=tmp_path).run_id()
    r = chainlab("reject", run_id, "send", "--reason", "wrong person", cwd=tmp_path)
    assert r.code == 4, r.out + r.err  # rolled back
    assert "rolled_back" in r.out
    assert [e["entry"] for e in ledger(tmp_path)] == ["charge", "refund"]
    steps = chainlab("show", run_id, "--json", cwd=tmp_path).json["steps"]
    assert steps["send"]["status"] == "rejected" and steps["send"]["reason"] == "wrong person"
    assert steps["fee"]["status"] == "compensated"


def test_rollback_of_a_finished_run(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    run_id = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": "alice"}',
                      cwd=tmp_path).run_id()
    assert chainlab("approve", run_id, "send", cwd=tmp_path).code == 0
    r = chainlab("rollback", run_id, cwd=tmp_path)
    assert r.code == 4
    assert [e["entry"] for e in ledger(tmp_path)] == ["charge", "transfer", "refund"]
    again = chainlab("rollback", run_id, cwd=tmp_path)
    assert again.code == 2 and "already rolled back" in again.err


def test_rollback_of_a_suspended_run(tmp_path: Path) -> None:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    run_id = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": "alice"}',
                      cwd=tmp_path).run_id()
    r = chainlab("rollback", run_id, "--json", cwd=tmp_path)
    assert r.code == 4, r.out + r.err
    assert r.json["steps"]["send"]["status"] == "cancelled"
    assert [e["entry"] for e in ledger(tmp_path)] == ["charge", "refund"]


@pytest.mark.parametrize("how,code,status", [
    (["--output", '{"paid": true}'], 0, "succeeded"),
    (["--fail", "--note", "bank says no"], 1, "failed"),
    (["--retry"], 3, "in_doubt"),  # it fails the same way again: in doubt again
])
def test_resolve_an_in_doubt_step(tmp_path: Path, how: list[str], code: int,
                                  status: str) -> None:
    chain = write(tmp_path / "pay.yaml", PAY)
    r = chainlab("run", str(chain), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 3
    run_id = r.run_id()
    assert "pay is in doubt" in r.out and f"chainlab resolve {run_id} pay" in r.out
    r2 = chainlab("resolve", run_id, "pay", *how, "--json", cwd=tmp_path)
    assert r2.code == code, r2.err
    steps = r2.json["steps"]
    assert steps["pay"]["status"] == status
    if status == "succeeded":
        assert steps["pay"]["output"] == {"paid": True}
        assert steps["after"]["status"] == "succeeded"
    if status == "in_doubt":
        assert len(steps["pay"]["attempts"]) == 2


def _wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_resume_after_the_process_was_killed(tmp_path: Path) -> None:
    chain = write(tmp_path / "slow.yaml", """
name: slow
steps:
  - {id: first, tool: add, args: {a: 1, b: 1}}
  - {id: block, tool: wait_while_file, args: {path: gate}, depends_on: [first]}
  - {id: last, tool: add, args: {a: 2, b: 2}, depends_on: [block]}
""")
    write(tmp_path / "gate", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "chainlab.cli", "run", str(chain), "--tools", TOOLS, "-q"],
        cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        _wait_for(lambda: (tmp_path / "started.flag").exists())
        db = tmp_path / ".chainlab" / "chainlab.db"
        _wait_for(lambda: _committed(db, "block"))  # the started attempt is durable
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    (tmp_path / "gate").unlink()
    with sqlite3.connect(db) as conn:
        [(run_id, status)] = conn.execute("select run_id, status from runs").fetchall()
    assert status == "running"  # nobody marked it: the process died

    r = chainlab("resume", run_id, "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert r.json["outputs"] == {"first": 2, "block": "went on", "last": 4}
    csv_path = tmp_path / "t.csv"
    assert chainlab("timeline", run_id, "--csv", str(csv_path), cwd=tmp_path).code == 0
    import csv

    rows = [(r["step_id"], r["attempt"], r["epoch"], r["status"])
            for r in csv.DictReader(csv_path.open())]
    assert rows == [("first", "1", "1", "succeeded"), ("block", "1", "1", "interrupted"),
                    ("block", "2", "2", "succeeded"), ("last", "1", "2", "succeeded")]
    again = chainlab("resume", run_id, cwd=tmp_path)
    assert again.code == 0 and "nothing to resume" in again.err


def _committed(db: Path, step_id: str) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db) as conn:
            return bool(conn.execute(
                "select 1 from events where kind = 'step_started' and step_id = ?",
                (step_id,)).fetchall())
    except sqlite3.Error:
        return False


def test_ctrl_c_exits_130_and_says_how_to_resume(tmp_path: Path) -> None:
    chain = write(tmp_path / "slow.yaml", """
name: slow
steps:
  - {id: block, tool: wait_while_file, args: {path: gate}}
""")
    write(tmp_path / "gate", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "chainlab.cli", "run", str(chain), "--tools", TOOLS],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (tmp_path / "started.flag").exists())
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        (tmp_path / "gate").unlink()  # the abandoned tool thread may now end
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    match = re.search(r"interrupted; run (\S+) stays in the store", err)
    assert match, err
    run_id = match.group(1)
    assert f"chainlab resume {run_id}" in err
    r = chainlab("resume", run_id, "--json", cwd=tmp_path)
    assert r.code == 0 and r.json["outputs"] == {"block": "went on"}


def test_show_folds_the_instances_of_a_large_for_each_step(tmp_path: Path) -> None:
    """A 40-instance step shows 5 instance rows under it and counts the rest in one row;
    the JSON view keeps every instance."""
    chain = write(tmp_path / "adds.yaml", """
name: many
steps:
  - id: add
    tool: add
    for_each: "{{ context.ns }}"
    args: {a: "{{ item }}", b: 1}
""")
    ns = list(range(40))
    r = chainlab("run", str(chain), "--tools", TOOLS, "-c", json.dumps({"ns": ns}),
                 cwd=tmp_path)
    assert r.code == 0, r.err
    shown = chainlab("show", r.run_id(), cwd=tmp_path, COLUMNS="120")
    assert shown.code == 0, shown.err
    rows = [line for line in shown.out.splitlines() if "add[" in line]
    assert len(rows) == 5, shown.out
    assert "… 35 more of add" in shown.out and "35 succeeded" in shown.out
    data = chainlab("show", r.run_id(), "--json", cwd=tmp_path).json
    assert data["outputs"]["add"] == [n + 1 for n in ns]
    assert len([s for s in data["steps"] if s.startswith("add[")]) == 40
