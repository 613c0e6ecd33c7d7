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
from typing import Any

import anyio
import pytest

from chainlab import Toolbox
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import Store

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
# and the crash suite for the new paths: a fork killed as fork() returns (its reuse must be
# durable), and killed inside its confirm step's call (the charge it was approved for)
_FORKER = textwrap.dedent('''
    import os, signal, sys
    import anyio
    from chainlab.runtime import Runtime
    from chainlab.store import open_store
    from tests.safety.test_fork_safety import file_tools

    async def main():
        db, charges, parent, phase = sys.argv[1:5]
        rt = Runtime(file_tools(charges, slow=phase == "confirm"), open_store(db))
        if phase == "return":
            fork = await rt.fork(parent, args={"ok": {"limit": 1}}, rerun=["ok"])
            print(fork.run_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # right at return: nothing else runs
        fork = await rt.fork(parent, context={"n": 4})  # pay: inputs changed -> confirm
        print(fork.run_id, flush=True)
        await fork.wait()
        await fork.approve("pay")
        await fork.wait()  # the parent kills this process inside the charge

    anyio.run(main)
''')


def file_tools(path: str, *, slow: bool = False) -> Toolbox:
    """The PAY chain's tools, recording charges in a file (for other processes); ``slow``:
    a charge lingers after its effect, so a kill lands inside the call."""
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
        if slow:
            import time

            time.sleep(30)
        return {"amount": amount}

    return tb


def _charges(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [json.loads(line)["charge"] for line in path.read_text().splitlines()]


@pytest.fixture(params=["sqlite", "postgres"])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.store.test_watch import store_url

    return store_url(request.param, tmp_path)


async def _resume_when_dead(rt: Runtime, run_id: str) -> Any:
    with anyio.fail_after(30):
        while True:
            try:
                return await rt.resume(run_id)
            except Exception as exc:  # the dead driver's row goes stale first
                if type(exc).__name__ != "DriverAliveError":
                    raise
                await anyio.sleep(0.1)


@pytest.mark.parametrize("phase", ["return", "confirm"])
@pytest.mark.parametrize("trial", range(3))
async def test_a_fork_killed_mid_way_resumes_without_a_second_charge(
        tmp_path: Path, shared_db: str, phase: str, trial: int) -> None:
    from chainlab.store import open_store

    charges = tmp_path / "charges.jsonl"
    rt = Runtime(file_tools(str(charges)), open_store(shared_db))
    parent = await rt.start(PAY, {"n": 3})
    assert (await parent.wait()).status == RunStatus.SUCCEEDED
    await rt.aclose()
    assert _charges(charges) == [6]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _FORKER, shared_db, str(charges),
                             parent.run_id, phase], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    assert proc.stdout is not None
    fork_id = proc.stdout.readline().strip()
    if phase == "confirm":  # kill it inside the approved charge, after its effect
        with anyio.fail_after(60):
            while len(_charges(charges)) < 2:
                await anyio.sleep(0.02)
        proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    rt2 = Runtime(file_tools(str(charges)), open_store(shared_db), stale_after_s=0.5,
                  heartbeat_s=0.1)
    fork = await _resume_when_dead(rt2, fork_id)
    result = await fork.wait()
    if phase == "return":
        assert result.status == RunStatus.SUCCEEDED
        assert fork.steps["pay"].reused is not None
        assert _charges(charges) == [6]  # reused, not charged again
    else:  # the charge may have happened: in doubt for a person, never repeated
        assert result.waiting == {"pay": "in_doubt"}
        await fork.resolve("pay", output={"amount": 8})
        assert (await fork.wait()).status == RunStatus.SUCCEEDED
        assert _charges(charges) == [6, 8]
    await rt2.aclose()
