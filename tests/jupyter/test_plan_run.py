"""``%chain plan`` then ``%chain run``: the run of a planned chain starts with the planning
events and keeps the planner's report in its meta, as ``plan_and_start`` does (regression:
the magic path used to drop the planning record)."""

from __future__ import annotations

import pytest

from .conftest import Harness

pytestmark = pytest.mark.anyio

PLANNER = '''from chainlab.planner import FallbackPlanner
planner = FallbackPlanner()
planner.add_template({"name": "hol", "steps": [
    {"id": "f", "tool": "fetch", "args": {"n": 2}},
    {"id": "s", "tool": "send", "args": {"items": "{{ steps.f.output }}"}}]},
    keywords=["holiday"])
'''


async def test_run_of_a_planned_chain_records_its_planning(shop: Harness) -> None:
    await shop.ok(PLANNER)
    await shop.ok('%chain plan "plan my holiday" --as hol --planner planner --tools tb')
    run = await shop.ok("run = %chain run hol --tools tb --db runs.db\nrun")
    result = await run.wait()
    assert result.waiting == {"s": "waiting_confirmation"}

    kinds = [ev.kind for ev in run.event_list()]
    assert kinds[:3] == ["run_started", "planning_started", "planning_completed"]
    completed = run.event_list()[2].payload
    assert (completed["planner"], completed["answered_by"], completed["template"]) == \
        ("fallback", "fallback", "hol")
    meta = run.runtime.store.get_run(run.run_id).meta
    assert meta["planning"]["request"] == "plan my holiday"
    assert meta["planning"]["report"]["steps"] == ["f", "s"]


async def test_a_redefined_chain_is_no_longer_the_planned_one(shop: Harness) -> None:
    await shop.ok(PLANNER)
    await shop.ok('%chain plan "plan my holiday" --as hol --planner planner --tools tb')
    await shop.ok('%%chain hol --tools tb\nsteps:\n  - {id: f, tool: fetch, args: {n: 1}}\n')
    run = await shop.ok("run = %chain run hol --tools tb --db runs.db\nrun")
    await run.wait()
    kinds = [ev.kind for ev in run.event_list()]
    assert not [k for k in kinds if k.startswith("planning")]
    assert "planning" not in run.runtime.store.get_run(run.run_id).meta


async def test_long_step_ids_stay_apart_from_their_tool(shop: Harness) -> None:
    # ids of 14+ characters (the fallback planner names steps after their tools) used to
    # run into the tool column: "estimate_effort estimate_effort" with no gap
    await shop.ok('%%chain long --tools tb\nsteps:\n'
                  '  - {id: fetch_everything_now, tool: fetch, args: {n: 1}}\n'
                  '  - {id: f2, tool: fetch, args: {n: 2}}\n')
    text, = shop.displayed()
    assert "  fetch_everything_now  fetch\n" in text
    assert "  f2                    fetch" in text
