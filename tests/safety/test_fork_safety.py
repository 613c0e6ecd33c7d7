"""Forks keep the promise (issue 25, defects 1, 2, 4, 5, 7): a fork's own durable record
says what needs a person; a fork compensates only effects it made; reuse follows an effect
to the run that made it; a step whose condition changed is not reused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from chainlab import Toolbox
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore, Store

from .conftest import Ledger, chain

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]

PAY = chain(
    {"id": "a", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
    {"id": "pay", "tool": "charge", "args": {"amount": "{{ steps.a.output }}"}},
    {"id": "ok", "tool": "check", "args": {"v": "{{ steps.pay.output.amount }}"}},
)


async def _done(runtime: Runtime, store: Store, context: dict[str, int]) -> str:
    run = await runtime.start(PAY, context)
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    return run.run_id


# ---------------------------------------------------------------------------- defect 2
async def test_a_forks_confirm_steps_wait_for_a_person_after_a_takeover(
        tools: Toolbox, ledger: Ledger, store_pair: tuple[Store, Store]) -> None:
    """The fork suspends on an earlier step, its runtime closes, another runtime approves
    that step with decide: the side-effecting step whose inputs changed still waits."""
    flow = chain(
        {"id": "g", "tool": "gate", "args": {"x": "{{ context.n }}"}},
        {"id": "a", "tool": "fetch", "args": {"n": "{{ steps.g.output }}"}},
        {"id": "pay", "tool": "charge", "args": {"amount": "{{ steps.a.output }}"}},
    )
    one, two = store_pair
    rt1 = Runtime(tools, one)
    parent = await rt1.start(flow, {"n": 1})
    await parent.wait()
    await parent.approve("g")
    assert (await parent.wait()).status == RunStatus.SUCCEEDED
    assert len(ledger.of("charge")) == 1
    plan = await rt1.fork_plan(parent.run_id, context={"n": 2})
    assert plan.row("pay").decision == "confirm"
    fork = await rt1.fork(parent.run_id, context={"n": 2})
    assert (await fork.wait()).waiting == {"g": "waiting_confirmation"}
    await rt1.aclose()

    rt2 = Runtime(tools, two)
    assert await rt2.decide(fork.run_id, "g", "approve") == "applied"
    live = rt2.get_run(fork.run_id)
    result = await live.wait()
    assert result.waiting == {"pay": "waiting_confirmation"}  # not run: nobody approved it
    assert len(ledger.of("charge")) == 1
    await live.approve("pay")
    assert (await live.wait()).status == RunStatus.SUCCEEDED
    assert ledger.of("charge") == [{"amount": 2}, {"amount": 4}]
    await rt2.aclose()


# ---------------------------------------------------------------------------- defect 4
async def test_a_fork_never_compensates_a_step_it_only_reused(
        tools: Toolbox, ledger: Ledger, store_pair: tuple[Store, Store]) -> None:
    store = store_pair[0]
    rt = Runtime(tools, store)
    parent_id = await _done(rt, store, {"n": 3})
    fork = await rt.fork(parent_id, args={"ok": {"limit": 1}}, rerun=["ok"])
    assert (await fork.wait()).status == RunStatus.SUCCEEDED
    assert fork.steps["pay"].reused is not None
    assert "pay" not in fork.undoable()  # not its effect: the parent made it
    await fork.rollback()
    await fork.wait()
    assert ledger.of("refund") == []
    parent = await rt.resume(parent_id)
    await parent.rollback()
    await parent.wait()
    assert ledger.of("refund") == [{"charge_id": "ch1"}]  # one charge, one refund
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 5
async def test_reuse_follows_the_effect_to_the_run_that_made_it(
        tools: Toolbox, ledger: Ledger, store_pair: tuple[Store, Store]) -> None:
    store = store_pair[0]
    rt = Runtime(tools, store)
    parent_id = await _done(rt, store, {"n": 3})
    first = await rt.fork(parent_id, args={"ok": {"limit": 1}}, rerun=["ok"])
    await first.wait()
    parent = await rt.resume(parent_id)
    await parent.rollback()  # the charge the fork reused is refunded where it was made
    assert (await parent.wait()).status == RunStatus.ROLLED_BACK
    plan = await rt.fork_plan(first.run_id, args={"ok": {"limit": 2}}, rerun=["ok"])
    row = plan.row("pay")
    assert row.decision == "confirm", row
    assert parent_id in row.reason and "compensated" in row.reason
    second = await rt.fork(first.run_id, args={"ok": {"limit": 2}}, rerun=["ok"])
    assert (await second.wait()).waiting == {"pay": "waiting_confirmation"}
    assert len(ledger.of("charge")) == 1
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 7
async def test_a_step_whose_condition_turned_false_is_skipped_not_reused(
        tools: Toolbox, ledger: Ledger, store_pair: tuple[Store, Store]) -> None:
    flow = chain(
        {"id": "a", "tool": "fetch", "args": {"n": 2}},
        {"id": "pay", "tool": "charge", "args": {"amount": "{{ steps.a.output }}"},
         "when": "{{ context.go }}"},
        {"id": "t", "tool": "fetch", "args": {"n": "{{ steps.a.output }}"}, "depends_on": ["pay"]},
    )
    rt = Runtime(tools, store_pair[0])
    parent = await rt.start(flow, {"go": True})
    assert (await parent.wait()).status == RunStatus.SUCCEEDED
    fresh = await rt.start(flow, {"go": False})
    await fresh.wait()
    assert fresh.steps["pay"].status == "skipped"
    plan = await rt.fork_plan(parent.run_id, context={"go": False})
    assert plan.row("pay").decision != "reuse"
    fork = await rt.fork(parent.run_id, context={"go": False})
    result = await fork.wait()
    assert result.steps["pay"] == "skipped"  # as in a fresh run with that context
    assert fork.outputs.get("pay") is None
    assert len(ledger.of("charge")) == 1
    await rt.aclose()


# ---------------------------------------------------------------------------- defect 1
_FORKER = textwrap.dedent('''
    import json, os, signal, sys
    import anyio
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore
    from tests.safety.test_fork_safety import file_tools

    async def main():
        rt = Runtime(file_tools(sys.argv[2]), SQLiteStore(sys.argv[1]))
        fork = await rt.fork(sys.argv[3], args={"ok": {"limit": 1}}, rerun=["ok"])
        print(fork.run_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # right at return: nothing else runs

    anyio.run(main)
''')


def file_tools(path: str) -> Toolbox:
    """The PAY chain's tools, recording charges in a file (for other processes)."""
    tb = Toolbox("file-ledger")

    @tb.tool
    def fetch(n: int) -> int:
        return n * 2

    @tb.tool
    def check(v: int, limit: int = 100) -> bool:
        return v <= limit

    @tb.tool(side_effects=True)
    def charge(amount: int) -> dict[str, int]:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"charge": amount}) + "\n")
        return {"amount": amount}

    return tb


def _charges(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("trial", range(4))
async def test_a_fork_killed_as_fork_returns_resumes_without_a_second_charge(
        tmp_path: Path, trial: int) -> None:
    db, charges = tmp_path / "f.db", tmp_path / "charges.jsonl"
    store = SQLiteStore(db)
    rt = Runtime(file_tools(str(charges)), store)
    parent = await rt.start(PAY, {"n": 3})
    assert (await parent.wait()).status == RunStatus.SUCCEEDED
    await rt.aclose()
    assert _charges(charges) == 1
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _FORKER, str(db), str(charges), parent.run_id],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    fork_id = proc.stdout.strip()
    rt2 = Runtime(file_tools(str(charges)), SQLiteStore(db), stale_after_s=0.5,
                  heartbeat_s=0.1)
    with anyio.fail_after(30):
        while True:
            try:
                fork = await rt2.resume(fork_id)
                break
            except Exception as exc:  # the dead driver's row goes stale
                if type(exc).__name__ != "DriverAliveError":
                    raise
                await anyio.sleep(0.1)
    assert (await fork.wait()).status == RunStatus.SUCCEEDED
    assert fork.steps["pay"].reused is not None
    assert _charges(charges) == 1  # reused, not charged again
    await rt2.aclose()
