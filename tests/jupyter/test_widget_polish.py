"""Issue 18, item 3 through the widgets' Python API: the legend lists what the run shows, the
step-through ``next`` dropdown offers the ready steps in release order, the labels never
outlive what they describe, and the timeline says it is drawing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import ipywidgets as W
import pytest

from chainlab import Chain, RunOptions, Toolbox
from chainlab.jupyter import RunWidget
from chainlab.jupyter.run_widget.choices import set_choices
from chainlab.jupyter.run_widget.legend import BREAK_MARK, BREAK_NOTE
from chainlab.render.display import reason_text, run_html
from chainlab.render.style import STATUS_STYLE
from chainlab.runtime import Run, RunStatus, Runtime
from chainlab.store import MemoryStore
from chainlab.testing import EventRecorder

pytestmark = pytest.mark.anyio


class Env:
    def __init__(self) -> None:
        self.toolbox = Toolbox("polish")
        self.runtime = Runtime(self.toolbox, MemoryStore())
        self.gate = anyio.Event()
        gate = self.gate

        @self.toolbox.tool
        def work(tag: str) -> str:
            return tag

        @self.toolbox.tool(expected_duration_s=5.0)
        def long(tag: str) -> str:
            return tag

        @self.toolbox.tool
        async def gated(tag: str) -> str:
            await gate.wait()
            return tag

        @self.toolbox.tool
        def boom(tag: str) -> str:
            raise ValueError(f"boom {tag}")

        @self.toolbox.tool(side_effects=True, requires_confirmation=True)
        def publish(text: str) -> str:
            return text

    async def start(self, steps: list[dict[str, Any]], **kw: Any) -> tuple[Run, RunWidget]:
        run = await self.runtime.start(Chain.from_dict({"name": "p", "steps": steps}), **kw)
        return run, RunWidget(run)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = Env()
    yield e
    await e.runtime.aclose()


def S(step_id: str, deps: tuple[str, ...] = (), tool: str = "work") -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "depends_on": list(deps), "args": {"tag": step_id}}


async def until(predicate: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def text(markup: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup))


def palette_order(statuses: set[str]) -> tuple[str, ...]:
    return tuple(s for s in STATUS_STYLE if s in statuses)


# ---------------------------------------------------------------------- legend
async def test_the_legend_lists_the_statuses_present_and_follows_the_run(env: Env) -> None:
    run, w = await env.start([S("a", tool="gated"), S("b", ("a",)), S("c", tool="boom")],
                             options=RunOptions(on_failure="continue"))
    legend = w.dag.legend
    assert legend is not None and "cl-legend" not in w.dag.canvas.svg  # not in the SVG
    await until(lambda: run.steps["a"].status == "running"
                and run.steps["c"].status == "failed")
    w.refresh()
    assert legend.statuses == palette_order({"pending", "running", "failed"})
    assert legend.statuses == palette_order(set(w.statuses().values()))
    strip = legend.strip.value
    for status, style in STATUS_STYLE.items():  # exactly those chips, nothing else
        assert (f">{style.caption}<" in strip) == (status in legend.statuses), status
    env.gate.set()
    await run.wait()
    w.refresh()
    assert set(legend.statuses) == set(w.statuses().values()) == {"succeeded", "failed"}
    assert f">{STATUS_STYLE['running'].caption}<" not in legend.strip.value


async def test_the_legend_is_one_line_until_expanded(env: Env) -> None:
    run, w = await env.start([S("a"), {"id": "p", "tool": "publish",
                                       "args": {"text": "{{ steps.a.output }}"}}])
    await run.wait()
    w.refresh()
    legend = w.dag.legend
    assert legend is not None and not legend.expanded
    assert legend.key.layout.display == "none" and legend.key.value == ""
    assert legend.marks == ("⚡ side effects", "☐ needs approval")  # the kinds in this chain
    legend.toggle.value = True  # the Legend button
    assert legend.expanded and legend.key.layout.display == ""
    key = legend.key.value
    assert "<svg" in key and "data reference" in key and "needs approval" in key
    shown = {s for s, style in STATUS_STYLE.items() if f">{style.caption}<" in key}
    assert shown == set(w.statuses().values()) == {"succeeded", "waiting_confirmation"}
    assert [i.name for i in legend.items() if i.section == "status"] == list(legend.statuses)
    legend.toggle.value = False
    assert legend.key.layout.display == "none"


async def test_a_chain_without_effects_lists_no_effect_marks(env: Env) -> None:
    run, w = await env.start([S("a"), S("b", ("a",))])
    await run.wait()
    w.refresh()
    assert w.dag.legend is not None and w.dag.legend.marks == ()
    assert "side effects" not in w.dag.legend.strip.value


def test_a_long_status_line_stays_inside_its_node() -> None:
    # "⇥ skipped · upstream failed" is longer than the line a live DAG reserves: the status
    # box is as wide as the node and ends in an ellipsis instead of crossing the border
    import xml.etree.ElementTree as ET

    from chainlab.render import LiveDag
    from chainlab.render.live import _x_span

    chain = Chain.from_dict({"name": "n", "steps": [S("a"), S("b"), S("c", ("a", "b"))]})
    live = LiveDag(chain, legend=False)  # a and b side by side: each box under its own node
    assert "text-overflow:ellipsis" in live.svg
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(live.svg)
    for step_id in ("a", "b", "c"):
        g = next(el for el in root.iter(f"{ns}g") if el.get("id") == live.element_id(step_id))
        shape = next(el for el in g.iter() if el.get("class") == "cl-shape")
        left, right = _x_span(ET.tostring(shape, encoding="unicode")) or (0, 0)
        box = next(g.iter(f"{ns}foreignObject"))
        x, width = float(box.get("x", "0")), float(box.get("width", "0"))
        assert left < x and x + width < right and width > (right - left) / 2


# ---------------------------------------------------------------------- next dropdown
def test_set_choices_keeps_the_choice_while_it_is_offered() -> None:
    dropdown = W.Dropdown(options=[])
    set_choices(dropdown, ["a", "b"])
    assert (dropdown.options, dropdown.value) == (("a", "b"), "a")  # never an empty box
    dropdown.value = "b"
    set_choices(dropdown, ["b", "c"])
    assert dropdown.value == "b"
    set_choices(dropdown, ["c"])
    assert dropdown.value == "c"
    set_choices(dropdown, [])
    assert (dropdown.options, dropdown.value) == ((), None)


async def test_next_lists_the_ready_steps_in_release_order_and_step_runs_the_choice(
        env: Env) -> None:
    # critical path: `z` heads a long branch, so it is released before `x` and `y`
    steps = [S("x"), S("y"), S("z"), S("zz", ("z",), tool="long")]
    run, w = await env.start(steps, paused=True,
                             options=RunOptions(priority="critical_path"))
    rec = EventRecorder()
    run.subscribe(rec)
    await until(lambda: len(run.ready_steps()) == 3)
    w.refresh()
    assert run.ready_steps() == ["z", "x", "y"]  # release order, not declaration order
    assert w.next_step.options == ("z", "x", "y") and w.next_step.value == "z"
    w.next_step.value = "y"
    w.buttons["step"].click()
    await until(lambda: run.steps["y"].status == "succeeded")
    await asyncio.sleep(0.02)
    assert rec.started() == ["y"]
    w.refresh()
    assert w.next_step.options == ("z", "x") and w.next_step.value == "z"
    w.buttons["step"].click()  # the preselected first one
    await until(lambda: run.steps["z"].status == "succeeded")
    w.refresh()
    assert w.next_step.options == tuple(run.ready_steps())
    assert set(w.next_step.options) == {"x", "zz"}
    w.buttons["continue"].click()
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    w.refresh()
    assert w.next_step.options == () and w.next_step.layout.display == "none"


async def test_step_clicked_in_a_subshell_thread_runs_the_chosen_step(env: Env) -> None:
    # JupyterLab's clicks arrive on a subshell thread and are handed to the run's loop; a
    # Step that has to start a worker raised NoEventLoopError there (seen in the browser:
    # "could not step") unless the handed-over call runs inside a Task
    from .test_subshell_clicks import click_in_a_subshell

    run, w = await env.start([S("root"), *[S(f"f{i}", ("root",)) for i in range(4)]],
                             paused=True)
    await until(lambda: run.ready_steps() == ["root"])
    w.refresh()
    click_in_a_subshell(w.buttons["step"].click)
    await until(lambda: run.steps["root"].status == "succeeded"
                and len(run.ready_steps()) == 4)
    w.refresh()
    assert w.next_step.value == "f0"
    w.next_step.value = "f2"
    click_in_a_subshell(w.buttons["step"].click)
    await until(lambda: run.steps["f2"].status == "succeeded")
    assert w.last_error is None
    assert [run.steps[f"f{i}"].status for i in range(4)] == ["ready", "ready", "succeeded",
                                                             "ready"]


async def test_the_queue_line_names_the_first_ready_steps_only(env: Env) -> None:
    from chainlab.jupyter.run_widget.controls import QUEUE_SHOWN

    fans = [S(f"f{i:02d}") for i in range(QUEUE_SHOWN + 4)]
    run, w = await env.start(fans, paused=True)
    await until(lambda: len(run.ready_steps()) == QUEUE_SHOWN + 4)
    w.refresh()
    shown = re.findall(r"<code>(\w+)</code>", w.queue.value)
    assert shown == run.ready_steps()[:QUEUE_SHOWN] and w.queue.value.endswith(
        " and 4 more</div>")
    assert len(w.next_step.options) == QUEUE_SHOWN + 4  # the dropdown offers every one


# ---------------------------------------------------------------------- labels
async def test_no_breakpoint_label_once_step_moved_past_it(env: Env) -> None:
    run, w = await env.start([S("a"), S("b", ("a",)), S("c", ("b",))],
                             options=RunOptions(breakpoints=["b"]))
    await until(lambda: run.paused and run.steps["a"].status == "succeeded")
    w.refresh()
    assert "at breakpoint <code>b</code>" in w.header.value
    assert BREAK_NOTE in w.dag.legend.marks
    w.buttons["step"].click()
    await until(lambda: run.steps["b"].status == "succeeded" and run.ready_steps() == ["c"])
    w.refresh()
    assert run.paused and run.state.paused_at == "b"  # the fold still remembers where
    assert "breakpoint" not in w.header.value and "breakpoints" not in w.queue.value
    assert not any(BREAK_MARK in c for c in w.dag.captions().values())
    assert BREAK_NOTE not in w.dag.legend.marks


async def test_no_breakpoint_label_after_the_run_ended(env: Env) -> None:
    # `late` has a breakpoint and is never reached: `a` fails first (fail_fast)
    run, w = await env.start([S("a", tool="boom"), S("g", tool="gated"),
                              S("late", ("g",))], options=RunOptions(breakpoints=["late"]))
    await until(lambda: run.steps["a"].status == "failed")
    w.refresh()
    assert "breakpoints: <code>late</code>" in w.queue.value  # still ahead while it runs
    env.gate.set()
    await run.wait()
    w.refresh()
    assert run.status == RunStatus.FAILED
    assert run.steps["late"].status == "cancelled"  # never reached
    assert "breakpoint" not in w.queue.value and "breakpoint" not in w.header.value
    assert all(BREAK_MARK not in b for b in w.badges().values())
    assert not any(BREAK_MARK in c for c in w.dag.captions().values())


async def test_cancelled_is_never_said_twice(env: Env) -> None:
    run, w = await env.start([S("a", tool="gated"), S("b", ("a",)), S("z")])
    await until(lambda: run.steps["a"].status == "running"
                and run.steps["z"].status == "succeeded")
    w.buttons["cancel"].click()
    await run.wait()
    w.refresh()
    assert run.status == RunStatus.CANCELLED
    w.inspector.select("a")
    shown = {"header": w.header.value, "dag": "\n".join(w.dag.captions().values()),
             "inspector": w.inspector.details.value, "events": w.event_log.value,
             "static": run_html(run)}
    for where, markup in shown.items():
        plain = text(markup)
        for twice in ("cancelled · cancelled", "cancelled (cancelled)",
                      "cancelled: cancelled", "step_cancelled a #1 cancelled"):
            assert twice not in plain, (where, twice, plain)
    assert w.dag.caption("b") == '■ cancelled · by a person'  # b: why, without the echo
    assert "step_cancelled b  by a person" in w.event_log.value


@pytest.mark.parametrize(("status", "reason", "shown"), [
    ("cancelled", "cancelled", ""),
    ("cancelled", "cancelled by a person", "by a person"),
    ("skipped", "upstream_failed", "upstream failed"),
    ("skipped", "skipped", ""),
    ("in_doubt", "timeout", "timeout"),
    ("cancelled", None, ""),
])
def test_reason_text(status: str, reason: str | None, shown: str) -> None:
    assert reason_text(status, reason) == shown


# ---------------------------------------------------------------------- timeline
async def test_the_timeline_says_it_is_drawing_until_the_chart_replaces_it(env: Env) -> None:
    run, w = await env.start([S("a"), S("b", ("a",))])
    await run.wait()
    w.refresh()
    tab = w.timeline
    assert not tab.drawing and tab.out.outputs == ()
    w.tabs.selected_index = 3
    assert tab.drawing and "drawing timeline" in tab.loading.value
    assert tab.out.outputs == () and tab.figure is None  # nothing drawn yet: the note shows
    await until(lambda: not tab.drawing)
    assert type(tab.figure).__name__ == "TimelineFigure"
    table, chart = (o["data"] for o in tab.out.outputs)
    assert "<table" in table["text/html"]
    assert "cl-theme-light-only" in chart["text/html"]  # a light and a dark picture ...
    assert "cl-theme-dark-only" in chart["text/html"] and "image/png" not in chart  # only
    tab.draw_button.click()  # Redraw: the note again, then the chart again
    assert tab.drawing
    await until(lambda: not tab.drawing)
    assert len(tab.out.outputs) == 2
