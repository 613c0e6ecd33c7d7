"""``chainlab watch RUN``: a process follows, live, a run that ANOTHER process drives
(``chainlab run`` in a subprocess) on a SQLite file and on PostgreSQL, sees every event once,
in order, and exits with the run (exit code as ``chainlab run`` gives); a run that already
ended shows its final state; Ctrl-C stops watching, not the run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from chainlab.store import open_store
from tests.cli.helpers import TOOLS, chainlab, env, write
from tests.store.test_watch import store_url

GATED = """
name: gated
steps:
  - id: a
    tool: add
    args: {a: 1, b: 2}
  - id: gate
    tool: wait_while_file
    args: {path: gate}
    depends_on: [a]
  - id: b
    tool: add
    args: {a: "{{ steps.a.output }}", b: 10}
    depends_on: [gate]
"""

pytestmark = pytest.mark.xdist_group("durability-processes")


def cli(*args: str, cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "chainlab.cli", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def started_run_id(stream: IO[str]) -> str:
    """The run id from the driver's first progress line (``▶ run ID started: ...``)."""
    for line in stream:
        match = re.search(r"run (\S+) started", line)
        if match:
            return match.group(1)
    raise AssertionError("the driver printed no start line")


def start_gated(tmp_path: Path, db: str) -> tuple[subprocess.Popen[str], str]:
    """`chainlab run` of a chain whose middle step blocks while the file ``gate`` exists."""
    (tmp_path / "gate").write_text("closed")
    chain = write(tmp_path / "gated.yaml", GATED)
    driver = cli("run", str(chain), "--tools", TOOLS, "--db", db, cwd=tmp_path)
    assert driver.stderr is not None
    return driver, started_run_id(driver.stderr)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_watch_follows_a_run_driven_by_another_process(kind: str, tmp_path: Path) -> None:
    db = store_url(kind, tmp_path)
    open_store(db).close()  # the schema exists before the two processes start
    driver, run_id = start_gated(tmp_path, db)
    watcher = cli("watch", run_id, "--db", db, "--json", cwd=tmp_path)
    assert watcher.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        for line in watcher.stdout:
            seen.append(json.loads(line))
            if seen[-1]["kind"] == "step_started" and seen[-1]["step_id"] == "gate":
                # the watcher is live: the rest of the run happens only now
                assert all(e["step_id"] != "b" for e in seen)
                (tmp_path / "gate").unlink()
        assert watcher.wait(timeout=120) == 0, watcher.stderr.read()  # type: ignore[union-attr]
        assert driver.wait(timeout=120) == 0
    finally:
        for proc in (watcher, driver):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    store = open_store(db)
    try:
        stored = [(e.seq, str(e.kind), e.step_id, e.epoch) for e in store.load_events(run_id)]
    finally:
        store.close()
    assert [(e["seq"], e["kind"], e["step_id"], e["epoch"]) for e in seen] == stored
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))  # once, in order
    assert seen[-1]["kind"] == "run_succeeded"
    assert [e["step_id"] for e in seen if e["kind"] == "step_succeeded"] == ["a", "gate", "b"]
    after = chainlab("watch", run_id, "--db", db, cwd=tmp_path)  # ended: its final state
    assert after.code == 0, after.err
    assert re.search(rf"^run {run_id} \(gated\) succeeded", after.out, re.M), after.out


