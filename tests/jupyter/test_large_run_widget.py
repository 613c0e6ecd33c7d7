"""Issue 49 item 4: the run widget of a large run is laid out by chainlab, not Graphviz: it
opens without asking Graphviz, lays the run out once, and every later change (a live status,
a scrubber position, the static picture) patches that layout; a click on a node still opens
the step in the Inspector."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Toolbox
from chainlab.jupyter import RunWidget
from chainlab.render import layout as layout_module
from chainlab.render import live as live_module
from chainlab.render import svg as svg_module
from chainlab.render.layout import LAYERED_FROM
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from tests.render.scenarios import history_chain

pytestmark = pytest.mark.anyio

N = LAYERED_FROM + 50


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every layout made (by whom), and Graphviz forbidden; no layout kept from another
    test."""
    monkeypatch.setattr(live_module, "_TEMPLATES", type(live_module._TEMPLATES)())
    made: list[str] = []
    inner = layout_module.layout_svg

    def layout_svg(drawing: Any, **kw: Any) -> str:
        made.append(layout_module.layout_of(drawing))
        return inner(drawing, **kw)

    def no_graphviz(*_: Any, **__: Any) -> Any:
        raise AssertionError("Graphviz was asked to lay out a large run")

    monkeypatch.setattr(layout_module, "layout_svg", layout_svg)
    monkeypatch.setattr(svg_module, "render_svg", no_graphviz)
    return made


async def test_a_large_run_opens_laid_out_by_chainlab_and_then_only_patches(
        counted: list[str]) -> None:
    tb = Toolbox("big")
    tb.tool(lambda i: i, name="noop")
    async with Runtime(tb, MemoryStore()) as rt:
        run = await rt.start(history_chain(N))
        assert (await run.wait()).ok
        w = RunWidget(run)
        assert counted == ["layered"]  # laid out once, by chainlab
        canvas = w.dag.canvas
        assert canvas is not None
        assert canvas.svg.count('class="node cl-step"') == N  # every step drawn
        assert len(canvas.steps) == N and sorted(canvas.order) == sorted(canvas.steps)
        assert all(f'id="{element}"' in canvas.svg for element in canvas.order)
        assert set(w.dag.shown_by_step().values()) == {("succeeded", None)}

        # the scrubber: a position restyles only the steps that look different
        k = next(ev.seq for ev in run.event_list()
                 if ev.kind == "step_started" and ev.step_id == f"s{N // 2}")
        patches = w.dag.patches
        w.scrubber.scrub_to(k)
        differs = {s for s, look in w.dag.shown_by_step().items() if look[0] != "succeeded"}
        assert set(w.dag.last_patch) == differs and f"s{N // 2}" in differs
        assert w.dag.caption(f"s{N // 2}").endswith("running")
        assert w.dag.caption(f"s{N - 1}").endswith("pending")
        assert w.dag.patches == patches + 1
        w.scrubber.live_button.click()
        assert set(w.dag.shown_by_step().values()) == {("succeeded", None)}

        # the static picture is the same layout with the colours baked in
        static = w.dag.static_svg({f"s{i}": "succeeded" for i in range(N)})
        assert static.count('class="node cl-step"') == N

        # a click on a node opens its step in the Inspector
        assert canvas.steps[w.dag.live.element_id("s7")] == "s7"
        canvas.selected = "s7"  # what the front end sets on a click
        assert w.tabs.selected_index == 1 and w.inspector.picker.value == "s7"
        assert counted == ["layered"]  # and nothing of it laid the run out again
        w.close()


async def test_a_live_run_patches_its_status_without_a_new_layout(counted: list[str]) -> None:
    import anyio

    tb = Toolbox("big")
    gate = anyio.Event()

    @tb.tool
    async def noop(i: int) -> int:
        if i == 5:
            await gate.wait()
        return i

    async with Runtime(tb, MemoryStore()) as rt:
        run = await rt.start(history_chain(N))
        w = RunWidget(run)
        with anyio.fail_after(10):
            while run.steps["s5"].status != "running":
                await anyio.sleep(0.01)
        w.refresh()
        assert w.dag.caption("s5").endswith("running") and w.dag.caption("s4").endswith(
            "succeeded")
        gate.set()
        assert (await run.wait()).ok
        w.refresh()
        assert set(w.dag.shown_by_step().values()) == {("succeeded", None)}
        assert counted == ["layered"]
        w.close()
