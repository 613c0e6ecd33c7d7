"""Issue 40's smaller items, each as a person sees it: a rejected run's failure line gives
the reason typed, a badge reads "rolled back", a card without a preview does not show the
args twice, a planned chain says each adjustment once, the designer offers the references
that fit a parameter first."""

from __future__ import annotations

import html
import re

import ipywidgets as W
import pytest

from chainlab import Toolbox
from chainlab.jupyter import ChainDesigner
from chainlab.jupyter.views import ChainView
from chainlab.planner.base import PlanReport

from .conftest import Harness

pytestmark = pytest.mark.anyio

TOOLS = '''
import chainlab
tb = chainlab.Toolbox("bill")

@tb.tool
def fetch(n: int) -> list:
    return list(range(n))

@tb.tool(side_effects=True, requires_confirmation=True, compensate=("void", {}))
def send_invoice(items: list) -> str:
    return f"sent {len(items)}"

@tb.tool(side_effects=True, idempotent=True)
def void() -> str:
    return "voided"
'''
BILL = '''%%chain bill --tools tb
steps:
  - {id: get, tool: fetch, args: {n: 2}}
  - {id: send_invoice, tool: send_invoice, args: {items: "{{ steps.get.output }}"}}
'''


@pytest.fixture
async def bill(sh: Harness) -> Harness:
    await sh.ok(TOOLS)
    await sh.ok(BILL)
    sh.displayed()
    return sh


def text(markup: str) -> str:
    """What a person reads: no tags, no style sheets, entities decoded."""
    markup = re.sub(r"<style.*?</style>", " ", markup, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


async def test_a_rejected_runs_failure_line_gives_the_reason_typed(bill: Harness) -> None:
    await bill.ok("run = %chain run bill --tools tb\nawait run.wait()")
    w = bill.session.widgets[bill.ns["run"].run_id]
    card = w.inbox.card("send_invoice")
    card.reason.value = "wrong customer"
    card.reject_button.click()
    await bill.ok("r = await run.wait()")
    await bill.settle()
    w.refresh()
    line = text(w.failure.value)
    assert line == "rejected: step send_invoice · wrong customer", line


async def test_the_badge_says_rolled_back_in_words(bill: Harness) -> None:
    await bill.ok("run = %chain run bill --tools tb\nawait run.wait()")
    await bill.ok("await run.approve('send_invoice')\nawait run.wait()")
    await bill.ok("await run.rollback()\nr = await run.wait()")
    assert str(bill.ns["r"].status) == "rolled_back"
    w = bill.session.widgets[bill.ns["run"].run_id]
    await bill.settle()
    w.refresh()
    assert '<span class="cl-badge cl-r-rolled_back">rolled back</span>' in w.header.value
    picture = w.picture_bundle()["text/html"]
    assert 'class="cl-run-status">rolled back<' in picture and "rolled_back<" not in picture


async def test_a_card_without_a_preview_shows_the_args_once(bill: Harness) -> None:
    await bill.ok("run = %chain run bill --tools tb\nawait run.wait()")
    w = bill.session.widgets[bill.ns["run"].run_id]
    card = w.inbox.card("send_invoice")  # send_invoice has no preview of its own
    shown = text("".join(c.value for c in card.children if isinstance(c, W.HTML)))
    assert shown.count('"items"') == 1, shown  # (the edit box, hidden, is not shown)
    assert "no preview: the tool runs with the args below" in shown
    assert "resolved args" in shown


async def test_a_planned_chain_says_each_adjustment_once() -> None:
    """Notebook 05 printed every planner adjustment twice: in the chain's description (the
    model's plan explains itself) and again below it."""
    from chainlab import Chain

    adjusted = "step 'store': confirm set to true (it calls 'add_rows', which changes the world)"
    chain = Chain.from_dict({"name": "p", "description": f"Planned.\nPlanner adjustment: "
                             f"{adjusted}.", "steps": [{"id": "store", "tool": "t"}]})
    report = PlanReport(planner="model", request="r")
    report.adjustments = [adjusted, adjusted]
    view = ChainView(chain, None, [], report=report)
    shown = text(view._repr_html_())
    assert shown.count(adjusted) == 1, shown
    assert repr(view).count(adjusted) == 1  # the plain text has no description: said there


async def test_the_designer_offers_the_references_that_fit_first() -> None:
    tb = Toolbox("invoice")

    @tb.tool
    def fetch_orders(customer: str) -> list[dict]:
        return [{"amount": 1.0}]

    @tb.tool
    def total(orders: list[dict]) -> float:
        return 1.0

    @tb.tool
    def label(customer: str) -> str:
        return customer

    @tb.tool
    def send_invoice(customer: str, amount: float) -> dict:
        return {}

    d = ChainDesigner(tb, name="bill")
    d.add_step("fetch_orders", "orders", args={"customer": "Ada"})
    d.add_step("total", "sum", args={"orders": "{{ steps.orders.output }}"})
    d.add_step("label", "who", args={"customer": "Ada"})
    d.add_step("send_invoice", "send")
    d.select("send")
    labels = [label for label, _ in d.form.rows["customer"].ref.options]
    # a string parameter: the string output first; the array and the number after, marked
    assert labels[1] == "steps.who.output · string", labels
    assert labels[2:] == ["steps.orders.output · array of object (not a string)",
                          "steps.sum.output · number (not a string)"], labels
    amounts = [label for label, _ in d.form.rows["amount"].ref.options]
    assert amounts[1] == "steps.sum.output · number", amounts
    d.close()
