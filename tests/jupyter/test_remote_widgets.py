"""``%chain watch`` and ``%chain approvals`` through their Python API (``button.click()``),
against runs that ANOTHER process drives (``tests.jupyter.remote_driver``): the watch
widget follows the run through the store and its approval card decides through
``Runtime.decide``; the team inbox lists what waits across runs and its cards decide the
same way (SQLite file and PostgreSQL)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import ipywidgets.widgets.widget as widget_module
import pytest

from chainlab.errors import RunNotActiveError
from chainlab.jupyter.remote import ApprovalsInbox
from chainlab.jupyter.run_widget.inbox import ApprovalCard, DoubtCard
from chainlab.jupyter.run_widget.widget import RunWidget
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.store import open_store
from tests.store.test_watch import store_url

from .conftest import Harness

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("durability-processes")]
ROOT = Path(__file__).resolve().parents[2]


class Driver:
    """``python -m tests.jupyter.remote_driver`` in the test's directory."""

    def __init__(self, cwd: Path, db: str, *specs: str):
        self.cwd = cwd
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.jupyter.remote_driver", db, *specs], cwd=cwd,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stderr.read()  # type: ignore[union-attr]

    def finish(self) -> list[str]:
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out.split("\n")

    def ledger(self) -> list[dict[str, Any]]:
        path = self.cwd / "ledger.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    for d in started:
        d.kill()


def displayed_widget(sh: Harness) -> Any:
    """The widget the last cell displayed (by its model id)."""
    for out in reversed(sh.pub.outputs):
        view = out["data"].get("application/vnd.jupyter.widget-view+json")
        if view:
            return widget_module._instances[view["model_id"]]
    raise AssertionError(f"no widget displayed: {sh.pub.outputs}")


async def until(predicate: Callable[[], bool], what: str, timeout: float = 60,
                detail: Callable[[], object] = lambda: "") -> None:
    with anyio.move_on_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"waited {timeout} s for {what}: {detail()}")


