"""SIGKILL in the middle of a rollback, then resume in a new process (issue 5 point 5).

Real subprocesses (tests/saga/worker.py) share a SQLite file. The chain completes a, d, b, c
and fails at e, so the rollback compensates c, b, d, a; d's compensation hangs, the test
kills the worker with SIGKILL once the outside world (an fsync'ed ledger) shows c and b done
and d under way, and a new process resumes. Each compensation's effect must appear exactly
once, compensations that had finished are never called again, and the run ends rolled_back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from chainlab.runtime import RunState
from chainlab.store import SQLiteStore

WORKER = Path(__file__).with_name("worker.py")
ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "crash-run"
ORDER = ["c", "b", "d", "a"]  # reverse completion; reverse declaration would be d, c, b, a


class Worker:
    def __init__(self, tmp: Path, *flags: str):
        self.tmp = tmp
        self.db = tmp / "saga.db"
        self.flags = list(flags)

    def cmd(self, mode: str, *extra: str) -> list[str]:
        return [sys.executable, str(WORKER), str(self.db), str(self.tmp), RUN_ID, mode,
                *self.flags, *extra]

    def spawn(self, mode: str, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.cmd(mode, *extra), cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, mode: str) -> dict[str, Any]:
        proc = subprocess.run(self.cmd(mode), cwd=ROOT, text=True, capture_output=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def ledger(self, name: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{name}.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def kill_when(self, proc: subprocess.Popen[str], ready: Any) -> None:
        deadline = time.monotonic() + 30
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"worker ended before the kill point: {proc.communicate()}")
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"kill point never reached: {proc.communicate()} "
                            f"{self.ledger('calls')} {self.ledger('effects')}")
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("window,unsafe", [
    ("after", False),   # the effect happened, its answer was lost; undo is idempotent
    ("before", False),  # killed before the effect
    ("after", True),    # undo is not safe to repeat: an operator must look, then rollback()
], ids=["after_effect-idempotent", "before_effect-idempotent", "after_effect-unsafe"])
def test_sigkill_during_rollback_then_resume(tmp_path: Path, window: str,
                                             unsafe: bool) -> None:
    w = Worker(tmp_path, *(["--unsafe-undo"] if unsafe else []))
    proc = w.spawn("start", "--slow", "d", "--window", window)
    names = (lambda: [e["name"] for e in w.ledger("effects")]) if window == "after" else \
        (lambda: [c["name"] for c in w.ledger("calls")])
    w.kill_when(proc, lambda: names() == ["c", "b", "d"])

    with SQLiteStore(w.db) as store:
        assert store.get_run(RUN_ID).status == "compensating"
        state = RunState.from_events(RUN_ID, store.load_events(RUN_ID))
    assert state.completion == ["a", "d", "b", "c"]  # not declaration order
    assert {sid: str(st.status) for sid, st in state.steps.items()} == {
        "a": "succeeded", "b": "compensated", "c": "compensated", "d": "compensating",
        "e": "failed"}

    out = w.run("resume")
    if unsafe:
        # d's effect is unknown: not repeated blindly, the rest goes on (best effort)
        assert out["status"] == "rollback_failed"
        assert out["steps"]["d"] == "compensation_failed" and out["steps"]["a"] == "compensated"
        with SQLiteStore(w.db) as store:
            end = store.load_events(RUN_ID)[-1]
        assert end.kind == "run_rollback_failed" and end.payload["failed"] == ["d"]
        out = w.run("rollback")  # the operator checked the world: run the rest again
        assert out["epoch"] == 3
    assert out["status"] == "rolled_back"
    assert out["steps"] == {"a": "compensated", "b": "compensated", "c": "compensated",
                            "d": "compensated", "e": "failed"}

    # ---- the outside world: every effect exactly once, in reverse completion order
    effects = w.ledger("effects")
    assert [e["name"] for e in effects] == ORDER
    calls = w.ledger("calls")
    per_name = {n: [c for c in calls if c["name"] == n] for n in ORDER}
    assert [len(per_name[n]) for n in ORDER] == [1, 1, 2, 1]  # only d's call repeats
    assert len({c["key"] for c in per_name["d"]}) == 1  # ... with the same key
    assert per_name["d"][0]["pid"] != per_name["d"][1]["pid"]
    assert all(c["kind"] == "compensation" for c in calls)
    keys = {e["name"]: e["key"] for e in effects}

    # ---- the store: compensation attempts in the attempts view, fenced by epoch
    final_epoch = 3 if unsafe else 2
    with SQLiteStore(w.db) as store:
        assert store.get_run(RUN_ID).status == "rolled_back"
        assert store.get_run(RUN_ID).epoch == final_epoch
        rows = store.query(
            "SELECT step_id, attempt, epoch, status, idempotency_key FROM attempts "
            "WHERE run_id = ? AND kind = 'compensation' ORDER BY epoch, attempt, step_id",
            (RUN_ID,))
        calls_rows = store.query("SELECT count(*) FROM attempts WHERE run_id = ? AND "
                                 "kind = 'call'", (RUN_ID,))
        order = [r[0] for r in store.query(
            "SELECT step_id FROM events WHERE run_id = ? AND kind = 'compensation_started' "
            "ORDER BY seq", (RUN_ID,))]
    assert calls_rows == [(5,)]  # no step was re-run
    assert sorted(rows) == sorted([
        ("c", 1, 1, "succeeded", keys["c"]), ("b", 1, 1, "succeeded", keys["b"]),
        ("d", 1, 1, "interrupted", keys["d"]),
        ("d", 2, final_epoch, "succeeded", keys["d"]),
        ("a", 1, 2, "succeeded", keys["a"])])
    # unsafe: d was given up in epoch 2 (after a), and done again by the operator's rollback
    assert order == (["c", "b", "d", "a", "d"] if unsafe else ["c", "b", "d", "d", "a"])
