"""Replay defects of issue 36: a run with a remote job replays from its recording (the
backend's ``poll`` is never called); a run stopped at its budget and approved with a raised
one replays; outputs are compared as JSON values, type included (``1`` is not ``true``,
``2`` is not ``2.0``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock
from chainlab.testing.replay import Recording, replay_run

from .replay_tools import CALLS, COUNT_ANSWER, toolbox

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _here(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    CALLS.clear()
    COUNT_ANSWER[:] = [1]


async def record(chain: Chain, decide: Any = None) -> Recording:
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(chain)
        result = await run.wait()
        if decide is not None:
            await decide(run)
            result = await run.wait()
    assert result.status == "succeeded", run.steps
    return Recording.from_store(store, run.run_id)


JOB = Chain.from_dict({"name": "job", "steps": [
    {"id": "train", "tool": "Train", "args": {"epochs": 3}, "confirm": False},
    {"id": "count", "tool": "count", "args": {"items": [1, 2]},
     "depends_on": ["train"]}]})


async def test_a_run_with_a_remote_job_replays_without_the_backend(tmp_path: Path) -> None:
    recording = await record(JOB)
    assert CALLS["train.submit"] == 1 and CALLS["train.poll"] == 3
    [call] = [c for c in recording.calls if c.step_id == "train"]
    assert call.job == {"handle": {"job": "j-3", "key": call.job["handle"]["key"]},
                        "state": "succeeded"}
    CALLS.clear()
    # as `chainlab export-test` writes it and the exported test reads it
    recording = Recording.load(recording.save(tmp_path / "test_job.replay.json"))
    replayed = await replay_run(recording, toolbox)
    replayed.assert_same()
    assert CALLS == {}  # neither submit nor poll nor cancel of the real job
    assert replayed.run.steps["train"].output == {"model": "j-3", "loss": 0.25}
    handles = [e.payload["handle"] for e in replayed.run.event_list()
               if e.kind == "job_submitted"]
    assert handles == [call.job["handle"]]  # the recorded handle, answered again


async def test_a_failed_remote_job_replays_as_failed() -> None:
    chain = Chain.from_dict({"name": "job", "options": {"on_failure": "continue"}, "steps": [
        {"id": "train", "tool": "Train", "args": {"epochs": 3}, "retry": {"max_attempts": 1},
         "timeout_s": 7}]})
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        run = await runtime.start(chain)
        assert (await run.wait()).status == "failed"  # polled for 7 s: timed out
    assert run.steps["train"].error_kind == "timeout" and CALLS["train.cancel"] == 1
    recording = Recording.from_store(store, run.run_id)
    CALLS.clear()
    replayed = await replay_run(recording, toolbox)
    replayed.assert_same()
    assert CALLS == {}
    assert replayed.run.steps["train"].error_kind == "timeout"


def paid_chain(budget: dict[str, Any] | None) -> Chain:
    return Chain.from_dict({"name": "budget", "options": {"budget": budget} if budget else {},
                            "steps": [{"id": f"s{i}", "tool": "paid", "args": {"n": i},
                                       **({"depends_on": [f"s{i - 1}"]} if i else {})}
                                      for i in range(3)]})


@pytest.mark.parametrize("history", [False, True])
async def test_a_run_approved_with_a_raised_budget_replays(history: bool) -> None:
    """Stopped at its budget, approved with a raised one. With history, the stop came from
    the recorded estimates (0.02 spent + 0.01 expected > 0.025): the replay, which has no
    history, must check with the same numbers (it starts from the recorded run_started)."""
    store = MemoryStore()
    async with Runtime(toolbox, store, clock=ManualClock()) as runtime:
        if history:
            assert (await (await runtime.start(paid_chain(None))).wait()).status == "succeeded"
        run = await runtime.start(paid_chain({"max_cost": 0.025 if history else 0.015}))
        assert (await run.wait()).status == "suspended"
        assert run.waiting() == {"s2": "waiting_confirmation"}
        await run.approve("s2", budget={"max_cost": 1.0})
        assert (await run.wait()).status == "succeeded"
    recording = Recording.from_store(store, run.run_id)
    replayed = await replay_run(recording, toolbox)
    replayed.assert_same()
    assert replayed.run.state.budget == {"max_cost": 1.0}
    assert replayed.run.steps["s2"].decided is not None


@pytest.mark.parametrize("changed", [True, 1.0, "1"])
async def test_an_output_of_another_json_type_is_a_difference(changed: Any) -> None:
    recording = await record(Chain.from_dict({"name": "count", "steps": [
        {"id": "count", "tool": "count", "args": {"items": [1, 2]}}]}))
    assert recording.expected["steps"]["count"]["output"] == 1
    COUNT_ANSWER[:] = [changed]
    replayed = await replay_run(recording, toolbox, live=["count"])
    with pytest.raises(AssertionError, match="count: succeeded"):
        replayed.assert_same()
    COUNT_ANSWER[:] = [1]
    (await replay_run(recording, toolbox, live=["count"])).assert_same()
