"""Issue 29, item 3: selection follows the DAG. A click on a node of the run widget's DAG
opens that step in the Inspector; a failed run names its failed step and error above the
DAG, the Inspector opens on it, and one click shows it."""

from __future__ import annotations

import pytest

from chainlab import Chain, Toolbox
from chainlab.jupyter import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def tools() -> Toolbox:
    tb = Toolbox("sel")

    @tb.tool
    def load(n: int) -> int:
        return n

    @tb.tool(retry={"max_attempts": 1})
    def parse(text: str) -> float:
        return float(text)

    return tb


CHAIN = Chain.from_dict({"name": "sel", "steps": [
    {"id": "load", "tool": "load", "args": {"n": 1}},
    {"id": "reserve", "tool": "load", "args": {"n": 2}},
    {"id": "convert", "tool": "parse", "args": {"text": "12,50"}, "depends_on": ["load"]},
]})


async def test_a_failed_run_names_its_step_and_error_and_one_click_shows_it() -> None:
    async with Runtime(tools(), MemoryStore()) as rt:
        run = await rt.start(CHAIN)
        await run.wait()
        w = RunWidget(run)
        assert "convert" in w.failure.value and "12,50" in w.failure.value
        assert w.show_failure.layout.display == "" and "convert" in w.show_failure.description
        assert w.inspector.picker.value == "convert"  # opens on the failed step
        assert w.tabs.selected_index == 0
        w.show_failure.click()
        assert w.tabs.selected_index == 1 and w.inspector.picker.value == "convert"
        assert "12,50" in w.inspector.details.value
        w.close()


async def test_a_click_on_a_node_selects_it_in_the_inspector() -> None:
    async with Runtime(tools(), MemoryStore()) as rt:
        run = await rt.start(CHAIN)
        await run.wait()
        w = RunWidget(run)
        clicks = w.dag.clicks
        assert clicks is not None  # anywidget is installed with chainlab[jupyter]
        assert sorted(clicks.steps.values()) == ["convert", "load", "reserve"]
        element = next(e for e, s in clicks.steps.items() if s == "reserve")
        assert f'id="{element}"' in w.dag.canvas.svg  # the ids the front end looks up
        clicks.selected = "reserve"  # what the front end sets on a click
        assert w.tabs.selected_index == 1 and w.inspector.picker.value == "reserve"
        # a person's pick is kept: the failed step is not preselected over it
        w.refresh()
        assert w.inspector.picker.value == "reserve"
        w.close()


async def test_a_run_that_succeeds_shows_no_failure_line() -> None:
    async with Runtime(tools(), MemoryStore()) as rt:
        chain = Chain.from_dict({"name": "ok", "steps": [
            {"id": "load", "tool": "load", "args": {"n": 1}}]})
        run = await rt.start(chain)
        await run.wait()
        w = RunWidget(run)
        assert w.failure.value == "" and w.show_failure.layout.display == "none"
        w.close()
