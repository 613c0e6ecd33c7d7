"""The fleet on the command line (DESIGN §19): ``chainlab run --enqueue`` (refused at once for
an unknown database, an invalid chain, a bad queue name; a key names one request),
``chainlab worker`` (drains on SIGTERM), ``chainlab workers``, ``chainlab queue`` and a
decision on a queue's run from ``chainlab approve`` (recorded, applied by the worker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainlab.store import SQLiteStore
from tests.cli.helpers import HERE, chainlab, env, write

pytestmark = pytest.mark.xdist_group("durability-processes")

CHAIN = """\
name: pay
steps:
  - {id: total, tool: add, args: {a: "{{ context.a }}", b: 1}}
  - {id: pay, tool: transfer,
     args: {to: "{{ context.to }}", amount: "{{ steps.total.output }}"}}
"""


def test_an_enqueue_is_refused_at_once_for_what_no_worker_could_run(tmp_path: Path) -> None:
    chain = write(tmp_path / "pay.yaml", CHAIN)
    missing = chainlab("run", str(chain), "--tools", "example_tools:toolbox", "--enqueue",
                       "--db", "nowhere.db", "-c", '{"a": 1, "to": "x"}', cwd=tmp_path)
    assert missing.code == 2 and "no chainlab database there" in missing.err
    assert not (tmp_path / "nowhere.db").exists()
    SQLiteStore(tmp_path / "q.db").close()
    bad = write(tmp_path / "bad.yaml", CHAIN.replace("tool: transfer", "tool: tarnsfer"))
    invalid = chainlab("run", str(bad), "--tools", "example_tools:toolbox", "--enqueue",
                       "--db", "q.db", "-c", '{"a": 1, "to": "x"}', cwd=tmp_path)
    assert invalid.code == 2 and "unknown tool 'tarnsfer'" in invalid.err
    queue = chainlab("run", str(chain), "--tools", "example_tools:toolbox", "--queue",
                     "two words", "--db", "q.db", "-c", '{"a": 1, "to": "x"}', cwd=tmp_path)
    assert queue.code == 2 and "not a simple identifier" in queue.err
    unknown = chainlab("run", str(chain), "--tools", "example_tools:toolbox", "--enqueue",
                       "--db", "postgresql://nobody@/nothing?host=/nonexistent", "-c",
                       '{"a": 1, "to": "x"}', cwd=tmp_path, timeout=60)
    assert unknown.code == 1 and "cannot reach the PostgreSQL server" in unknown.err
    assert SQLiteStore(tmp_path / "q.db").list_runs() == []


def test_enqueue_work_decide_and_drain(tmp_path: Path) -> None:
    chain = write(tmp_path / "pay.yaml", CHAIN)
    SQLiteStore(tmp_path / "q.db").close()
    args = ["--tools", "example_tools:toolbox", "--db", "q.db"]
    first = chainlab("run", str(chain), *args, "--enqueue", "--key", "order-1", "-c",
                     '{"a": 50, "to": "ada"}', cwd=tmp_path)
    assert first.code == 0, first.err
    run_id = first.out.strip()
    assert "queued run" in first.err and "chainlab worker" in first.err
    again = chainlab("run", str(chain), *args, "--enqueue", "--key", "order-1", "-c",
                     '{"a": 50, "to": "ada"}', cwd=tmp_path)
    assert again.out.strip() == run_id  # the same request: the same run
    other = chainlab("run", str(chain), *args, "--enqueue", "--key", "order-1", "-c",
                     '{"a": 51, "to": "ada"}', cwd=tmp_path)
    assert other.code == 1 and "was used for another request" in other.err
    listed = chainlab("runs", "--db", "q.db", cwd=tmp_path)
    assert "queues: default: 1 queued · 0 in progress · 0 suspended" in listed.out
    assert chainlab("queue", "default", "--db", "q.db", "--limit", "2",
                    cwd=tmp_path).out.strip() == \
        "default: 1 queued · 0 in progress (limit 2) · 0 suspended"
    worker = subprocess.Popen(
        [sys.executable, "-m", "chainlab.cli", "worker", *args, "--name", "cli-w",
         "--poll", "0.05"], cwd=tmp_path, env=env(PYTHONPATH=str(HERE)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        store = SQLiteStore(tmp_path / "q.db")
        deadline = time.monotonic() + 60
        while store.get_run(run_id).status != "suspended":  # a transfer waits for a person
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        fleet = json.loads(chainlab("workers", "--db", "q.db", "--json", cwd=tmp_path).out)
        [w] = fleet["workers"]
        assert (w["name"], w["queues"], w["state"], w["claimed"]) == (
            "cli-w", ["default"], "running", [])  # a suspended run holds no worker
        assert fleet["queues"] == [{"queue": "default", "queued": 0, "in_progress": 0,
                                    "suspended": 1, "limit": 2}]
        approved = chainlab("approve", run_id, "pay", "--db", "q.db", "--tools",
                            "example_tools:toolbox", cwd=tmp_path)
        assert approved.code == 0, approved.err
        assert "applied by worker 'cli-w' on host" in approved.err
        while store.get_run(run_id).status != "succeeded":
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        shown = json.loads(chainlab("show", run_id, "--db", "q.db", "--json",
                                    cwd=tmp_path).out)
        assert (shown["status"], shown["queue"]) == ("succeeded", "default")
        os.kill(worker.pid, signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, out
    assert "SIGTERM: draining" in out and "stopped after 2 claims" in out
    assert "claimed run" in out and "(decided)" in out
    assert SQLiteStore(tmp_path / "q.db").list_workers() == []