def db_for(kind: str, tmp_path: Path) -> str:
    url = store_url(kind, tmp_path)
    open_store(url).close()  # the schema exists before the processes start
    return url


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_watch_widget_follows_a_remote_run_and_approves_through_the_store(
        sh: Harness, drivers: list[Driver], tmp_path: Path, kind: str) -> None:
    db = db_for(kind, tmp_path)
    driver = Driver(tmp_path, db, "payment:pay-1")
    drivers.append(driver)
    driver.ready()
    assert "no run 'pay-l'" in await sh.usage_error(f"%chain watch pay-l --db '{db}'")
    run = await sh.ok(f"%chain watch pay-1 --db '{db}'")
    assert isinstance(run, WatchedRun)
    widget = displayed_widget(sh)
    assert isinstance(widget, RunWidget) and widget.run is run
    views = {o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for o in sh.pub.outputs if "application/vnd.jupyter.widget-view+json" in o["data"]}
    assert views == {widget.model_id}  # the returned run shows as the same widget
    # every control that needs the driver is off; the header says who drives the run
    assert all(b.disabled for b in widget.buttons.values())
    await until(lambda: run.driver() is not None, "the driver's first heartbeat")
    widget.refresh()
    assert f"driven by pid {driver.proc.pid} on host" in widget.header.value
    with pytest.raises(RunNotActiveError, match=f"driven by pid {driver.proc.pid}"):
        await run.pause()
    card = widget.inbox.card("pay")
    assert isinstance(card, ApprovalCard)
    assert driver.ledger() == []  # nothing is paid before the approval
    card.approve_button.click()
    await until(lambda: run.steps["pay"].status == "succeeded"
                and run.last_decision == "applied", "the payment",
                detail=lambda: (widget.error.value, card.message.value, run.steps["pay"]))
    assert [e["entry"] for e in driver.ledger()] == ["pay"]  # paid once, by the driver
    (tmp_path / "hold").unlink()  # the run's other branch ends: then the run
    await until(lambda: run.status == "succeeded", "the run to end", detail=lambda: run.state)
    await sh.settle()
    widget.refresh()
    assert widget.inbox.cards == {}
    assert card.message.value == ""  # no error shown
    seqs = [e.seq for e in widget.event_log.events]
    stored = open_store(db)
    try:
        assert seqs == [e.seq for e in stored.load_events("pay-1")]  # each once, in order
    finally:
        stored.close()
    assert any(e.kind == "step_approved" for e in widget.event_log.events)
    assert "pay-1 succeeded" in "\n".join(driver.finish())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_team_inbox_lists_every_waiting_decision_and_decides_them(
        sh: Harness, drivers: list[Driver], tmp_path: Path, kind: str) -> None:
    db = db_for(kind, tmp_path)
    driver = Driver(tmp_path, db, "payment:pay-2", "mail:mail-2")
    drivers.append(driver)
    driver.ready()
    inbox = await sh.ok(f"%chain approvals --db '{db}'")
    assert isinstance(inbox, ApprovalsInbox)
    assert sorted((d.run_id, d.step_id, d.kind, d.tool) for d in inbox.items) == [
        ("mail-2", "send", "in_doubt", "send"), ("pay-2", "pay", "confirm", "pay")]
    assert [d.since for d in inbox.items] == sorted(d.since for d in inbox.items)
    assert "2 decisions wait in 2 runs" in inbox.summary.value
    # decide only once the driver has beaten for both runs (else it counts as gone, and a
    # decision would take the run over in this kernel, which has not the tools)
    await until(lambda: all(h.run.driver() is not None for h in inbox.hosts.values()),
                "the driver's heartbeats")
    inbox.refresh_button.click()
    assert inbox.list.children[0].value.count(f"driven by pid {driver.proc.pid}") == 1
    pay = inbox.card("pay-2", "pay")
    send = inbox.card("mail-2", "send")
    assert isinstance(pay, ApprovalCard) and isinstance(send, DoubtCard)
    assert "pay 30 EUR to ACME" in pay.children[1].value  # the preview
    pay.reject_button.click()  # no reason: refused here, nothing is sent
    assert "write a reason" in pay.message.value
    pay.reason.value = "wrong supplier"
    pay.reject_button.click()
    await until(lambda: ("pay-2", "pay") not in inbox.cards, "the rejection", detail=lambda: (
        inbox.error.value, pay.message.value, inbox.items))
    assert list(inbox.cards) == [("mail-2", "send")]  # the list was read again
    inbox.cards[("mail-2", "send")].output.value = '"sent by hand"'  # type: ignore[attr-defined]
    inbox.cards[("mail-2", "send")].took_effect_button.click()  # type: ignore[attr-defined]
    # (what a person sees: the list, redrawn on the runs' loop right after its cards are
    # kept; waiting on the cards alone read the list in between under load)
    await until(lambda: not inbox.cards and "Nothing waits" in inbox.list.children[0].value,
                "the resolution", detail=lambda: (inbox.error.value, inbox.items))
    assert inbox.last_error is None
    (tmp_path / "hold").unlink()  # the runs' other branches end: then the runs
    lines = driver.finish()
    assert "pay-2 failed" in lines and "mail-2 succeeded" in lines
    assert [e["entry"] for e in driver.ledger()] == ["send"]  # rejected: never paid
    stored = open_store(db)
    try:
        sends = [e for e in stored.load_events("mail-2")
                 if e.kind == "step_succeeded" and e.step_id == "send"]
        assert sends[-1].payload["output"] == "sent by hand"
    finally:
        stored.close()
    inbox.refresh_button.click()
    assert inbox.items == [] and "0 decisions wait in 0 runs" in inbox.summary.value


@pytest.mark.timeout(180)
async def test_a_decision_on_a_run_nobody_drives_takes_it_over_in_this_kernel(
        sh: Harness, drivers: list[Driver], tmp_path: Path) -> None:
    from tests.jupyter.remote_driver import toolbox

    db = db_for("sqlite", tmp_path)
    driver = Driver(tmp_path, db, "--leave", "payment:pay-3")
    drivers.append(driver)
    driver.ready()
    assert driver.proc.stdout.readline().strip() == "left"  # type: ignore[union-attr]
    driver.finish()  # the driver stopped: nobody drives the run
    sh.ns["tb"] = toolbox()
    watched = await sh.ok(f"%chain watch pay-3 --db {db} --tools tb")
    widget = displayed_widget(sh)
    assert widget.run is watched
    assert "watching: no live driver" in widget.header.value
    assert widget.buttons["pause"].disabled
    widget.inbox.card("pay").approve_button.click()
    await until(lambda: widget.run.active, "the takeover",
                detail=lambda: (widget.error.value, widget.run))
    live = widget.run  # the widget shows the run this kernel drives now
    assert sh.session.runs["pay-3"] is live and not watched.following
    await until(lambda: live.steps["pay"].status == "succeeded", "the payment")
    widget.refresh()
    assert not widget.buttons["pause"].disabled  # every control works again
    assert "watching" not in widget.header.value
    (tmp_path / "hold").unlink()
    await until(lambda: live.status == "succeeded", "the run to end", detail=lambda: live.state)
    assert [e["entry"] for e in driver.ledger()] == ["pay"]  # paid once, in this kernel
