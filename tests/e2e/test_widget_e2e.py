"""Issue 18, item 3 (and issue 40) in a real JupyterLab and a real browser: a wide chain's DAG
fits its box (a 30-step fan-out is drawn as a grid, fitted to the output's width), a tall one
scrolls down, the legend is one line of
the statuses present until **Legend** opens the key, and step-through's ``next`` dropdown
shows the ready steps so that **Step** runs the one a person picked.

Screenshots in the light and the dark theme go to ``$CHAINLAB_SHOTS`` (default
tests/artifacts/): widget-wide-*.png, widget-tall-*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    ARTIFACTS,
    JS_NODE_LOOK,
    PANEL,
    require_chromium,
    run_all,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "widget_e2e.ipynb"
WIDE = '''%load_ext chainlab
from chainlab import Chain, RunOptions, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

tb = Toolbox("widget")

@tb.tool
def work(tag: str) -> str:
    """Return the tag."""
    return tag

fans = [f"fan_{i:02d}" for i in range(30)]
wide = Chain.from_dict({"name": "wide", "steps": [
    {"id": "root", "tool": "work", "args": {"tag": "root"}},
    *[{"id": f, "tool": "work", "args": {"tag": "{{ steps.root.output }}"}} for f in fans],
    {"id": "join", "tool": "work", "args": {"tag": "join"}, "depends_on": fans}]})
runtime = Runtime(tb, MemoryStore())
run = await runtime.start(wide, paused=True)
run'''
TALL = '''tall = Chain.from_dict({"name": "tall", "steps": [
    {"id": f"s{i:02d}", "tool": "work", "args": {"tag": str(i)},
     "depends_on": [f"s{i - 1:02d}"] if i else []} for i in range(25)]})
run2 = await runtime.start(tall)
await run2.wait()
run2'''
JS_BOX = """b => ({sw: b.scrollWidth, cw: b.clientWidth, sh: b.scrollHeight, ch: b.clientHeight,
  overflow: getComputedStyle(b).overflow,
  out: b.closest('.jp-OutputArea-output').getBoundingClientRect().width,
  width: b.getBoundingClientRect().width})"""
SUCCEEDED_FILL = "rgb(205, 238, 224)"  # STATUS_STYLE["succeeded"].fill, #cdeee0
READY_FILL = "rgb(227, 241, 251)"  # STATUS_STYLE["ready"].fill, #e3f1fb


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("widget-lab")
    path = write_notebook(work / NOTEBOOK, [WIDE, TALL])
    with Lab(work, [path]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-widget-failure.png") as page:
        yield page


def node(widget: Any, page: Any, step_id: str) -> Any:
    return widget.locator("g.node", has=page.locator("title", has_text=step_id)).first


def test_wide_and_tall_dags_scroll_legend_and_next(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    shots = shots_dir()
    run_all(page, lab, NOTEBOOK)
    wide, tall = page.locator(f"{PANEL} .cl-run").nth(0), page.locator(f"{PANEL} .cl-run").nth(1)
    expect(wide.locator(".cl-head")).to_contain_text("1 ready", timeout=20_000)
    expect(tall.locator(".cl-head")).to_contain_text("25 succeeded", timeout=20_000)

    # the wide DAG fits the output's width (a grid, fitted), nothing cut off to the right;
    # the tall one scrolls down inside its box
    box = wide.locator(".cl-dagbox").evaluate(JS_BOX)
    assert box["overflow"] == "auto" and box["sw"] <= box["cw"] + 1, box
    assert box["width"] <= box["out"], box
    expect(wide.locator(".cl-zoominfo")).to_contain_text("(fit) · 32 steps")
    assert "showing" not in wide.locator(".cl-zoominfo").inner_text()
    assert wide.evaluate("w => w.scrollWidth <= w.clientWidth + 1")  # nothing sticks out
    box = tall.locator(".cl-dagbox").evaluate(JS_BOX)
    assert box["sh"] > box["ch"] + 500 and box["width"] <= box["out"], box

    # the legend: one line with the statuses present, the key only on request
    legend = wide.locator(".cl-legend-view")
    expect(legend.locator(".cl-chip")).to_have_text(["○ pending", "◔ ready"])
    key = legend.locator(".cl-legend-key")
    expect(key).to_be_hidden()
    assert legend.evaluate("l => l.getBoundingClientRect().height") < 40  # one line
    expect(tall.locator(".cl-legend-view .cl-chip")).to_have_text(["✓ succeeded"])
    legend.locator("button", has_text="Legend").click()
    expect(key.locator("svg")).to_be_visible()
    expect(key).to_contain_text("data reference")
    legend.locator("button", has_text="Legend").click()
    expect(key).to_be_hidden()

    # step-through: `next` shows the first ready step; Step runs the one picked
    choice = wide.locator(".cl-toolbar select")
    expect(choice).to_have_value("root")
    wide.locator("button.jupyter-button", has_text="Step").click()
    expect(wide.locator(".cl-head")).to_contain_text("30 ready", timeout=20_000)
    expect(choice).to_have_value("fan_00")
    expect(wide.locator(".cl-queue")).to_contain_text("fan_07 and 22 more")  # one line
    assert choice.evaluate("s => [...s.options].map(o => o.value)") == [
        f"fan_{i:02d}" for i in range(30)]
    choice.select_option("fan_07")
    wide.locator("button.jupyter-button", has_text="Step").click()
    expect(wide.locator(".cl-head")).to_contain_text("2 succeeded", timeout=20_000)
    assert node(wide, page, "fan_07").evaluate(JS_NODE_LOOK)[0] == SUCCEEDED_FILL
    assert node(wide, page, "fan_00").evaluate(JS_NODE_LOOK)[0] == READY_FILL
    expect(legend.locator(".cl-chip")).to_have_text(["○ pending", "◔ ready", "✓ succeeded"])
    expect(wide.locator(".cl-error")).to_have_count(0)  # no "could not step" on the way
    wide.screenshot(path=str(shots / "widget-wide-light.png"))
    tall.screenshot(path=str(shots / "widget-tall-light.png"))

    # the timeline: "drawing timeline..." gives way to the chart
    tall.locator(".lm-TabBar-tab", has_text="Timeline").click()
    expect(tall.locator("img.cl-theme-light-only")).to_be_visible(timeout=30_000)
    expect(tall.locator(".cl-loading")).to_be_hidden()

    tall.locator(".lm-TabBar-tab", has_text="Approvals").click()
    themed(page, "JupyterLab Dark")
    page.wait_for_timeout(300)  # the theme's colours settle
    legend.locator("button", has_text="Legend").click()
    expect(key.locator("svg")).to_be_visible()
    wide.screenshot(path=str(shots / "widget-wide-dark.png"))
    tall.screenshot(path=str(shots / "widget-tall-dark.png"))
    themed(page, "JupyterLab Light")
    errors = [e for e in page.errors if "favicon" not in e]
    assert not [e for e in errors if "Error displaying widget" in e], errors
