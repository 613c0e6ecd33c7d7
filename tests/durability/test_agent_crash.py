"""Issue 37 item 4: a driver SIGKILLed in the middle of an agent's batch (one model turn
asking for an unsafe call, a sub-chain, a sub-agent, a remote job and an effect-free call)
is resumed in another process: no recorded call is made again, the job is submitted once,
the model is not asked again for a turn the log holds, and the unsafe call in flight is in
doubt for a person (who finds its effect in the ledger). The figures are printed (``-s``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab.runtime import RunState, Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.driver import SubprocessDriver
from chainlab.testing.job_server import JobServer
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.durability import agentdriver
from tests.durability.agentlib import turn_of
from tests.durability.chainlib import Ledger
from tests.durability.harness import Progress, kill_when

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("durability")]


def who(request: RecordedRequest) -> str:
    return "helper" if "warehouse helper" in request.messages[0]["content"] else "clerk"


def model(request: RecordedRequest) -> Any:
    turn = turn_of(request)
    if who(request) == "helper":
        return Call("slowlook", {"order": 7}, "h1") if turn == 1 else "aisle 4"
    if turn == 1:
        return tool_calls(Call("charge", {"account": "acct-7", "amount": 5}, "c1"),
                          Call("chain__ship", {"order": 7}, "c2"),
                          Call("agent__helper", {"request": "where is order 7?"}, "c3"),
                          Call("audit", {"payload": {"order": 7}}, "c4"),
                          Call("lookup", {"order": 7}, "c5"))
    return "order 7: charged, shipped, found, audited"


def mid_batch(progress: Progress, ledger: Ledger) -> bool:
    """The batch is in the middle: the charge took effect (not recorded yet), the job's
    handle is recorded, the sub-agent's first turn is recorded, the lookup succeeded."""
    done = set(progress.committed())
    return (("job_submitted", "ag/1.4") in done and ("steps_added", "ag/1.3") in done
            and ("step_succeeded", "ag/1.5") in done
            and any(e["tool"] == "charge" and e["effect"] for e in ledger.read()))


async def test_a_driver_killed_mid_batch_resumes_without_repeating_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, ledger_path = tmp_path / "runs.db", tmp_path / "ledger.jsonl"
    ledger = Ledger(ledger_path)
    with JobServer(tmp_path / "jobs.json", duration_s=1.0) as jobs, \
            FakeOpenAI([model] * 1000) as server:
        env = {"CHAINLAB_AGENT_LEDGER": str(ledger_path), "CHAINLAB_AGENT_JOBS": jobs.url,
               "OPENAI_BASE_URL": server.base_url}
        driver = SubprocessDriver(agentdriver.CHAIN, db=db, run_id="run", env=env,
                                  tools="tests.durability.agentdriver:toolbox")
        kill_when(driver, Progress(db, "run"), lambda p: mid_batch(p, ledger), timeout=60)
        asked_before = [(who(r), turn_of(r)) for r in server.completions]
        with SQLiteStore(db) as store:
            at_kill = RunState.from_events("run", store.load_events("run"))
        ledger_at_kill = ledger.read()

        # another process would do the same: the test takes the run over itself
        runtime = Runtime(agentdriver.make(str(ledger_path), jobs.url, server.base_url),
                          SQLiteStore(db))
        run = await runtime.resume("run", force=True)
        with anyio.fail_after(60):
            result = await run.wait()
            assert run.waiting() == {"ag/1.1": "in_doubt"}  # the charge: a person decides
            effect = next(e for e in ledger.read() if e["step"] == "ag/1.1" and e["effect"])
            await run.resolve("ag/1.1", output=effect["out"], note="found in the ledger")
            result = await run.wait()
        assert result.status == "succeeded", result
        assert result.outputs["ag"] == "order 7: charged, shipped, found, audited"
        asked_after = [(who(r), turn_of(r)) for r in server.completions[len(asked_before):]]
        stats = jobs.stats()
        await runtime.aclose()

    final = run.state
    # the model: never asked again for a turn the log held at the kill
    assert sorted(asked_before) == [("clerk", 1), ("helper", 1)]
    assert asked_after == [("helper", 2), ("clerk", 2)]
    # no call that had ended at the kill was made again; each effect happened once
    ledger_now = ledger.read()
    for step_id, st in at_kill.steps.items():
        if st.status == "succeeded":
            count = [e["step"] for e in ledger_now].count(step_id)
            assert count == [e["step"] for e in ledger_at_kill].count(step_id), step_id
    assert [e["step"] for e in ledger_now if e["tool"] == "charge"] == ["ag/1.1"]
    assert [e["effect"] for e in ledger_now if e["tool"] == "pack"].count(True) == 1
    # the job: submitted once, waited on again on its recorded handle
    assert list(stats["submissions"].values()) == [1]
    assert final.steps["ag/1.4"].output["payload"] == {"order": 7}

    rows = []
    for step_id, what in (("ag", "agent (clerk)"), ("ag/1.1", "charge (unsafe)"),
                          ("ag/1.2/pack", "pack (sub-chain)"),
                          ("ag/1.3", "agent (helper)"), ("ag/1.3/1.1", "slowlook (helper)"),
                          ("ag/1.4", "audit (remote job)"), ("ag/1.5", "lookup")):
        later = [e for e in run.event_list() if e.step_id == step_id
                 and e.seq > at_kill.last_seq]
        rows.append((step_id, what, at_kill.steps[step_id].status,
                     ", ".join(dict.fromkeys(str(e.kind) for e in later)) or "-",
                     str(final.steps[step_id].status)))
    print("\nagent batch, driver SIGKILLed mid-batch, then resumed:")
    print(f"{'step':<12} {'what':<20} {'at the kill':<12} {'events after the resume':<55} final")
    for row in rows:
        print(f"{row[0]:<12} {row[1]:<20} {row[2]!s:<12} {row[3]:<55} {row[4]}")
    print(f"model requests before the kill {asked_before}, after {asked_after}; job "
          f"submissions {list(stats['submissions'].values())}")
