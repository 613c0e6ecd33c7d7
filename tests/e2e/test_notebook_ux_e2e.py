"""Issue 29 in a real JupyterLab and a real browser, what a person sees: a failed run names
its step and error above the DAG; a click on a DAG node opens that step in the Inspector;
the history scrubber follows a drag; the designer says "needs context" until the context
form is filled, then "valid"; a reference of the wrong type is a ``reference_type`` problem;
a chain that declares ``inputs:`` gets its form from them (issue 29 item 4b).

Screenshots (light and dark theme) go to tests/artifacts/ (``CHAINLAB_SHOTS=DIR`` elsewhere).
"""

from __future__ import annotations

import re
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

NOTEBOOK = "ux_e2e.ipynb"
TOOLS = '''%load_ext chainlab
import chainlab

tb = chainlab.Toolbox("ux")

@tb.tool
def load(n: int) -> int:
    """Load a number."""
    return n

@tb.tool(retry={"max_attempts": 1})
def parse(text: str) -> float:
    """Parse a price."""
    return float(text)

@tb.tool
def fetch_orders(customer: str) -> list[dict]:
    """A customer's open orders."""
    return [{"id": 1, "amount": 30.0}]

@tb.tool
def total(orders: list[dict]) -> float:
    """Sum of the order amounts."""
    return sum(o["amount"] for o in orders)
'''
FLOW = '''%%chain flow --tools tb
steps:
  - {id: load, tool: load, args: {n: 1}}
  - {id: reserve, tool: load, args: {n: 2}}
  - {id: convert, tool: parse, args: {text: "12,50"}, depends_on: [load]}
'''
RUN = "run = %chain run flow --tools tb\nresult = await run.wait()"
BILL = '''%%chain bill --tools tb
steps:
  - {id: orders, tool: fetch_orders, args: {customer: "{{ context.customer }}"}}
  - {id: sum, tool: total, args: {orders: "{{ steps.orders.output }}"}}
'''
DESIGN = "%chain design bill --tools tb"
QUOTE_NOTEBOOK = "inputs_e2e.ipynb"
QUOTE_TOOLS = '''%load_ext chainlab
import chainlab

tb = chainlab.Toolbox("quotes")

@tb.tool
def price(customer: str, tier: str) -> str:
    """Quote a price."""
    return f"{customer}: {40 if tier == 'pro' else 10} EUR"'''
