"""A run left ``running`` with no driver (issue 44: 2 of 16 kills of ``chainlab approve RUN
STEP --all`` left one) says so wherever a person looks, naming ``chainlab resume RUN``:
``chainlab show``, ``approve`` (``--all`` too: not only "nothing waits for a
confirmation"), ``approvals`` and ``runs``. A real ``chainlab approve --all`` subprocess is
killed with SIGKILL once its drive is inside a blocking call and its heartbeat is stored."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from .helpers import TOOLS, chainlab, env, ledger, write
from .test_run_and_control import FANOUT

FANOUT_THEN_BLOCK = FANOUT + """\
  - {id: block, tool: wait_while_file, args: {path: gate}, depends_on: [send]}
"""


def _rows(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute(sql, params).fetchall()
    except sqlite3.Error:
        return []


def _wait_for(what: str, predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_run_left_running_by_a_killed_approve_all_says_resume_everywhere(
        tmp_path: Path) -> None:
    chain = write(tmp_path / "payouts.yaml", FANOUT_THEN_BLOCK)
    r = chainlab("run", str(chain), "--tools", TOOLS, "-c", '{"to": ["ann", "bo"]}',
                 cwd=tmp_path)
    assert r.code == 3, r.out + r.err  # both transfers wait for a person
    run_id = r.run_id()
    db = tmp_path / ".chainlab" / "chainlab.db"
    write(tmp_path / "gate", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "chainlab.cli", "approve", run_id, "send", "--all", "-q"],
        cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        _wait_for("block to start", lambda: _rows(
            db, "select 1 from events where kind = 'step_started' and step_id = 'block'"))
        _wait_for("the approving process's heartbeat", lambda: _rows(
            db, "select 1 from drivers where run_id = ? and pid = ?", run_id, proc.pid))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert _rows(db, "select status from runs") == [("running",)]  # and nobody drives it
    gone = f"run {run_id} is running, but nobody drives it: its driver, pid {proc.pid}"
    resume = f"chainlab resume {run_id}"

    again = chainlab("approve", run_id, "send", "--all", cwd=tmp_path)
    assert again.code == 2, again.out + again.err
    assert f"nothing waits for a confirmation at or under step 'send' of run {run_id}: " \
        f"{gone}" in again.err
    assert f"take it over: {resume}\n" in again.err  # (the default database: no --db)
    one = chainlab("approve", run_id, "send[0]", cwd=tmp_path)
    assert one.code == 2 and gone in one.err and resume in one.err, one.err
    for argv in (["show", run_id], ["approvals"], ["runs"]):
        shown = chainlab(*argv, cwd=tmp_path)
        assert gone in shown.out and f"take it over: {resume}" in shown.out, (argv, shown.out)
    listed = chainlab("runs", "--json", cwd=tmp_path).json
    assert listed[0]["stalled"]["kind"] == "no_driver"
    assert listed[0]["stalled"]["action"] == "resume"
    assert sorted((e["to"], e["amount"]) for e in ledger(tmp_path)) == [("ann", 0), ("bo", 1)]

    (tmp_path / "gate").unlink()
    r = chainlab("resume", run_id, "--json", cwd=tmp_path)
    assert r.code == 0, r.err
    assert r.json["status"] == "succeeded"
    assert sorted((e["to"], e["amount"]) for e in ledger(tmp_path)) == [("ann", 0), ("bo", 1)]
    shown = chainlab("show", run_id, cwd=tmp_path)
    assert "nobody drives it" not in shown.out
