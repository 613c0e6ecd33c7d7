"""Issue 29, item 4: the designer says "valid" only when a run could start: the context it
needs is a form (typed from where each key is used), a reference whose type cannot fit its
field is a ``reference_type`` problem (as ``chain.validate()`` says), a form edit never
throws away YAML someone typed, depends_on offers no dependants, Run needs a step."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import PlanError
from chainlab.jupyter import ChainDesigner
from chainlab.jupyter.designer import DesignerError

pytestmark = pytest.mark.anyio


def tools() -> Toolbox:
    tb = Toolbox("invoice")

    @tb.tool
    def fetch_orders(customer: str) -> list[dict]:
        return [{"amount": 1.0}]

    @tb.tool
    def total(orders: list[dict]) -> float:
        return sum(o["amount"] for o in orders)

    @tb.tool
    def line(customer: str, total: float, copies: int = 1) -> str:
        return f"{customer}: {total}"

    return tb


INVOICE = """\
name: bill
steps:
- id: orders
  tool: fetch_orders
  args:
    customer: '{{ context.customer }}'
- id: sum
  tool: total
  args:
    orders: '{{ steps.orders.output }}'
- id: text
  tool: line
  args:
    customer: '{{ context.customer }}'
    total: '{{ steps.sum.output }}'
    copies: '{{ context.copies }}'
"""


@pytest.fixture
async def d() -> AsyncIterator[ChainDesigner]:
    designer = ChainDesigner(tools(), name="bill")
    yield designer
    designer.close()


async def test_a_plan_that_needs_context_is_not_called_valid(d: ChainDesigner) -> None:
    d.yaml = INVOICE
    assert d.problems == []
    assert "valid plan · needs context: copies, customer" in d.head.status.value
    assert d.run_button.disabled
    assert "customer" in d.run_button.tooltip
    with pytest.raises(PlanError, match="context"):
        d.run()  # (the same check as Run's: start() refuses the missing keys)
    # the context form has one box per key, typed from where the key is used
    boxes = d.context_form.rows
    assert list(boxes) == ["copies", "customer"]
    assert (boxes["customer"].placeholder, boxes["copies"].placeholder) == ("string", "integer")
    boxes["customer"].value = "Ada"
    assert d.context == {"customer": "Ada"}
    # a context that lacks a key: the plan layer's unknown_reference (as Run would say)
    assert [(p.code, p.step_id) for p in d.problems] == [("unknown_reference", "text")]
    assert d.run_button.disabled and "copies" in d.context_form.title.value
    boxes["copies"].value = "2"
    assert d.context == {"customer": "Ada", "copies": 2}
    assert "✓ valid" in d.head.status.value and not d.run_button.disabled
    assert d.context_box.value == '{"customer": "Ada", "copies": 2}'  # one context, two boxes
    boxes["copies"].value = ""
    assert d.context == {"customer": "Ada"} and d.run_button.disabled


async def test_a_reference_of_the_wrong_type_is_a_problem_in_the_designer_and_validate(
        d: ChainDesigner) -> None:
    d.context = {"customer": "Ada", "copies": 1}
    d.yaml = INVOICE.replace("orders: '{{ steps.orders.output }}'",
                             "orders: '{{ context.customer }}'")
    (p,) = d.problems
    assert (p.code, p.step_id, p.field) == ("reference_type", "sum", "args.orders")
    assert "is string" in p.message and "array of object" in p.message
    with pytest.raises(PlanError) as err:  # the plan layer says the same
        Chain.from_yaml(d.yaml).validate(d.toolbox, context=d.context)
    assert err.value.problems == d.problems
    assert d.run_button.disabled
    d.select("sum")
    row = d.form.rows["orders"]
    assert "reference_type" in row.problem.value
    # the dropdown says what it is
    assert row.ref.description == "from"
    assert row.ref.options[0][0] == "a value typed here"


async def test_a_form_edit_while_the_yaml_tab_does_not_load_keeps_the_typed_text(
        d: ChainDesigner) -> None:
    d.context = {"customer": "Ada", "copies": 1}
    d.yaml = INVOICE
    broken = INVOICE.replace("  tool: total", "  tool total") + "# my note\n"
    d.yaml_area.value = broken
    d.flush()
    assert d.chain is None and d.yaml == broken
    d.select("text")
    assert "read-only" in d.form.error.value
    d.form.rows["copies"].literal.value = "3"  # typed into the form
    assert d.yaml == broken and d.yaml_area.value == broken  # nothing typed is lost
    assert "fix it there first" in d.form.error.value
    with pytest.raises(DesignerError, match="does not load"):
        d.palette.designer.add_step("line")
    # once the YAML loads again, the form edits work
    d.yaml_area.value = INVOICE
    d.flush()
    d.select("sum")
    d.form.rows["orders"].ref.value = ""
    d.form.rows["orders"].literal.value = '[{"amount": 2}]'
    assert d.step("sum")["args"]["orders"] == [{"amount": 2}]


async def test_depends_on_offers_only_steps_that_do_not_depend_on_this_one(
        d: ChainDesigner) -> None:
    d.yaml = INVOICE
    d.select("orders")
    assert list(d.form.depends.options) == []  # sum and text both depend on it
    d.select("text")
    assert list(d.form.depends.options) == ["orders", "sum"]


async def test_run_is_disabled_for_a_chain_without_steps(d: ChainDesigner) -> None:
    assert d.problems == [] and d.run_button.disabled
    assert d.run_button.tooltip == "add a step first"
    with pytest.raises(DesignerError, match="no steps"):
        d.run()


DECLARED = """\
name: bill
inputs:
  customer: {type: string, description: who is billed}
  copies: {type: integer, default: 1}
  currency: {enum: [EUR, USD], default: EUR}
