"""The chain designer in a real JupyterLab and a real browser, driven like a person would:
open it with ``%chain design``, add two steps from the palette, type a literal, pick a
reference to the first step's output, see 2 nodes and 1 edge, clear a required field and
see ``invalid_args``, restore it, click Run and see the run succeed; then "Write cell".

Screenshots (light and dark theme) go to tests/artifacts/ (``CHAINLAB_SHOTS=DIR`` elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    PANEL,
    require_chromium,
    run_all,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "designer_e2e.ipynb"
TOOLS = '''%load_ext chainlab
import chainlab

tb = chainlab.Toolbox("e2e")

@tb.tool
def fetch(n: int) -> list[int]:
    """Fetch n numbers."""
    return list(range(n))

@tb.tool
def total(items: list[int]) -> int:
    """Add the numbers up."""
    return sum(items)

@tb.tool(side_effects=True, idempotent=True, requires_confirmation=True)
def publish(text: str, channel: str = "news") -> str:
    """Publish a line of text."""
    return text'''
DESIGNER = f"{PANEL} .cl-designer"
JS_CELL_SOURCES = """() => window.jupyterapp.shell.currentWidget.content.model.sharedModel.cells
  .map(c => c.getSource())"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("designer-lab")
    path = write_notebook(work / NOTEBOOK, [TOOLS, "%chain design flow --tools tb"])
    with Lab(work / "lab", [path]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "designer-e2e-failure.png", width=1400) as page:
        yield page


def test_design_and_run_a_two_step_chain(lab: Lab, page: Any) -> None:
    design_and_run(lab, page)


def design_and_run(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)
    designer = page.locator(DESIGNER)
    expect(designer).to_be_visible(timeout=30_000)
    expect(designer.locator(".cl-dsg-emptydag")).to_be_visible()
    shots = shots_dir()
    designer.screenshot(path=str(shots / "designer-empty-light.png"))
    clicks = 0

    def click(locator: Any) -> None:
        nonlocal clicks
        clicks += 1
        locator.click()

    # 1. two steps from the palette, a literal and a reference
    click(designer.locator(".cl-dsg-add", has_text="fetch"))
    n = designer.locator(".cl-dsg-arg-n input")
    expect(n).to_be_visible()
    expect(designer.locator(".cl-dsg-problems")).to_contain_text("invalid_args")
    click(n)
    # fill, not key presses: right after "run all cells" JupyterLab may still move focus to
    # the notebook (its own timing, slower under load), and a key pressed then goes nowhere;
    # fill focuses the box and types in one step. The value is checked first so that a lost
    # edit (the box) and a lost round trip (the problems) fail with different messages.
    n.fill("3")
    expect(n).to_have_value("3")
    expect(designer.locator(".cl-dsg-problems")).to_have_count(0)
    click(designer.locator(".cl-dsg-add", has_text="total"))
    pick = designer.locator(".cl-dsg-arg-items .cl-dsg-refpick select")
    expect(pick).to_be_visible()
    clicks += 2  # a person opens the dropdown and picks the option
    pick.select_option("steps.fetch.output · array of integer")
    canvas = designer.locator(".cl-dsg-canvas")
    expect(canvas.locator("g.node")).to_have_count(2)
    expect(canvas.locator("g.edge")).to_have_count(1)
    expect(designer.locator(".cl-dsg-head .cl-dsg-ok")).to_contain_text("valid")
    designer.screenshot(path=str(shots / "designer-two-steps-light.png"))

    # 2. click the first node: its form; clear its required field: invalid_args, outlined
    canvas.locator("g.node", has=page.locator("title", has_text="fetch")).click()
    expect(designer.locator(".cl-dsg-form input").first).to_have_value("fetch")
    n.fill("")
    problems = designer.locator(".cl-dsg-problems")
    expect(problems).to_contain_text("invalid_args")
    expect(problems).to_contain_text("missing required arg 'n' for tool 'fetch'")
    expect(designer.locator(".cl-dsg-arg-n .cl-dsg-fieldproblem")).to_contain_text(
        "invalid_args")
    expect(designer.locator(".cl-dsg-head button", has_text="Run")).to_be_disabled()
    fetch_node = canvas.locator("g.node", has=page.locator("title", has_text="fetch"))
    expect(fetch_node.locator(".cl-st")).to_have_count(1)
    page.wait_for_function(
        """el => getComputedStyle(el.querySelector('.cl-st'), '::after').content
                  === '"⚠ invalid_args"'""", arg=fetch_node.element_handle(), timeout=30_000)
    designer.screenshot(path=str(shots / "designer-problem-light.png"))
    n.fill("3")
    expect(problems).to_have_count(0)
    # the keyboard way: every node is focusable, Enter opens its step
    total_node = canvas.locator("g.node", has=page.locator("title", has_text="total"))
    # (focus and key in one action: a key pressed after a separate focus() goes to whatever
    # JupyterLab focused meanwhile, which on a loaded machine may be the notebook)
    total_node.press("Enter")
    expect(designer.locator(".cl-dsg-form input").first).to_have_value("total")

    # 3. run it: the run widget appears in place and succeeds
    click(designer.locator(".cl-dsg-head button", has_text="Run"))
    run = designer.locator(".cl-run")
    expect(run.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=30_000)
    assert clicks == 6, clicks  # from an empty designer to a running two-step chain
    designer.screenshot(path=str(shots / "designer-run-light.png"))

    # 4. "Write cell" inserts a %%chain cell below the designer's cell
    designer.locator(".cl-dsg-head button", has_text="Write cell").click()
    expect(designer.locator(".cl-note", has_text="Inserted a %%chain cell")).to_be_visible(
        timeout=10_000)
    sources = page.evaluate(JS_CELL_SOURCES)
    assert len(sources) == 3
    assert sources[2].startswith("%%chain flow --tools tb\nname: flow\nsteps:\n- id: fetch\n")
    assert "items: '{{ steps.fetch.output }}'" in sources[2]

    # 5. the dark theme
    themed(page, "JupyterLab Dark")
    designer.locator(".cl-dsg-add", has_text="publish").click()
    expect(canvas.locator("g.node")).to_have_count(3)
    page.wait_for_timeout(300)  # the theme's fonts and colours settle
    designer.screenshot(path=str(shots / "designer-dark.png"))
    themed(page, "JupyterLab Light")
    errors = [e for e in page.errors if "favicon" not in e]
    assert not [e for e in errors if "Error displaying widget" in e or "anywidget" in e], errors
