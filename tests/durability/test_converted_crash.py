"""Issue 45 item 3: a driver SIGKILLed while a converted agent's unsafe call runs (its effect
made, its result not yet recorded) is resumed in another process, for an agent written with
Pydantic AI and one written with the OpenAI Agents SDK: the model is not asked again for the
recorded turn, the effect-free call is not made again, and the unsafe call in flight is in
doubt for a person (who finds its effect in the ledger), never repeated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.driver import SubprocessDriver
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.durability import converteddriver
from tests.durability.agentlib import turn_of
from tests.durability.chainlib import Ledger
from tests.durability.harness import Progress, kill_when

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("durability")]


def model(request: RecordedRequest) -> Any:
    if turn_of(request) == 1:
        return tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                          Call("charge", {"order_id": 7, "amount": 5}, "c2"))
    return "order 7: looked up and charged 5"


def in_flight(progress: Progress, ledger: Ledger) -> bool:
    """The lookup is recorded, the charge took effect and is not recorded yet."""
    done = set(progress.committed())
    return (("step_succeeded", "ag/1.1") in done and ("step_started", "ag/1.2") in done
            and any(e["tool"] == "charge" for e in ledger.read()))


@pytest.mark.parametrize("sdk", ["pydantic-ai", "openai-agents"])
async def test_a_converted_agent_killed_mid_call_resumes_without_repeating(
        sdk: str, tmp_path: Path) -> None:
    db, ledger_path = tmp_path / "runs.db", tmp_path / "ledger.jsonl"
    ledger = Ledger(ledger_path)
    with FakeOpenAI([model] * 100) as server:
        env = {"CHAINLAB_CONVERTED_LEDGER": str(ledger_path), "CHAINLAB_CONVERTED_SDK": sdk,
               "OPENAI_BASE_URL": server.base_url}
        driver = SubprocessDriver(converteddriver.CHAIN, db=db, run_id="run", env=env,
                                  tools="tests.durability.converteddriver:toolbox")
        kill_when(driver, Progress(db, "run"), lambda p: in_flight(p, ledger))
        asked_before = [turn_of(r) for r in server.completions]
        ledger_at_kill = ledger.read()

        runtime = Runtime(converteddriver.make(str(ledger_path), sdk, server.base_url),
                          SQLiteStore(db))
        run = await runtime.resume("run", force=True)
        with anyio.fail_after(60):
            result = await run.wait()
            assert run.waiting() == {"ag/1.2": "in_doubt"}  # a person decides
            effect = next(e for e in ledger.read() if e["tool"] == "charge")
            await run.resolve("ag/1.2", output=effect["out"], note="found in the ledger")
            result = await run.wait()
        asked_after = [turn_of(r) for r in server.completions[len(asked_before):]]
        await runtime.aclose()
    assert result.status == "succeeded", result
    assert result.outputs["ag"] == "order 7: looked up and charged 5"
    assert asked_before == [1] and asked_after == [2]  # turn 1 never asked again
    assert [e["tool"] for e in ledger.read()] == [e["tool"] for e in ledger_at_kill] == \
        ["lookup_order", "charge"]  # nothing made again: the charge once, the lookup once
    assert {e["pid"] for e in ledger.read()} == {driver.pid}
    print(f"\n{sdk}: killed with the charge in flight; resumed: charge in_doubt, resolved; "
          f"model turns asked before {asked_before}, after {asked_after}; ledger "
          f"{[e['tool'] for e in ledger.read()]}")
