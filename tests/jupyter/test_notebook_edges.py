"""Issue 29's smaller items: the inbox says "driven here" for this kernel's runs (5), a
person-facing error does not start with an exception class name (8)."""

from __future__ import annotations

import asyncio

import pytest

from chainlab.jupyter.views import error_html

from .conftest import Harness

pytestmark = pytest.mark.anyio

TOOLS = '''
import chainlab
tb = chainlab.Toolbox("inbox")

@tb.tool(side_effects=True, requires_confirmation=True)
def pay(amount: float) -> str:
    return f"paid {amount}"
'''


async def test_the_inbox_says_driven_here_for_this_kernels_runs(sh: Harness) -> None:
    await sh.ok(TOOLS)
    await sh.ok("%%chain bill --tools tb\nsteps:\n  - {id: pay, tool: pay, args: {amount: 5}}\n")
    db = sh.tmp_path / "inbox.db"
    await sh.ok(f"a = %chain run bill --tools tb --db '{db}'")
    await sh.ok(f"b = %chain run bill --tools tb --db '{db}'")
    await sh.ok("await a.wait(); await b.wait()")
    inbox = await sh.ok(f"%chain approvals --db '{db}' --tools tb")
    lines = [w.value for w in inbox.list.children if "cl-runid" in getattr(w, "value", "")]
    assert len(lines) == 2
    for line in lines:
        assert "driven here (by this kernel)" in line
        assert "no live driver" not in line and "pid" not in line
    pay = inbox.card(sh.ns["a"].run_id, "pay")
    pay.approve_button.click()
    await sh.ok("await a.wait()")
    await sh.settle()
    inbox.refresh()
    (line,) = [w.value for w in inbox.list.children if "cl-runid" in getattr(w, "value", "")]
    assert "driven here (by this kernel)" in line and "pid" not in line


async def test_an_edit_args_error_shows_once_in_the_inbox_card(sh: Harness) -> None:
    """Item 8: ``%chain approvals`` showed a failed decision in the card and again above the
    list, where it stayed after the card's next error replaced its own copy."""
    await sh.ok(TOOLS)
    await sh.ok("%%chain bill --tools tb\nsteps:\n  - {id: pay, tool: pay, args: {amount: 5}}\n")
    db = sh.tmp_path / "edit.db"
    await sh.ok(f"a = %chain run bill --tools tb --db '{db}'")
    await sh.ok("await a.wait()")
    inbox = await sh.ok(f"%chain approvals --db '{db}' --tools tb")
    pay = inbox.card(sh.ns["a"].run_id, "pay")
    pay.edit_toggle.value = True
    pay.edit.value = '{"amount": "lots"}'
    pay.approve_button.click()
    await sh.settle()
    assert pay.message.value.count("args do not fit tool") == 1
    assert inbox.error.value == "" and inbox.last_error is not None
    pay.edit.value = '{"amount": 5,'
    pay.approve_button.click()
    assert "not valid JSON" in pay.message.value
    assert "args do not fit" not in pay.message.value + inbox.error.value
    pay.edit.value = '{"amount": 7}'
    pay.approve_button.click()
    assert pay.message.value == "" and inbox.error.value == ""  # the next action clears it
    await sh.ok("r = await a.wait()")
    assert sh.ns["r"].outputs["pay"] == "paid 7.0"


def test_an_error_line_does_not_start_with_the_exception_class() -> None:
    shown = error_html(ValueError("write a reason before rejecting"), "reject")
    assert "ValueError" not in shown.split('title="')[0]
    assert "could not reject: write a reason before rejecting" in shown
    assert error_html(KeyError()) .count("KeyError") >= 1  # no message: the type is all we have


async def test_glyphs_icons_and_blanks(sh: Harness) -> None:
    """Item 9: the Step and "next event" buttons look different; the timeline tab shows
    blanks, not None; no glyph Debian's default fonts cannot draw."""
    from pathlib import Path

    import chainlab.jupyter.run_widget.widget as widget_module

    await sh.ok(TOOLS.replace("side_effects=True, requires_confirmation=True", ""))
    await sh.ok("%%chain bill --tools tb\nsteps:\n  - {id: pay, tool: pay, args: {amount: 5}}\n")
    await sh.ok("run = %chain run bill --tools tb\nawait run.wait()")
    w = sh.session.widgets[sh.ns["run"].run_id]
    assert w.buttons["step"].icon != w.scrubber.next_button.icon
    w.timeline.draw()  # drawn in a worker thread: wait until it is shown
    for _ in range(3000):
        if not w.timeline.drawing:
            break
        await asyncio.sleep(0.01)
    shown = w.timeline.out.outputs[0]["data"]["text/plain"]
    assert "None" not in shown and "NaN" not in shown
    assert "⑂" not in Path(widget_module.__file__).read_text(encoding="utf-8")
