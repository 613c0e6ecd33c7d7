"""Fault injection from the notebook: the run widget's Faults section through its Python API
(``button.click()``) and ``%chain fault``; both call faults.inject and are recorded (by widget,
by magic); the section is collapsed and off by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, StaleEpochError, Toolbox
from chainlab.events import EventKind
from chainlab.jupyter import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

from .conftest import Harness

pytestmark = pytest.mark.anyio


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.toolbox = Toolbox("f")
        self.gate = anyio.Event()
        self.calls: list[str] = []
        gate, calls = self.gate, self.calls

        @self.toolbox.tool
        async def gated(tag: str) -> str:
            await gate.wait()
            calls.append(tag)
            return tag

        @self.toolbox.tool(side_effects=True, idempotent=False)
        def charge(tag: str) -> str:
            calls.append(tag)
            return tag

        self.store = SQLiteStore(tmp_path / "f.db")
        self.runtime = Runtime(self.toolbox, self.store)

    async def start(self) -> tuple[Any, RunWidget]:
        chain = Chain.from_dict({"name": "f", "steps": [
            {"id": "a", "tool": "gated", "args": {"tag": "a"}},
            {"id": "b", "tool": "charge", "args": {"tag": "b"}, "depends_on": ["a"]},
            {"id": "c", "tool": "charge", "args": {"tag": "c"}, "depends_on": ["b"]}]})
        run = await self.runtime.start(chain)
        return run, RunWidget(run)


def faults(run: Any) -> list[tuple[str | None, str, str]]:
    return [(e.step_id, e.payload["fault"], e.payload["by"]) for e in run.event_list()
            if e.kind == EventKind.FAULT_INJECTED]


async def test_the_section_is_collapsed_and_off_by_default(tmp_path: Path) -> None:
    env = Env(tmp_path)
    run, w = await env.start()
    panel = w.faults
    assert panel in w.children and panel.selected_index is None  # collapsed
    assert not panel.enabled.value
    assert all(b.disabled for b in panel.buttons.values())
    with pytest.raises(ValueError, match="fault injection is off"):
        panel.press("timeout")
    env.gate.set()
    await run.wait()
    assert faults(run) == []
    await env.runtime.aclose()


async def test_buttons_inject_through_run_inject_and_are_recorded(tmp_path: Path) -> None:
    env = Env(tmp_path)
    run, w = await env.start()
    panel = w.faults
    panel.selected_index = 0  # expand
    panel.enabled.value = True
    assert list(panel.step.options) == ["a", "b", "c"]
    assert not panel.buttons["timeout"].disabled and not panel.buttons["raise"].disabled
    assert panel.buttons["kill"].disabled  # a notebook's kernel is not a disposable driver
    panel.step.value = "b"
    panel.error_kind.value = "permanent"
    panel.buttons["raise"].click()  # handed over to the run's loop: wait for it there
    with anyio.fail_after(10):
        while not faults(run):
            await anyio.sleep(0.005)
    assert faults(run) == [("b", "raise", "widget")]
    env.gate.set()
    result = await run.wait()
    assert result.steps["b"] == "failed" and env.calls == ["a"]  # b raised before its body
    w.refresh()
    assert all(b.disabled for b in panel.buttons.values())  # the run has ended
    await env.runtime.aclose()


async def test_second_driver_button_rebinds_the_widget(tmp_path: Path) -> None:
    env = Env(tmp_path)
    run, w = await env.start()
    while run.steps["a"].status != "running":
        await anyio.sleep(0.005)
    w.faults.enabled.value = True
    w.faults.buttons["second_driver"].click()
    with anyio.fail_after(10):
        while w.run is run:
            await anyio.sleep(0.005)
    assert w.run is not run and w.run.active  # the widget follows the new driver
    env.gate.set()
    with pytest.raises(StaleEpochError):
        await run.wait()
    assert (await w.run.wait()).ok
    assert faults(w.run) == [(None, "second_driver", "widget")]
    assert w.last_error is None
    await w.run.runtime.aclose()  # the second driver's runtime
    await env.runtime.aclose()


TOOLS = '''
from chainlab import Toolbox
tb = Toolbox("m")
calls = []

@tb.tool
def work(tag: str) -> str:
    calls.append(tag)
    return tag
'''


async def test_chain_fault_magic(sh: Harness) -> None:
    await sh.ok(TOOLS)
    await sh.ok("%%chain m --tools tb\nsteps:\n  - {id: a, tool: work, args: {tag: a}, "
                "retry: {max_attempts: 2, delay_s: 0}}\n")
    await sh.ok("run = %chain run m --tools tb --step")
    await sh.ok("%chain fault run timeout a")
    await sh.ok("await run.unpause()")
    result = await sh.ok("await run.wait()")
    assert result.ok and sh.ns["calls"] == ["a", "a"]  # the lost answer's call, then a retry
    assert faults(sh.ns["run"]) == [("a", "timeout", "magic")]
    msg = await sh.usage_error("%chain fault run timout a")
    assert "unknown fault 'timout'; did you mean 'timeout'" in msg
    msg = await sh.usage_error("%chain fault run timeout a")
    assert "faults hit runs that still move" in msg


def test_the_event_log_says_what_was_injected_and_what_was_refused() -> None:
    from chainlab.events import Event
    from chainlab.jupyter.run_widget.event_log import event_line

    fault = Event("r", 7, 0.0, 1, EventKind.FAULT_INJECTED, "b",
                  payload={"fault": "raise", "error_kind": "permanent", "by": "widget"})
    assert event_line(fault) == "[7] fault_injected b  raise permanent (by widget)"
    refused = Event("r", 9, 0.0, 2, EventKind.WRITE_REFUSED, payload={
        "stale_epoch": 1, "epoch": 2, "refused": ["step_succeeded b", "step_ready c"]})
    assert event_line(refused) == ("[9] write_refused  epoch 1 fenced: step_succeeded b, "
                                   "step_ready c")


async def test_the_faults_panel_shows_armed_fired_and_did_not_fire(sh: Harness) -> None:
    """Issue 29, item 11: an armed fault shows as armed (also in the section's title), then
    as fired; one whose step ended without another call says it did not fire."""
    await sh.ok(TOOLS)
    await sh.ok("%%chain m --tools tb\nsteps:\n  - {id: a, tool: work, args: {tag: a}, "
                "retry: {max_attempts: 2, delay_s: 0}}\n  - {id: b, tool: work, args: {tag: b},"
                " depends_on: [a]}\n")
    await sh.ok("run = %chain run m --tools tb --step")
    w = sh.session.widgets[sh.ns["run"].run_id]
    await sh.ok("%chain fault run raise a --error permanent")
    w.refresh()
    assert "<b>armed</b> · raise (permanent) on &#x27;a&#x27; by magic: armed" in \
        w.faults.status.value
    assert w.faults.get_title(0) == "Faults (1 armed)"
    await sh.ok("%chain fault run timeout b")
    await sh.ok("await run.unpause()\nawait run.wait()")  # a fails: b never runs
    w.refresh()
    text = w.faults.status.value.replace("&#x27;", "'")
    assert "<b>fired</b> · raise (permanent) on 'a' by magic: fired at attempt 1" in text
    assert "<b>did not fire</b> · timeout on 'b' by magic: did not fire (the step ended" in text
    assert w.faults.get_title(0) == "Faults"