@pytest.mark.timeout(120)
def test_watch_shows_progress_lines_and_exits_with_the_runs_code(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    driver, run_id = start_gated(tmp_path, db)
    watcher = cli("watch", run_id, "--db", db, cwd=tmp_path)
    assert watcher.stderr is not None
    lines = []
    for line in watcher.stderr:  # progress goes to stderr, one line per notable event
        lines.append(line)
        if line.startswith("watching run"):
            (tmp_path / "gate").unlink()
    out = watcher.stdout.read()  # type: ignore[union-attr]
    assert watcher.wait(timeout=60) == 0
    assert driver.wait(timeout=60) == 0
    text = "".join(lines)
    assert "driven by" in text
    assert f"✔ run {run_id} succeeded" in text, text
    assert re.search(r"^b\s+│ add\s+│ succeeded", out, re.M), out


@pytest.mark.timeout(120)
def test_a_failed_run_exits_1_and_a_suspended_one_3_with_until_suspended(
        tmp_path: Path) -> None:
    failing = write(tmp_path / "failing.yaml", "name: failing\nsteps:\n  - id: x\n"
                                               "    tool: fail\n    args: {message: boom}\n")
    r = chainlab("run", str(failing), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 1
    watched = chainlab("watch", r.run_id(), cwd=tmp_path)
    assert watched.code == 1, watched.err
    assert "boom" in watched.out
    confirm = write(tmp_path / "confirm.yaml", "name: confirm\nsteps:\n  - id: t\n"
                                               "    tool: transfer\n"
                                               "    args: {to: bob, amount: 5}\n")
    r = chainlab("run", str(confirm), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 3
    watched = chainlab("watch", r.run_id(), "--until-suspended", cwd=tmp_path)
    assert watched.code == 3, watched.err
    assert "chainlab approve" in watched.out  # what a person can do now
    missing = chainlab("watch", "no-such-run", cwd=tmp_path)
    assert missing.code == 2 and "no-such-run" in missing.err


@pytest.mark.timeout(120)
def test_ctrl_c_stops_watching_not_the_run(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    driver, run_id = start_gated(tmp_path, db)
    watcher = cli("watch", run_id, "--db", db, cwd=tmp_path)
    assert watcher.stderr is not None
    for line in watcher.stderr:
        if line.startswith("watching run"):
            break
    watcher.send_signal(signal.SIGINT)
    err = watcher.stderr.read()
    assert watcher.wait(timeout=60) == 130
    assert "Traceback" not in err
    assert f"stopped watching run {run_id}" in err
    (tmp_path / "gate").unlink()
    assert driver.wait(timeout=60) == 0  # the run went on in its driver


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_approvals_lists_what_waits_across_runs(kind: str, tmp_path: Path) -> None:
    db = store_url(kind, tmp_path)
    open_store(db).close()  # a database with no run yet
    empty = chainlab("approvals", "--db", db, cwd=tmp_path)
    assert empty.code == 0 and "nothing waits for a decision" in empty.err
    confirm = write(tmp_path / "confirm.yaml", "name: confirm\nsteps:\n  - id: t\n"
                                               "    tool: transfer\n"
                                               "    args: {to: bob, amount: 5}\n")
    doubt = write(tmp_path / "doubt.yaml", "name: doubt\nsteps:\n  - id: p\n    tool: pay\n"
                                           "    args: {amount: 7}\n")
    done = write(tmp_path / "done.yaml", "name: done\nsteps:\n  - id: a\n    tool: add\n"
                                         "    args: {a: 1, b: 2}\n")
    ids = {}
    for name, chain in (("confirm", confirm), ("doubt", doubt), ("done", done)):
        r = chainlab("run", str(chain), "--tools", TOOLS, "--db", db, cwd=tmp_path)
        assert r.code == (0 if name == "done" else 3), r.err
        ids[name] = r.run_id()
    listed = chainlab("approvals", "--db", db, "--json", cwd=tmp_path)
    assert listed.code == 0, listed.err
    items = sorted(listed.json, key=lambda d: d["chain"])
    assert [(d["run_id"], d["step_id"], d["tool"], d["kind"]) for d in items] == [
        (ids["confirm"], "t", "transfer", "confirm"), (ids["doubt"], "p", "pay", "in_doubt")]
    assert items[0]["preview"] == "send 5 to bob" and items[0]["args"] == {"to": "bob",
                                                                           "amount": 5}
    assert "connection reset while paying 7" in items[1]["error"]
    assert all(d["since"] > 0 for d in items)
    table = chainlab("approvals", "--db", db, cwd=tmp_path)
    assert table.code == 0
    for run_id in (ids["confirm"], ids["doubt"]):
        assert run_id in table.out
    assert ids["done"] not in table.out
    assert "send 5 to bob" in table.out and "in doubt" in table.out
    assert "2 waiting" in table.out