steps:
- id: orders
  tool: fetch_orders
  args:
    customer: '{{ context.customer }}'
- id: sum
  tool: total
  args:
    orders: '{{ steps.orders.output }}'
- id: text
  tool: line
  args:
    customer: '{{ context.customer }}'
    total: '{{ steps.sum.output }}'
    copies: '{{ context.copies }}'
"""


async def test_the_context_form_comes_from_the_declared_inputs(d: ChainDesigner) -> None:
    """Issue 29, item 4b: declared inputs are the form (in their order, typed, described,
    an enum as a dropdown); only the required ones without a default are needed."""
    d.yaml = DECLARED
    assert d.problems == []
    assert "valid plan · needs context: customer" in d.head.status.value  # copies defaults
    boxes = d.context_form.rows
    assert list(boxes) == ["customer", "copies", "currency"]  # declared, not referenced, order
    assert boxes["customer"].placeholder == "string, required"
    described = [c for c in d.context_form.children if "cl-dsg-ctxrow" in c._dom_classes]
    assert [row.children[0] for row in described] == [boxes["customer"]]  # only it has one
    assert "who is billed" in described[0].children[1].value  # written beside its box
    assert boxes["copies"].placeholder == "integer, default 1"
    currency = boxes["currency"]
    assert [label for label, _ in currency.options] == ["(one of 'EUR', 'USD', default 'EUR')",
                                                        "EUR", "USD"]
    boxes["customer"].value = "Ada"
    assert d.context == {"customer": "Ada"}
    assert "✓ valid" in d.head.status.value and not d.run_button.disabled
    currency.value = 1
    assert d.context == {"customer": "Ada", "currency": "USD"}
    boxes["copies"].value = "two"  # the plan layer's invalid_input, as start() would say
    assert [(p.code, p.field) for p in d.problems] == [("invalid_input", "context.copies")]
    assert d.run_button.disabled
    boxes["copies"].value = "2"
    assert d.context == {"customer": "Ada", "currency": "USD", "copies": 2}
    assert d.problems == [] and not d.run_button.disabled
    # a reference to a key that is not declared is a problem, and the reference dropdown
    # offers the declared inputs only
    d.yaml = DECLARED.replace("'{{ context.copies }}'", "'{{ context.n }}'")
    assert [(p.code, p.step_id) for p in d.problems] == [("undeclared_input", "text")]
    d.select("text")
    offered = [str(label) for label, _ in d.form.rows["total"].ref.options]
    assert [o for o in offered if o.startswith("context.")] == [
        "context.copies", "context.currency", "context.customer"]


async def test_renaming_a_step_renames_it_in_the_selected_output(d: ChainDesigner) -> None:
    d.context = {"customer": "Ada"}
    d.yaml = DECLARED + "output: '{{ steps.text.output }}'\n"
    assert d.problems == []
    d.rename_step("text", "invoice")
    assert d.problems == [] and d.chain is not None
    assert d.chain.output == "{{ steps.invoice.output }}"
