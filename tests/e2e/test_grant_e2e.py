"""The approval card's "approve and allow similar…" and the DAG's marks of calls decided by a
rule, in a real JupyterLab and a real browser, light and dark (screenshots in
tests/artifacts/): a rule approves the small payment, the card of a larger one opens its grant
form with the condition prefilled, and its click decides the sibling the grant covers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import PANEL, require_chromium, run_all, shots_dir, themed

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "grant_e2e.ipynb"
CELLS = [
    "%load_ext chainlab\nimport chainlab\ntb = chainlab.Toolbox('pay')\n"
    "@tb.tool(side_effects=True, requires_confirmation=True)\n"
    "def pay(amount: int) -> str:\n    return f'paid {amount}'",
    "%%chain payouts --tools tb\nsteps:\n  - id: pay\n    tool: pay\n"
    "    for_each: \"{{ context.amounts }}\"\n    args: {amount: \"{{ item }}\"}\n"
    "options:\n  policies:\n    - {id: small, tool: pay, when: 'args.amount <= 10', "
    "decision: approve}\n",
    "r = %chain run payouts --tools tb --context '{\"amounts\": [5, 40, 60]}'",
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("grant-lab")
    path = write_notebook(work / NOTEBOOK, list(CELLS))
    with Lab(work, [path]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "grant-e2e-failure.png", width=1200) as page:
        yield page


def test_the_grant_form_of_a_card_in_both_themes(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)
    widget = page.locator(f"{PANEL} .cl-run").first
    cards = widget.locator(".cl-card")
    expect(cards).to_have_count(2, timeout=30_000)  # 5 was approved by the rule
    card = cards.first
    card.get_by_text("approve and allow similar…").click()
    when = card.locator(".cl-grant-when input")
    expect(when).to_have_value("args.amount <= 40")  # prefilled from the call's args
    shots = shots_dir()
    page.wait_for_timeout(300)
    widget.screenshot(path=str(shots / "grant-light.png"))
    themed(page, "JupyterLab Dark")
    widget.screenshot(path=str(shots / "grant-dark.png"))
    themed(page, "JupyterLab Light")
    when.fill("args.amount <= 100")
    card.locator("button.jupyter-button", has_text="Allow similar").click()
    expect(cards).to_have_count(0, timeout=30_000)  # 60 decided by the grant
    page.wait_for_timeout(500)
    widget.screenshot(path=str(shots / "grant-after-light.png"))
