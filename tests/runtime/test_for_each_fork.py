"""Forks of a run with a for_each step (DESIGN §11, §17): the step grows again in the fork;
an instance whose item and args are unchanged is reused by its args (its tool is NOT called),
a new or changed item runs, and a side-effecting one waits for a person's approval again."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain, PermanentError
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.anyio


def chain(**step: Any) -> Chain:
    return Chain.from_dict({"name": "pay-all", "options": {"on_failure": "continue"}, "steps": [
        {"id": "pay", "tool": "charge", "for_each": "{{ context.accounts }}",
         "args": {"account": "{{ item }}"}, **step},
        {"id": "total", "tool": "count", "args": {"charges": "{{ steps.pay.output }}"}},
    ]})


@pytest.fixture
def charges(h: Harness) -> list[str]:
    made: list[str] = []

    @h.toolbox.tool(side_effects=True)
    def charge(account: str) -> str:
        if account == "bad":
            raise PermanentError("card declined")
        made.append(account)
        return f"charged {account}"

    @h.toolbox.tool
    def count(charges: list[str]) -> int:
        return len(charges)

    return made


async def test_a_fork_reuses_the_unchanged_instances_and_asks_again_for_the_new_ones(
        h: Harness, charges: list[str]) -> None:
    parent = await h.runtime.start(chain(), {"accounts": ["a", "bad", "c"]})
    result = await parent.wait()
    assert result.status == RunStatus.FAILED and charges == ["a", "c"]
    # the list changed: "bad" fixed as "b", and one more account
    plan = await h.runtime.fork_plan(parent.run_id, context={"accounts": ["a", "b", "c", "d"]})
    rows = {r.step_id: (str(r.decision), r.reason) for r in plan.rows}
    assert {k: v[0] for k, v in rows.items()} == {
        "pay": "rerun", "pay[0]": "reuse", "pay[1]": "confirm", "pay[2]": "reuse",
        "pay[3]": "confirm", "total": "rerun"}
    assert "4 instances, 2 reused, 0 run, 2 after approval" in rows["pay"][1]
    assert "a new item" in rows["pay[3]"][1]
    fork = await h.runtime.fork(parent.run_id, context={"accounts": ["a", "b", "c", "d"]})
    result = await fork.wait()
    assert result.status == RunStatus.SUSPENDED
    assert result.waiting == {"pay[1]": "waiting_confirmation", "pay[3]": "waiting_confirmation"}
    steps = fork.state.steps
    assert steps["pay[0]"].reused is not None and steps["pay[0]"].reused["source_run"] \
        == parent.run_id
    card = steps["pay[1]"].preview
    assert card is not None
    assert "card declined" not in str(card)  # the card says what the parent did
    assert "was failed in run" in str(fork.state.confirm_first["pay[1]"]["fork"]["note"])
    assert charges == ["a", "c"]  # nothing charged again
    assert await fork.approve_all("pay") == ["pay[1]", "pay[3]"]
    result = await fork.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert charges == ["a", "c", "b", "d"]
    assert result.outputs["pay"] == ["charged a", "charged b", "charged c", "charged d"]
    assert result.outputs["total"] == 4
    grown = [e for e in h.store.load_events(fork.run_id) if e.kind == EventKind.STEPS_ADDED]
    assert len(grown) == 1


async def test_a_fork_with_nothing_changed_reuses_every_instance_and_calls_nothing(
        h: Harness, charges: list[str]) -> None:
    parent = await h.runtime.start(chain(), {"accounts": ["a", "c"]})
    assert (await parent.wait()).status == RunStatus.SUCCEEDED
    plan = await h.runtime.fork_plan(parent.run_id)
    assert plan.decisions == {"pay": "rerun", "pay[0]": "reuse", "pay[1]": "reuse",
                              "total": "reuse"}
    fork = await h.runtime.fork(parent.run_id)
    result = await fork.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert charges == ["a", "c"]
    assert result.outputs["pay"] == ["charged a", "charged c"]
    assert fork.state.steps["total"].reused is not None


async def test_an_effect_free_instance_that_changed_just_runs(h: Harness) -> None:
    calls: list[str] = []

    @h.toolbox.tool(name="charge")
    def look(account: str) -> str:
        calls.append(account)
        return account.upper()

    @h.toolbox.tool
    def count(charges: list[str]) -> int:
        return len(charges)

    parent = await h.runtime.start(chain(), {"accounts": ["a", "b"]})
    await parent.wait()
    fork = await h.runtime.fork(parent.run_id, context={"accounts": ["a", "x"]})
    result = await fork.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert calls == ["a", "b", "x"]
    assert result.outputs["pay"] == ["A", "X"]
    assert fork.state.steps["pay[1]"].status == StepStatus.SUCCEEDED
    assert fork.state.steps["pay[1]"].reused is None


async def test_a_for_each_output_given_in_a_fork_must_be_a_list(
        h: Harness, charges: list[str]) -> None:
    from chainlab.errors import DecisionError

    parent = await h.runtime.start(chain(), {"accounts": ["a"]})
    await parent.wait()
    with pytest.raises(DecisionError, match="must be a list"):
        await h.runtime.fork_plan(parent.run_id, outputs={"pay": "charged a"})
    fork = await h.runtime.fork(parent.run_id, outputs={"pay": ["given"]})
    result = await fork.wait()
    assert result.outputs["pay"] == ["given"] and result.outputs["total"] == 1
    assert charges == ["a"]
