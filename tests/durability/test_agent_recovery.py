"""Recovery of agent steps (DESIGN §18), exhaustive and in-process: a run whose agent step
calls every kind of tool is "crashed" after EVERY event of an uninterrupted run (and, with a
call in flight, both with and without its effect in the world), then resumed by a new
runtime whose model is the same scripted server over HTTP. A recorded turn is never asked
again (a request in flight is asked again: it changed nothing), no recorded call runs
again, an unsafe call in flight is in doubt for a person, each turn grows once, and a
rollback undoes the agent's charge once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from chainlab.runtime import RunState
from tests.durability.agentlib import (
    AGENT_COMPENSABLE_STEPS,
    AGENT_UNSAFE_STEPS,
    agent_chain,
    agent_toolbox,
    serve_clerk,
    turn_of,
)
from tests.durability.chainlib import Ledger
from tests.durability.harness import check_finished, check_recovery_of
from tests.durability.test_recovery import every_crash, uninterrupted

pytestmark = pytest.mark.anyio


def recorded_turns(prefix: list[object]) -> int:
    """How many of the agent's turns the log holds (answered: grown, or its final answer)."""
    return sum(1 for e in prefix if e.step_id == "ag"  # type: ignore[attr-defined]
               and (e.kind == "steps_added" or (e.kind == "step_succeeded"  # type: ignore
                                                and "turn" in e.payload)))  # type: ignore


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "rolls-back"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_agent_step_recovers_after_every_event(kind: str, fail: bool,
                                                        tmp_path: Path) -> None:
    world = Ledger(tmp_path / "base.jsonl", fsync=False)
    with serve_clerk() as model:
        toolbox = agent_toolbox(world, model.base_url)
        events, record, outputs = await uninterrupted(toolbox, agent_chain(fail), world)
        expected = RunState.from_events("run", events)
        assert expected.status == ("rolled_back" if fail else "succeeded")
        assert [e.step_id for e in events if e.kind == "steps_added"] == ["ag", "ag"]
        assert outputs["ag"] == "done after 2 turns"
        assert [turn_of(r) for r in model.completions] == [1, 2, 3]
        steps = {s: str(st.status) for s, st in expected.steps.items()}
        seen = Counter[str]()
        asked_again = Counter[str]()
        before = len(model.completions)
        async for prefix, at_crash, final in every_crash(kind, toolbox, events, record,
                                                         outputs, world, tmp_path):
            check_finished(final, outputs, AGENT_UNSAFE_STEPS, status=str(expected.status),
                           steps=steps, compensable=AGENT_COMPENSABLE_STEPS)
            grown = [e.payload["turn"] for e in final.events or () if e.kind == "steps_added"]
            assert grown == [1, 2], grown  # each turn grew exactly once
            # the model is never asked again for a turn the log holds; each turn not
            # recorded yet is asked once (a request in flight at the crash, again)
            recorded = recorded_turns(prefix)
            asked = [turn_of(r) for r in model.completions[before:]]
            assert asked == list(range(recorded + 1, 4)), (len(prefix), recorded, asked)
            before = len(model.completions)
            if at_crash.state is not None and at_crash.state.open_attempt("ag"):
                asked_again["a model turn in flight, asked again"] += 1
            seen.update(check_recovery_of(at_crash, final))
        assert {"charge in doubt (after its effect)", "charge in doubt (before its effect)",
                "send reconciled: took effect", "send reconciled: no effect",
                "upsert re-run", "compute re-run", "transfer in doubt (after its effect)",
                "agent:clerk re-run"} <= set(seen), seen
        assert asked_again
