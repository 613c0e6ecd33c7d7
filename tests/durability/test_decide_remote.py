"""Decisions and takeover across real processes (DESIGN §13), on a SQLite file and on the
session's PostgreSQL server: process A (tests/durability/decide_driver.py) drives a run that
waits for the approval of ``pay``, a side-effecting, non-idempotent step whose every call
is a line in a ledger file (the outside world).

* another process approves: the ``chainlab approve`` command line, or a Runtime in this
  test process; A applies the approval and finishes the run; pay is called once, by A;
* a decision A refuses comes back with A's message;
* resume refuses A's live run (naming its pid and host), ``force`` takes it over, and A,
  fenced, commits nothing afterwards (its own approval is refused; pay runs once, by B);
* A is SIGKILLed inside ``pay``: its run is taken over once its heartbeat is stale (or at
  once when its pid is gone), with 0 duplicated effects.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab.errors import DecisionError, DriverAliveError
from chainlab.events import EventKind, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import Store, open_store
from tests.durability.decide_driver import make_toolbox, read_ledger
from tests.store.test_watch import store_url

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("durability-processes")]
ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.durability.decide_driver:TOOLBOX"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Driver:
    """Process A: ``python -m tests.durability.decide_driver URL RUN_ID LEDGER ...``."""

    def __init__(self, url: str, run_id: str, ledger: Path, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.durability.decide_driver", url, run_id, str(ledger),
             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_suspended(self) -> None:
        """Until A says its run waits for the approval (and its heartbeat is stored)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip() == "suspended":
                return
        raise AssertionError(f"driver exited ({self.proc.wait()}): {''.join(self.lines)}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "".join(self.lines) + out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    found = store_url(request.param, tmp_path)
    open_store(found).close()  # the schema exists before A starts
    yield found


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("CHAINLAB_TEST_LEDGER", str(path))
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chainlab.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def pay_pids(ledger: Path) -> list[Any]:
    return [e["pid"] for e in read_ledger(ledger) if e["tool"] == "pay"]


@pytest.mark.parametrize("via", ["cli", "runtime"])
async def test_an_approval_from_another_process_reaches_the_driver(
        url: str, ledger: Path, via: str) -> None:
    # the CLI does not know the run's tools (a notebook's run): its live driver does
    a = Driver(url, "r1", ledger, *(["--anonymous"] if via == "cli" else []))
    try:
        a.wait_suspended()
        if via == "cli":
            refused = cli("approve", "r1", "prep", "--db", url, "--quiet")
            assert refused.returncode == 2, refused.stderr
            assert "cannot approve step 'prep' of run 'r1': it is succeeded" in refused.stderr
            done = cli("approve", "r1", "pay", "--db", url, "--note", "from the cli", "--quiet")
            assert done.returncode == 0, done.stderr
            assert f"approve pay: applied by its driver, pid {a.pid} on host " \
                   f"{socket.gethostname()!r}" in done.stderr
        else:
            store = open_store(url)
            try:
                async with Runtime(make_toolbox(), store) as b:
                    with pytest.raises(DecisionError, match="cannot approve step 'prep'"):
                        await b.decide("r1", "prep", "approve")
                    assert await b.decide("r1", "pay", "approve", by="bob",
                                          note="from the test") == "applied"
                    assert not b.get_run("r1").active
            finally:
                store.close()
        code, out = a.finish()
        assert code == 0 and out.splitlines()[-1] == "succeeded", out
    finally:
        a.kill()
    assert pay_pids(ledger) == [a.pid]  # called once, by the driver
    store = open_store(url)
    try:
        approved = [e for e in store.load_events("r1") if e.kind == EventKind.STEP_APPROVED]
        assert [(e.step_id, e.epoch) for e in approved] == [("pay", 1)]
        assert approved[0].payload["note"] == f"from the {via if via == 'cli' else 'test'}"
        assert store.get_run("r1").status == RunStatus.SUCCEEDED
    finally:
        store.close()


async def test_resume_refuses_a_live_driver_and_force_fences_it(
        url: str, ledger: Path, tmp_path: Path) -> None:
    go = tmp_path / "approve-now"  # A approves pay itself once this file exists
    a = Driver(url, "r1", ledger, "--self-approve-when", str(go))
    try:
        a.wait_suspended()
        refused = cli("resume", "r1", "--db", url, "--tools", TOOLS, "--quiet")
        assert refused.returncode == 2, refused.stderr
        text = " ".join(refused.stderr.split())
        assert f"driven by pid {a.pid} on host {socket.gethostname()!r} (epoch 1)" in text
        assert "--force" in text
        store = open_store(url)
        try:
            async with Runtime(make_toolbox(), store) as b:
                with pytest.raises(DriverAliveError) as info:
                    await b.resume("r1")
                assert (info.value.pid, info.value.host) == (a.pid, socket.gethostname())
                run = await b.resume("r1", force=True)
                claimed = run.state.last_seq
                go.touch()  # A goes on as if nothing happened: it approves pay itself
                code, out = a.finish()
                assert code == 3 and "fenced: run 'r1': writer epoch 1 is stale" in out, out
                await run.approve("pay", note="by B")
                assert (await run.wait()).ok
            events = store.load_events("r1")
        finally:
            store.close()
    finally:
        a.kill()
    assert pay_pids(ledger) == [os.getpid()]  # once, by B: A's call never happened
    assert all(e.epoch == 2 for e in events if e.seq > claimed)
    assert [e.payload.get("note") for e in events if e.kind == EventKind.STEP_APPROVED] == [
        "by B"]


@pytest.mark.parametrize("reaped", [False, True])
async def test_a_sigkilled_driver_is_taken_over_with_no_duplicate_effect(
        url: str, ledger: Path, tmp_path: Path, reaped: bool) -> None:
    go = tmp_path / "go"
    go.touch()
    a = Driver(url, "r1", ledger, "--self-approve-when", str(go), "--hold", "60",
               "--heartbeat", "0.1")
    try:
        a.wait_suspended()
        with anyio.fail_after(60):
            while not pay_pids(ledger):  # pay's effect happened; A holds inside the call
                await anyio.sleep(0.02)
        os.kill(a.pid, signal.SIGKILL)
        if reaped:
            a.proc.wait()  # the pid is gone: on this host that is known at once
        store = open_store(url)
        try:
            async with Runtime(make_toolbox(), store, heartbeat_s=0.1, stale_after_s=4.0) as b:
                if not reaped:  # a zombie pid still exists: only the heartbeat's age tells
                    with pytest.raises(DriverAliveError, match=f"pid {a.pid}"):
                        await b.resume("r1")
                with anyio.fail_after(30):
                    run = await take_over(b, store)
                assert run.steps["pay"].status == "in_doubt"  # not idempotent: not re-run
                await b.decide("r1", "pay", "resolve", output={"paid": 2}, note="ledger")
                result = await run.wait()
            assert result.ok and result.outputs["after"] == 4
        finally:
            store.close()
    finally:
        a.kill()
        a.proc.wait()
    assert pay_pids(ledger) == [a.pid]  # 0 duplicated effects


async def take_over(runtime: Runtime, store: Store) -> Any:
    while True:
        try:
            return await runtime.resume("r1")
        except DriverAliveError:
            await anyio.sleep(0.05)


async def test_the_cli_takes_a_live_run_over_with_force(url: str, ledger: Path,
                                                       tmp_path: Path) -> None:
    go = tmp_path / "approve-now"
    a = Driver(url, "r1", ledger, "--self-approve-when", str(go))
    try:
        a.wait_suspended()
        taken = cli("resume", "r1", "--db", url, "--force", "--quiet")
        assert taken.returncode == 3, taken.stderr  # suspended again, in the CLI's epoch
        go.touch()
        code, out = a.finish()
        assert code == 3 and "fenced" in out, out  # A's own approval is refused
        # nobody drives r1 now (the CLI exited cleanly): approve takes it over and finishes
        done = cli("approve", "r1", "pay", "--db", url, "--quiet")
        assert done.returncode == 0, done.stderr
    finally:
        a.kill()
    pids = pay_pids(ledger)
    assert len(pids) == 1 and pids[0] != a.pid  # once, by the approving CLI process


async def test_without_a_live_driver_the_cli_needs_the_runs_tools(
        tmp_path: Path, ledger: Path) -> None:
    from tests.durability.decide_driver import chain

    db = tmp_path / "runs.db"
    store = open_store(str(db))
    async with Runtime(make_toolbox(), store) as first:  # a notebook's run, then it closed
        assert (await (await first.start(chain(), {}, run_id="n1")).wait()).suspended
    store.close()
    refused = cli("approve", "n1", "pay", "--db", str(db))
    assert refused.returncode == 2, refused.stderr
    assert "toolbox is unknown" in refused.stderr and "--tools" in refused.stderr
    done = cli("approve", "n1", "pay", "--db", str(db), "--tools", TOOLS, "--quiet")
    assert done.returncode == 0, done.stderr
    assert len(pay_pids(ledger)) == 1
