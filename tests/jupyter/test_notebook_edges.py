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


async def _until(check: object, what: str, timeout: float = 20.0) -> None:
    """Wait for ``check()`` (a condition, polled), failing after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, f"no {what} in {timeout} s"
        await asyncio.sleep(0.02)


async def test_the_inbox_follows_the_store_by_itself(sh: Harness) -> None:
    """Issue 40, item 5: with Run All, an inbox shown before the runs waited said "0
    decisions wait" while two runs above it waited. It follows the store now: a decision
    that comes (or goes) shows without Refresh."""
    await sh.ok(TOOLS)
    await sh.ok("%%chain bill --tools tb\nsteps:\n  - {id: pay, tool: pay, args: {amount: 5}}\n")
    db = sh.tmp_path / "follow.db"
    inbox = await sh.ok(f"%chain approvals --db '{db}' --tools tb")
    assert inbox.items == [] and "0 decisions wait" in inbox.summary.value
    assert "follows the store (read every 1 s)" in inbox.summary.value
    reads = inbox.reads
    await sh.ok(f"a = %chain run bill --tools tb --db '{db}'")
    await sh.ok(f"b = %chain run bill --tools tb --db '{db}'")
    # (the inbox reads the store on its own thread: its cards are set a moment before its
    # summary, so wait for both)
    await _until(lambda: len(inbox.cards) == 2
                 and "2 decisions wait in 2 runs" in inbox.summary.value, "second card")
    assert inbox.reads > reads
    await sh.ok("await a.approve('pay')\nawait a.wait()")  # decided elsewhere (a cell)
    await _until(lambda: list(inbox.cards) == [(sh.ns["b"].run_id, "pay")], "the card leave")
    assert inbox.following
    inbox.close()  # stops following the store
    await _until(lambda: not inbox.following, "end of the following")


async def test_the_inbox_says_a_driver_whose_process_is_gone_is_gone(sh: Harness) -> None:
    """Issue 40, item 5: a run of a kernel that was shut down read "driven by pid 5388 on
    host 'vm' (epoch 1)", as if that process still drove it."""
    import socket
    import subprocess
    import sys

    from chainlab import Chain, Toolbox
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore
    from chainlab.store.base import DriverInfo

    await sh.ok(TOOLS)
    db = sh.tmp_path / "gone.db"
    store = SQLiteStore(db)
    tb = Toolbox("elsewhere")
    tb.tool(side_effects=True, requires_confirmation=True, name="pay")(lambda amount: amount)
    chain = Chain.from_dict({"name": "bill", "steps": [
        {"id": "pay", "tool": "pay", "args": {"amount": 5}}]})
    async with Runtime(tb, store) as rt:  # "another process": a runtime of its own
        run = await rt.start(chain)
        await run.wait()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)  # a process of this host that has exited
    store.heartbeat(run.run_id, run.epoch, DriverInfo("gone-driver", socket.gethostname(), pid))
    store.close()
    inbox = await sh.ok(f"%chain approvals --db '{db}' --tools tb")
    (line,) = [w.value for w in inbox.list.children if "cl-runid" in getattr(w, "value", "")]
    assert f"its driver, pid {pid} on host" in line and "is gone" in line, line
    assert "a decision taken here takes the run over in this process" in line
    inbox.close()


FANOUT = ('%%chain payouts --tools tb\nsteps:\n  - id: pay\n    tool: pay\n'
          '    for_each: "{{ context.amounts }}"\n    args: {amount: "{{ item }}"}\n')


async def test_approve_all_from_a_card_of_the_run_widget(sh: Harness) -> None:
    """Issue 35 item 5: each waiting instance's card offers "Approve all 3"; one click
    approves the three, each with its own args."""
    await sh.ok(TOOLS)
    await sh.ok(FANOUT)
    await sh.ok("r = %chain run payouts --tools tb --context '{\"amounts\": [1, 2, 3]}'")
    await sh.ok("await r.wait()")
    await sh.settle()
    shown = sh.session.widgets[sh.ns["r"].run_id]  # the run's widget in this kernel
    shown.refresh()
    card = shown.inbox.card("pay[1]")
    assert card.all_button.description == "Approve all 3"
    assert card.all_button.layout.display == ""
    assert "each with its own args" in card.all_button.tooltip
    card.all_button.click()
    await sh.ok("res = await r.wait()")
    assert sh.ns["res"].outputs["pay"] == ["paid 1.0", "paid 2.0", "paid 3.0"]
    approvals = [e for e in sh.ns["r"].history() if e.kind == "step_approved"]
    assert sorted(e.step_id for e in approvals) == ["pay[0]", "pay[1]", "pay[2]"]


async def test_approve_all_from_the_team_inbox(sh: Harness) -> None:
    await sh.ok(TOOLS)
    await sh.ok(FANOUT)
    db = sh.tmp_path / "all.db"
    await sh.ok(f"r = %chain run payouts --tools tb --db '{db}' "
                "--context '{\"amounts\": [4, 5]}'")
    await sh.ok("await r.wait()")
    inbox = await sh.ok(f"%chain approvals --db '{db}' --tools tb")
    card = inbox.card(sh.ns["r"].run_id, "pay[0]")
    assert card.all_button.description == "Approve all 2"
    card.all_button.click()
    await sh.settle()  # (the inbox decides through the runtime, as from another process)
    await sh.ok("res = await r.wait()")
    assert sh.ns["res"].outputs["pay"] == ["paid 4.0", "paid 5.0"]
    await sh.settle()
    inbox.refresh()
    assert inbox.cards == {}


async def test_the_inspector_lists_a_for_each_steps_instances(sh: Harness) -> None:
    """Issue 35 item 5: the inspector of a for_each step lists its instances (status, args,
    output, attempts), the first 25 of 30, and each opens from the step list."""
    await sh.ok("import chainlab\ntb = chainlab.Toolbox('sq')\n"
                "@tb.tool\ndef sq(n: int) -> int:\n    return n * n\n")
    await sh.ok('%%chain squares --tools tb\nsteps:\n  - id: sq\n    tool: sq\n'
                '    for_each: "{{ context.ns }}"\n    args: {n: "{{ item }}"}\n')
    await sh.ok("r = %chain run squares --tools tb --context '{\"ns\": " +
                str(list(range(30))) + "}'")
    await sh.ok("res = await r.wait()")
    await sh.settle()
    widget = sh.session.widgets[sh.ns["r"].run_id]
    widget.refresh()
    widget.inspector.select("sq")
    text = widget.inspector.details.value
    assert "its 30 grown steps" in text
    assert "<code>sq[0]</code>" in text and "<code>sq[24]</code>" in text
    assert "<code>sq[25]</code>" not in text and "… and 5 more" in text
    assert "{&quot;n&quot;: 7}" in text and "<td>49</td>" in text  # args and output
    widget.inspector.select("sq[29]")  # an instance opens like any step
    assert "841" in widget.inspector.details.value