QUOTE = '''%%chain quote --tools tb
inputs:
  customer: {type: string, description: who the quote is for}
  tier: {type: string, enum: [basic, pro], default: basic, description: the price list}
steps:
  - {id: price, tool: price, args: {customer: "{{ context.customer }}", tier: "{{ context.tier }}"}}
output: "{{ steps.price.output }}"
'''
JS_CELL_SOURCES = """() => window.jupyterapp.shell.currentWidget.content.model.sharedModel.cells
  .map(c => c.getSource())"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab-ux")
    path = write_notebook(work / NOTEBOOK, [TOOLS, FLOW, RUN, BILL, DESIGN])
    quote = write_notebook(work / QUOTE_NOTEBOOK,
                           [QUOTE_TOOLS, QUOTE, "%chain design quote --tools tb"])
    with Lab(work / "lab", [path, quote]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "ux-e2e-failure.png", width=1400) as page:
        yield page


def node(scope: Any, page: Any, step_id: str) -> Any:
    return scope.locator("g.node", has=page.locator("title", has_text=step_id)).first



def test_what_a_person_sees(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)
    shots = shots_dir()

    # 1. the failed run names its step and error; one click shows it in the Inspector
    run = page.locator(f"{PANEL} .cl-run").first
    run.scroll_into_view_if_needed()
    expect(run.locator(".cl-badge.cl-r-failed")).to_be_visible(timeout=30_000)
    expect(run.locator(".cl-failure")).to_contain_text("convert")
    expect(run.locator(".cl-failure")).to_contain_text("12,50")
    run.screenshot(path=str(shots / "ux-run-failed-light.png"))
    run.locator("button", has_text="Show 'convert'").click()
    tab = run.locator(".lm-TabBar-tab.lm-mod-current, .p-TabBar-tab.p-mod-current")
    expect(tab).to_contain_text("Inspector")
    expect(run.locator(".cl-inspector")).to_contain_text("could not convert string to float")

    # 2. a click on a DAG node selects that step in the Inspector
    node(run, page, "reserve").click()
    expect(run.locator(".cl-inspector select").first).to_have_value("reserve", timeout=10_000)
    expect(tab).to_contain_text("Inspector")
    run.screenshot(path=str(shots / "ux-run-node-clicked-light.png"))

    # 3. the scrubber follows a drag
    handle = run.locator(".cl-scrubber .noUi-handle").first
    track = run.locator(".cl-scrubber .noUi-base, .cl-scrubber .slider").first
    hb, tb = handle.bounding_box(), track.bounding_box()
    assert hb and tb
    page.mouse.move(hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2)
    page.mouse.down()
    page.mouse.move(tb["x"] + tb["width"] * 0.4, hb["y"] + hb["height"] / 2, steps=10)
    page.mouse.up()
    expect(run.locator(".cl-head")).to_contain_text("history: after event", timeout=10_000)
    match = re.search(r"after event (\d+) of (\d+)", run.locator(".cl-head").inner_text())
    assert match and 0 < int(match.group(1)) < int(match.group(2))
    run.screenshot(path=str(shots / "ux-run-scrubbed-light.png"))
    themed(page, "JupyterLab Dark")
    run.screenshot(path=str(shots / "ux-run-scrubbed-dark.png"))
    themed(page, "JupyterLab Light")
    run.locator(".cl-scrubber button", has_text="Live").click()
    expect(run.locator(".cl-head")).not_to_contain_text("history:", timeout=10_000)

    # 4. the designer: needs context until the form is filled
    designer = page.locator(f"{PANEL} .cl-designer")
    designer.scroll_into_view_if_needed()
    badge = designer.locator(".cl-dsg-head .cl-badge")
    expect(badge).to_contain_text("valid plan · needs context: customer", timeout=30_000)
    run_button = designer.locator(".cl-dsg-head button", has_text="Run")
    expect(run_button).to_be_disabled()
    designer.screenshot(path=str(shots / "ux-designer-needs-context-light.png"))
    themed(page, "JupyterLab Dark")
    designer.screenshot(path=str(shots / "ux-designer-needs-context-dark.png"))
    themed(page, "JupyterLab Light")
    box = designer.locator(".cl-dsg-ctx-customer input")
    expect(box).to_have_attribute("placeholder", "string")
    box.fill("Ada")
    box.press("Enter")
    expect(badge).to_have_text(re.compile(r"✓ valid$"), timeout=10_000)
    expect(run_button).to_be_enabled()

    # 5. a reference of the wrong type: its own problem, with both types
    node(designer.locator(".cl-dsg-canvas"), page, "sum").click()
    pick = designer.locator(".cl-dsg-arg-orders .cl-dsg-refpick select")
    expect(pick).to_be_visible()
    expect(designer.locator(".cl-dsg-arg-orders .cl-dsg-refpick")).to_contain_text("from")
    pick.select_option("context.customer")
    problems = designer.locator(".cl-dsg-problems")
    expect(problems).to_contain_text("reference_type", timeout=10_000)
    expect(problems).to_contain_text("is string")
    expect(problems).to_contain_text("array of object")
    expect(run_button).to_be_disabled()
    designer.screenshot(path=str(shots / "ux-designer-type-problem-light.png"))
    themed(page, "JupyterLab Dark")
    designer.screenshot(path=str(shots / "ux-designer-type-problem-dark.png"))
    run.scroll_into_view_if_needed()
    run.screenshot(path=str(shots / "ux-run-node-clicked-dark.png"))
    themed(page, "JupyterLab Light")

    # 6. a second "Write cell" replaces the cell the first one wrote
    before = page.evaluate(JS_CELL_SOURCES)
    write = designer.locator(".cl-dsg-head button", has_text="Write cell")
    write.click()
    expect(designer).to_contain_text("Inserted a", timeout=10_000)
    write.click()
    expect(designer).to_contain_text("Replaced the", timeout=10_000)
    after = page.evaluate(JS_CELL_SOURCES)
    assert len(after) == len(before) + 1
    assert sum(c.startswith("%%chain bill") for c in after) == 2  # BILL's and the written one


def test_the_designer_form_comes_from_the_declared_inputs(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, QUOTE_NOTEBOOK)
    shots = shots_dir()
    designer = page.locator(f"{PANEL} .cl-designer")
    expect(designer).to_be_visible(timeout=30_000)
    badge = designer.locator(".cl-dsg-head .cl-badge")
    # tier has a default: only customer is needed
    expect(badge).to_contain_text("valid plan · needs context: customer", timeout=30_000)
    customer = designer.locator(".cl-dsg-ctx-customer input")
    expect(customer).to_have_attribute("placeholder", "string, required")
    # each declared description is written beside its box
    row = designer.locator(".cl-dsg-ctxrow", has=page.locator(".cl-dsg-ctx-customer"))
    expect(row).to_contain_text("who the quote is for")
    tier = designer.locator(".cl-dsg-ctx-tier select")
    expect(tier.locator("option")).to_have_text(
        ["(one of 'basic', 'pro', default 'basic')", "basic", "pro"])
    designer.screenshot(path=str(shots / "ux-designer-inputs-light.png"))
    themed(page, "JupyterLab Dark")
    designer.screenshot(path=str(shots / "ux-designer-inputs-dark.png"))
    themed(page, "JupyterLab Light")
    customer.fill("Ada")
    customer.press("Enter")
    tier.select_option("pro")
    expect(badge).to_have_text(re.compile(r"✓ valid$"), timeout=10_000)
    designer.locator(".cl-dsg-head button", has_text="Run").click()
    run = designer.locator(".cl-run")
    expect(run.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=30_000)
    designer.screenshot(path=str(shots / "ux-designer-inputs-ran-light.png"))
