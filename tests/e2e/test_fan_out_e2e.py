"""A for_each step in a real JupyterLab and a real browser (issue 35 items 5 and 6): its run
waits for three approvals; the DAG draws the step as ONE node with its counts; each waiting
instance's card offers "Approve all 3"; one click approves the three, each with its own
args, and the run succeeds. The designer's "for each" choice lists the list-typed
references. Screenshots in the light and the dark theme go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import PANEL, require_chromium, run_all, shots_dir, themed
from .test_scrubber_e2e import caption_becomes

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "fan_out_e2e.ipynb"
TOOLS = '''%load_ext chainlab
import chainlab

tb = chainlab.Toolbox("fan")

@tb.tool
def names(n: int) -> list[str]:
    """Who to pay."""
    return ["ann", "bo", "cy"][:n]

@tb.tool(side_effects=True, requires_confirmation=True)
def pay(to: str, amount: int) -> str:
    """Pay someone (asks a person first)."""
    return f"paid {amount} to {to}"'''
CHAIN = '''%%chain payouts --tools tb
steps:
  - {id: who, tool: names, args: {n: 3}}
  - id: pay
    tool: pay
    for_each: "{{ steps.who.output }}"
    args: {to: "{{ item }}", amount: "{{ index }}"}'''
RUN = "r = %chain run payouts --tools tb"
DESIGN = "%chain design payouts --tools tb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("fan-out-lab")
    path = write_notebook(work / NOTEBOOK, [TOOLS, CHAIN, RUN, DESIGN])
    with Lab(work / "lab", [path]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "fan-out-e2e-failure.png", width=1400) as page:
        yield page


def test_approve_all_instances_in_the_browser(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)
    run = page.locator(f"{PANEL} .cl-run").first
    expect(run.locator(".cl-head")).to_contain_text("suspended", timeout=30_000)
    # one node for the step, with its instances counted
    pay = run.locator("g.node", has=page.locator("title", has_text="pay"))
    expect(pay).to_have_count(1)
    expect(pay).to_contain_text("▤☐⚡ pay")  # (▤: once per item; a glyph DejaVu Sans has)
    # its counts line (a CSS caption the DAG's front end patches as the instances change)
    assert caption_becomes(run, page, "pay", "▶ running · ☐ 3 awaiting approval") == \
        "▶ running · ☐ 3 awaiting approval"
    cards = run.locator(".cl-card")
    expect(cards).to_have_count(3)
    button = cards.first.locator("button", has_text="Approve all 3")
    expect(button).to_be_visible()
    run.scroll_into_view_if_needed()
    shots = shots_dir()
    run.screenshot(path=str(shots / "fan-out-approve-all-light.png"))
    themed(page, "JupyterLab Dark")
    run.screenshot(path=str(shots / "fan-out-approve-all-dark.png"))
    themed(page, "JupyterLab Light")

    button.click()
    expect(run.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=30_000)
    assert caption_becomes(run, page, "pay", "✓ succeeded · ✓ 3") == "✓ succeeded · ✓ 3"
    expect(cards).to_have_count(0)

    # the designer offers the list the step goes over, and item among the references
    designer = page.locator(f"{PANEL} .cl-designer")
    designer.scroll_into_view_if_needed()
    designer.locator("g.node", has=page.locator("title", has_text="pay")).click()
    for_each = designer.locator(".cl-dsg-form select").filter(has_text="no: one call")
    expect(for_each).to_have_value("steps.who.output · array of string")
    designer.screenshot(path=str(shots / "fan-out-designer-light.png"))
