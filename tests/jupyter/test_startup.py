"""Issue 29, item 1: a run started from a notebook does not wait for its widget. The
widget's panels are built after the run's first steps started and catch up from its log
(the time it saves is measured in benchmarks/bench_notebook.py, not asserted here)."""

from __future__ import annotations

import pytest

from chainlab.events import EventKind
from chainlab.jupyter import RunWidget

from .conftest import Harness

pytestmark = pytest.mark.anyio

TOOLS = '''
import chainlab
tb = chainlab.Toolbox("quick")

@tb.tool
def fetch(n: int) -> list[int]:
    return list(range(n))

@tb.tool
def total(items: list[int]) -> int:
    return sum(items)
'''

CHAIN = '''%%chain quick --tools tb
steps:
  - {id: a, tool: fetch, args: {n: 3}}
  - {id: b, tool: fetch, args: {n: 4}}
  - {id: s, tool: total, args: {items: "{{ steps.a.output }}"}}
'''


@pytest.fixture
async def quick(sh: Harness) -> Harness:
    await sh.ok(TOOLS)
    await sh.ok(CHAIN)
    sh.displayed()
    return sh


async def test_the_first_steps_start_before_the_widget_is_built(quick: Harness) -> None:
    await quick.ok("run = %chain run quick --tools tb")
    run = quick.ns["run"]
    w = quick.session.widgets[run.run_id]
    assert isinstance(w, RunWidget)
    assert not w.built  # shown in the cell, panels not built yet: nothing delays the run
    shown, = quick.pictures()
    assert 'class="cl-static-run"' in shown and "<svg" in shown
    result = await quick.ok("r = await run.wait()\nr")
    assert str(result.status) == "succeeded"
    assert w.built
    started = [ev.seq for ev in run.event_list() if ev.kind == EventKind.STEP_STARTED]
    assert w.built_at is not None and started[0] <= w.built_at  # a step ran first
    # ... and the widget caught up from the log: every event, the final colours
    await quick.settle()
    assert [ev.seq for ev in w.event_log.events] == [ev.seq for ev in run.event_list()]
    assert w.statuses() == {"a": "succeeded", "b": "succeeded", "s": "succeeded"}
    assert "succeeded" in w.header.value


async def test_a_panel_asked_for_at_once_is_built_on_demand(quick: Harness) -> None:
    await quick.ok("run = %chain run quick --tools tb --step")
    run = quick.ns["run"]
    w = quick.session.widgets[run.run_id]
    assert not w.built
    assert w.buttons["step"].description  # built now, on first use
    assert w.built
    await quick.ok("import asyncio\nwhile not run.ready_steps(): await asyncio.sleep(0.01)")
    w.buttons["step"].click()
    await quick.ok("for _ in range(200):\n    if run.steps['a'].status == 'succeeded': break\n"
                   "    await asyncio.sleep(0.01)")
    assert w.last_error is None, w.last_error
    assert any(ev.kind == EventKind.STEP_STARTED for ev in run.event_list()), run.event_list()


async def test_a_paused_run_builds_its_widget_without_a_step(quick: Harness) -> None:
    await quick.ok("run = %chain run quick --tools tb --step")
    w = quick.session.widgets[quick.ns["run"].run_id]
    await quick.ok("import asyncio\nawait asyncio.sleep(0.05)")
    assert w.built and not w.buttons["step"].disabled
