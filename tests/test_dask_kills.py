"""Dask worker PROCESSES SIGKILLed at random points of a side-effecting call (issue 36 item 3).

Dask's default configuration (``distributed.scheduler.allowed-failures`` 3) re-runs a task
whose worker died on another worker. Without a claim, a non-idempotent ``charge`` killed
after it charged was charged again by the re-run, and the step succeeded with one recorded
attempt. Now the body claims its attempt on the scheduler before it calls the tool, so a
second start of the same attempt refuses and the death reaches chainlab as a lost call:
``in_doubt`` for an unsafe tool (a person checks the ledger and resolves), a retry for an
idempotent one. Each trial ends with every approved charge made exactly once.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

distributed = pytest.importorskip("distributed")

from chainlab import Chain  # noqa: E402
from chainlab.dask import DaskExecutor  # noqa: E402
from chainlab.runtime import Runtime  # noqa: E402
from chainlab.store import MemoryStore  # noqa: E402
from tests.dask_ledger import cluster_client, ledger_lines, toolbox  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

TRIALS = int(os.environ.get("CHAINLAB_KILL_TRIALS", "6"))  # and CHAINLAB_KILL_SEED
WORKERS = 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _check_default_config() -> None:
    import dask

    assert dask.config.get("distributed.scheduler.allowed-failures") == 3


def chain_for(ledger: Path, rng: random.Random) -> Chain:
    def pay(step_id: str) -> dict[str, Any]:
        return {"id": step_id, "tool": "charge",
                "args": {"account": step_id, "amount": 10, "ledger": str(ledger),
                         "before_s": round(rng.uniform(0.0, 0.4), 3),
                         "after_s": round(rng.uniform(0.0, 0.4), 3)}}

    return Chain.from_dict({"name": "kills", "steps": [
        pay("pay1"), pay("pay2"),
        {"id": "save", "tool": "upsert", "retry": {"max_attempts": 3, "delay_s": 0.01},
         "depends_on": ["pay1"],
         "args": {"key": "k", "ledger": str(ledger),
                  "before_s": round(rng.uniform(0.0, 0.4), 3)}}]})


async def _started(ledger: Path, n: int) -> list[list[str]]:
    """Wait until ``n`` bodies said they started (a condition, polled)."""
    with anyio.fail_after(120):
        while len(lines := ledger_lines(ledger, "started")) < n:
            await anyio.sleep(0.005)
    return lines


async def _trial(client: Any, ledger: Path, rng: random.Random) -> dict[str, int]:
    executor = DaskExecutor(client)
    figures = {"kills": 0, "in_doubt": 0, "retried": 0, "resolved_charged": 0,
               "resolved_retry": 0, "refused_reruns": 0}
    async with Runtime(toolbox, MemoryStore(), executor=executor) as runtime:
        run = await runtime.start(chain_for(ledger, rng))
        await run.wait()
        assert run.waiting() == {"pay1": "waiting_confirmation",
                                 "pay2": "waiting_confirmation"}, run.waiting()
        assert ledger_lines(ledger, "started") == []  # nothing runs unapproved
        await run.approve("pay1")
        await run.approve("pay2")
        # kill the process running one of the first bodies, at a random point of its call
        # (before its charge, after it, or after it returned)
        first = rng.choice(await _started(ledger, 1 + rng.randrange(3)))
        await anyio.sleep(rng.uniform(0.0, 0.9))
        os.kill(int(first[2]), signal.SIGKILL)
        figures["kills"] += 1
        with anyio.fail_after(180):
            while (result := await run.wait()).status == "suspended":
                for step_id, status in run.waiting().items():
                    if status == "waiting_confirmation":
                        await run.approve(step_id)
                        continue
                    assert status == "in_doubt", (step_id, status)
                    figures["in_doubt"] += 1
                    # the person checks the world (the ledger) and says what happened
                    charged = [c for c in ledger_lines(ledger, "charges") if c[0] == step_id]
                    if charged:
                        figures["resolved_charged"] += 1
                        await run.resolve(step_id, output={"account": step_id, "charged": 10})
                    else:
                        figures["resolved_retry"] += 1
                        await run.resolve(step_id, retry=True)
        assert result.status == "succeeded", (result.status, run.steps)
        figures["retried"] = sum(1 for e in run.event_list()
                                 if e.kind == "step_retry_scheduled")
        lost = [s for s in executor.submissions if s.outcome == "lost"]
        figures["refused_reruns"] = len(lost)
        events = run.event_list()
    # every lost call of the unsafe tool went in_doubt (or was known not to have started
    # and was retried); a lost call of the idempotent one was retried
    lost_charges = [s for s in lost if s.tool == "charge"]
    retried = {e.step_id for e in events if e.kind == "step_retry_scheduled"}
    assert len(lost_charges) == figures["in_doubt"] + len(retried - {"save"}), (lost, figures)
    assert all("save" in retried for s in lost if s.tool == "upsert")
    approvals = [e.step_id for e in events if e.kind == "step_approved"]
    charges = [c[0] for c in ledger_lines(ledger, "charges")]
    # every approved charge made exactly once: never twice, never lost
    assert sorted(charges) == sorted(set(approvals)) == ["pay1", "pay2"], (charges, approvals)
    figures["charges"] = len(charges)
    figures["approved_calls"] = len(set(approvals))
    return figures


async def test_sigkilled_workers_never_charge_twice(tmp_path: Path) -> None:
    _check_default_config()
    rng = random.Random(int(os.environ.get("CHAINLAB_KILL_SEED", "36")))
    totals: dict[str, int] = {}
    for trial in range(TRIALS):
        ledger = tmp_path / f"trial{trial}"
        ledger.mkdir()
        # a new cluster per trial: worker PROCESSES (under nannies), Dask's default config;
        # trials do not wait on a nanny restarting the worker the last one killed
        with cluster_client(n_workers=WORKERS, threads_per_worker=1, processes=True) as client:
            await anyio.to_thread.run_sync(lambda: client.wait_for_workers(WORKERS, timeout=120))
            figures = await _trial(client, ledger, rng)
        for key, value in figures.items():
            totals[key] = totals.get(key, 0) + value
    totals["trials"] = TRIALS
    print("\ndask kill figures:", totals)
    assert totals["kills"] == TRIALS
    assert totals["charges"] == totals["approved_calls"] == 2 * TRIALS
