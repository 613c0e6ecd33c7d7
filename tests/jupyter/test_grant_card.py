"""The card's "Approve and allow similar…" (DESIGN §21): the condition prefilled from the
call's args, editable, checked before it is sent; the grant then decides the sibling calls
that match, each recorded as its own approval by the grant."""

from __future__ import annotations

import pytest

from .conftest import Harness
from .test_notebook_edges import FANOUT, TOOLS

pytestmark = pytest.mark.anyio


async def test_approve_and_allow_similar_from_a_card(sh: Harness) -> None:
    await sh.ok(TOOLS)
    await sh.ok(FANOUT)
    await sh.ok("r = %chain run payouts --tools tb --context '{\"amounts\": [10, 20, 500]}'")
    await sh.ok("await r.wait()")
    await sh.settle()
    shown = sh.session.widgets[sh.ns["r"].run_id]
    shown.refresh()
    card = shown.inbox.card("pay[0]")
    similar = card.similar
    assert similar is not None and similar.form.layout.display == "none"
    similar.toggle.value = True
    assert similar.form.layout.display == ""
    assert similar.when.value == "args.amount <= 10"  # prefilled from the call's args
    similar.when.value = "args.amount <="  # a condition that does not parse: refused here
    similar.button.click()
    assert "the grant&#x27;s condition does not parse: expected a value" in card.message.value
    assert not [e for e in sh.ns["r"].history() if e.kind == "step_approved"]
    similar.when.value = "args.amount <= 100"
    similar.scope.value = "step"
    similar.button.click()
    await sh.ok("res = await r.wait()")
    await sh.settle()
    by = {e.step_id: e.payload["by"] for e in sh.ns["r"].history()
          if e.kind == "step_approved"}
    assert by["pay[1]"] == "grant:g1" and "pay[2]" not in by  # 500 is not covered
    assert sh.ns["res"].waiting == {"pay[2]": "waiting_confirmation"}
    (g,) = sh.ns["r"].grants()
    assert (g["when"], g["scope"], g["decided"]) == ("args.amount <= 100", "step", ["pay[1]"])
    shown.refresh()  # the inspector says who decided each call
    details = shown.inspector.render("pay[1]")
    assert "<th>decided by</th><td>grant g1 by" in details and "step scope</td>" in details


async def test_chain_approve_with_a_grant_from_the_magic(
        sh: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    await sh.ok(TOOLS)
    await sh.ok(FANOUT)
    await sh.ok("r = %chain run payouts --tools tb --context '{\"amounts\": [10, 20, 500]}'")
    await sh.ok("await r.wait()")
    capsys.readouterr()
    await sh.ok("%chain approve r 'pay[0]' --grant 'args.amount < 100' --scope run --ttl 1h")
    assert "with a grant (run scope): args.amount < 100" in capsys.readouterr().out
    res = await sh.ok("await r.wait()")
    assert res.waiting == {"pay[2]": "waiting_confirmation"}
    (g,) = sh.ns["r"].grants()
    assert g["scope"] == "run" and g["decided"] == ["pay[1]"]
