"""Sub-chain steps join the parent's saga (issue 5 point 6): their completed steps are
compensated with the parent's, in ONE reverse-completion order across both levels.

Parent ``a -> {s: chain:child, p} -> z``; child ``w``, ``x (after p) -> y``. The parent step
``p`` finishes between the child's ``w`` and ``x``, so completion interleaves the levels:
a, s/w, p, s/x, s/y, s.
"""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain
from chainlab.runtime import RunStatus

from .conftest import Saga, chain_of, statuses, step, until_idle

pytestmark = pytest.mark.anyio


def build(saga: Saga, *, group_rollback: dict[str, Any] | None = None,
          **options: Any) -> Chain:
    saga.add_chain(Chain.from_dict({"name": "child", "steps": [
        step("x", after=["p"]), step("y", ["x"]), step("w")]}))
    group: dict[str, Any] = {"id": "s", "tool": "chain:child", "depends_on": ["a"]}
    if group_rollback is not None:
        group["rollback"] = group_rollback
    return chain_of(step("a"), group, step("p", ["a"], started=["s/w"]),
                    step("z", ["s", "p"]), **options)


async def test_parent_failure_compensates_child_steps_interleaved(saga: Saga) -> None:
    saga.fail.add("z")
    run, result = await saga.run(build(saga))
    assert run.state.completion == ["a", "s/w", "p", "s/x", "s/y", "s"]
    assert result.status == RunStatus.ROLLED_BACK
    order = ["s/y", "s/x", "p", "s/w", "a"]
    assert saga.compensation_order(run) == order
    assert [u.step_id for u in saga.undo_log] == order
    assert saga.undo_order() == ["y", "x", "p", "w", "a"]
    # the sub-chain step has no compensation of its own: its children carry the saga, and
    # once they are all undone the sub-chain step counts as compensated (without a call)
    assert statuses(run) == {"a": "compensated", "s": "compensated", "s/w": "compensated",
                             "s/x": "compensated", "s/y": "compensated",
                             "p": "compensated", "z": "failed"}
    marked = [e for e in run.event_list() if e.kind == "compensation_succeeded"
              and e.step_id == "s"]
    assert [e.payload for e in marked] == [{"subchain": True, "children": ["s/x", "s/y", "s/w"]}]
    keys = {a.step_id: a.idempotency_key for a in saga.fold(run).attempts
            if a.kind == "compensation"}
    assert sorted(keys) == sorted(order) and len(set(keys.values())) == 5
    assert saga.world == set()


async def test_failure_inside_the_subchain_fails_the_parent_and_rolls_back_both(
        saga: Saga) -> None:
    saga.fail.add("y")
    run, result = await saga.run(build(saga))
    assert result.status == RunStatus.ROLLED_BACK
    assert saga.compensation_order(run) == ["s/x", "p", "s/w", "a"]
    assert statuses(run) == {"a": "compensated", "s": "failed", "s/w": "compensated",
                             "s/x": "compensated", "s/y": "failed", "p": "compensated",
                             "z": "skipped"}
    started = next(e for e in saga.events(run) if e.kind == "run_rollback_started")
    assert started.payload["reason"] == "step 's' failed"


async def test_a_subchain_step_with_its_own_rollback_is_undone_before_its_children(
        saga: Saga) -> None:
    seen: list[dict[str, Any]] = []

    async def close_batch(ids: list[str]) -> None:
        seen.append({"ids": ids})

    saga.toolbox.tool(close_batch, side_effects=True, idempotent=True)
    saga.fail.add("z")
    rollback = {"tool": "close_batch",
                "args": {"ids": ["{{ output.x.id }}", "{{ output.y.id }}", "{{ output.w.id }}"]}}
    run, result = await saga.run(build(saga, group_rollback=rollback))
    assert result.status == RunStatus.ROLLED_BACK
    # s completed last (after its children), so it is compensated first
    assert saga.compensation_order(run) == ["s", "s/y", "s/x", "p", "s/w", "a"]
    assert seen == [{"ids": ["rec-x", "rec-y", "rec-w"]}]
    assert run.steps["s"].status == "compensated"


async def test_strict_rollback_across_levels_then_resume(saga: Saga) -> None:
    saga.fail.add("z")
    saga.broken.add("p")
    run, result = await saga.run(build(saga, rollback_mode="strict"))
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert saga.compensation_order(run) == ["s/y", "s/x", "p"]
    end = saga.events(run)[-1].payload
    assert end["failed"] == ["p"] and end["pending"] == ["s/w", "a"]
    assert statuses(run)["s/w"] == "succeeded" and statuses(run)["a"] == "succeeded"

    saga.broken.clear()
    await until_idle(run)
    await run.rollback()
    assert (await run.wait()).status == RunStatus.ROLLED_BACK
    assert saga.rollback_rounds(run) == [["s/y", "s/x", "p"], ["p", "s/w", "a"]]
    assert saga.world == set()


async def test_nested_subchains_join_the_same_saga(saga: Saga) -> None:
    saga.add_chain(Chain.from_dict({"name": "inner", "steps": [step("i1"),
                                                               step("i2", ["i1"])]}))
    saga.add_chain(Chain.from_dict({"name": "outer", "steps": [
        step("o1"), {"id": "in", "tool": "chain:inner", "depends_on": ["o1"]}]}))
    saga.fail.add("last")
    chain = chain_of(step("a"), {"id": "out", "tool": "chain:outer", "depends_on": ["a"]},
                     step("last", ["out"]))
    run, result = await saga.run(chain)
    assert result.status == RunStatus.ROLLED_BACK
    assert saga.compensation_order(run) == ["out/in/i2", "out/in/i1", "out/o1", "a"]
    assert statuses(run)["out/in/i2"] == "compensated"
