"""Issue 40, items 2 and 7, in a real JupyterLab in headless Chromium with the console open.

* Notebook 01 walked top to bottom (Run All, every output scrolled into view).
* A 1,000-step fan-out: its run widget's DAG opens fitted to the output's width with the
  first and the last step in view (the fan-out drawn as a grid), zooms in with "+", pans by
  dragging, fits again; a click on a node opens its step in the Inspector. The designer shows
  the same chain with the same viewport. Screenshots at 1,000 nodes in the light and the dark
  theme go to tests/artifacts/ (``large-*.png``).

Both fail on any error the page logs (console errors and uncaught exceptions): a chainlab
widget that throws is a defect, whichever library's console line says it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    JS_ALL_CELLS_RAN,
    NOTEBOOKS,
    PANEL,
    require_chromium,
    run_all,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

N = 1000
FAN = [
    "%load_ext chainlab\nimport chainlab\ntb = chainlab.Toolbox('fan')\n\n"
    "@tb.tool\ndef noop(i: int = 0) -> int:\n    return i",
    f"steps = [{{'id': 'start', 'tool': 'noop'}}]\n"
    f"steps += [{{'id': f's{{i:04d}}', 'tool': 'noop', 'args': {{'i': i}},\n"
    f"           'depends_on': ['start']}} for i in range({N})]\n"
    f"steps += [{{'id': 'end', 'tool': 'noop', 'depends_on': [f's{{i:04d}}' for i in "
    f"range({N})]}}]\nfan = chainlab.Chain.from_dict({{'name': 'fan', 'steps': steps}})",
    "run = %chain run fan --tools tb --db :memory:",
    "r = await run.wait()\nprint(r.status)",
    "%chain design fan --tools tb",
]
# the part of a node that is inside its DAG box's visible area (0: none, 1: all of it)
JS_IN_VIEW = """([box, node]) => {
  const b = box.getBoundingClientRect(), n = node.getBoundingClientRect();
  const w = Math.max(0, Math.min(b.right, n.right) - Math.max(b.left, n.left));
  const h = Math.max(0, Math.min(b.bottom, n.bottom) - Math.max(b.top, n.top));
  return n.width && n.height ? (w * h) / (n.width * n.height) : 0; }"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab-large")
    fan = write_notebook(work / "fan.ipynb", FAN)
    with Lab(work / "lab", [NOTEBOOKS / "01-quickstart.ipynb", fan]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "large-failure.png", width=1280) as page:
        page.errors = []  # console errors AND uncaught exceptions, every type of each
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
        yield page


def no_errors(page: Any) -> None:
    errors = [e for e in page.errors if "favicon" not in e]
    assert not errors, errors


def node(scope: Any, page: Any, step_id: str) -> Any:
    return scope.locator("g.node", has=page.locator("title", has_text=step_id)).first


def in_view(box: Any, element: Any) -> float:
    """The part of ``element`` inside ``box``'s visible area."""
    return float(box.page.evaluate(JS_IN_VIEW, [box.element_handle(),
                                                element.element_handle()]))


def test_notebook_01_logs_no_error(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, "01-quickstart.ipynb")
    widget = page.locator(f"{PANEL} .cl-run").first
    expect(widget.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=30_000)
    for cell in page.locator(f"{PANEL} .jp-CodeCell").all():  # every output drawn
        cell.scroll_into_view_if_needed()
    page.wait_for_function(JS_ALL_CELLS_RAN, timeout=30_000)
    no_errors(page)


def test_a_thousand_step_fan_out_opens_whole(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, "fan.ipynb")
    widget = page.locator(f"{PANEL} .cl-run").first
    expect(widget.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=120_000)
    widget.scroll_into_view_if_needed()
    box = widget.locator(".cl-dagbox")
    info = widget.locator(".cl-zoominfo")
    expect(info).to_contain_text("(fit)")
    expect(info).to_contain_text("1,002 steps")
    assert "showing" not in info.inner_text()  # nothing of it is out of view
    start, end = node(widget, page, "start"), node(widget, page, "end")
    # the first and the last step in view, at once, as it opens
    assert in_view(box, start) == 1.0 and in_view(box, end) == 1.0
    fitted = box.evaluate("b => b.querySelector('svg').getBoundingClientRect().width")
    assert fitted <= box.evaluate("b => b.clientWidth") + 1  # fitted to the width
    shots = shots_dir()
    widget.screenshot(path=str(shots / "large-fan-1000-light.png"))

    # zoom in on the middle: the text gets readable, the rest is a drag away
    for _ in range(4):
        widget.locator(".cl-zoom-btn", has_text="+").click()
    expect(info).not_to_contain_text("(fit)")
    expect(info).to_contain_text("showing")
    zoomed = box.evaluate("b => b.querySelector('svg').getBoundingClientRect().width")
    assert zoomed > fitted * 2
    before = box.evaluate("b => [b.scrollLeft, b.scrollTop]")
    b = box.bounding_box()
    assert b is not None
    page.mouse.move(b["x"] + b["width"] * 0.6, b["y"] + b["height"] * 0.6)
    page.mouse.down()
    page.mouse.move(b["x"] + b["width"] * 0.3, b["y"] + b["height"] * 0.3, steps=6)
    page.mouse.up()
    after = box.evaluate("b => [b.scrollLeft, b.scrollTop]")
    assert after[0] > before[0] and after[1] > before[1], (before, after)  # panned
    widget.screenshot(path=str(shots / "large-fan-1000-zoomed-light.png"))
    # a click on a node in view opens its step in the Inspector
    visible = page.evaluate("""box => {
      const b = box.getBoundingClientRect();
      for (const g of box.querySelectorAll('g.node')) {
        const r = g.getBoundingClientRect();
        if (r.left > b.left + 5 && r.right < b.right - 5 && r.top > b.top + 5
            && r.bottom < b.bottom - 5) return g.querySelector('title').textContent;
      }
      return null; }""", box.element_handle())
    assert visible is not None
    node(widget, page, visible).click()
    expect(widget.locator(".widget-tab-contents .widget-dropdown select").first).to_have_value(
        visible, timeout=10_000)
    widget.locator(".cl-zoom-btn", has_text="fit").click()
    expect(info).to_contain_text("(fit)")
    assert in_view(box, start) == 1.0 and in_view(box, end) == 1.0

    themed(page, "JupyterLab Dark")
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(shots / "large-fan-1000-dark.png"))

    # the designer: the same chain, the same viewport
    designer = page.locator(f"{PANEL} .cl-designer").first
    designer.scroll_into_view_if_needed()
    canvas = designer.locator(".cl-dagbox")
    expect(designer.locator(".cl-zoominfo")).to_contain_text("(fit)", timeout=60_000)
    assert in_view(canvas, node(designer, page, "start")) == 1.0
    assert in_view(canvas, node(designer, page, "end")) == 1.0
    designer.screenshot(path=str(shots / "large-designer-1000-dark.png"))
    themed(page, "JupyterLab Light")
    designer.scroll_into_view_if_needed()
    designer.screenshot(path=str(shots / "large-designer-1000-light.png"))
    no_errors(page)
