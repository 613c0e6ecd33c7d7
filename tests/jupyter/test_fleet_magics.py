"""A run enqueued from a notebook (``%chain run NAME --enqueue``), driven by a real
``chainlab worker`` process, approved in the notebook (DESIGN §19, issue 39): the widget
follows the run from the store (queued, driven by the worker, suspended), its approval card
records the decision for the fleet, the worker applies it; the notebook never drives the
run. ``%chain approvals`` shows the queue's depth."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.store import SQLiteStore
from tests.jupyter.test_remote_widgets import displayed_widget, until
from tests.workers.fleet_tools import ORDER, toolbox

from .conftest import Harness

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("durability-processes")]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
async def test_enqueued_in_a_notebook_driven_by_a_worker_approved_in_the_notebook(
        sh: Harness, tmp_path: Path) -> None:
    db = str(tmp_path / "fleet.db")
    SQLiteStore(db).close()
    sh.ns.update(tb=toolbox, order=ORDER)
    await sh.ok("%chain run order --enqueue orders --tools tb --db " + db
                + " --context '{\"n\": 25, \"customer\": \"ada\"}'")
    widget = displayed_widget(sh)
    run = widget.run
    assert isinstance(run, WatchedRun) and run.status == "queued"
    assert "queued in <code>orders</code>: a worker of the fleet starts it" in widget.header.value
    inbox = await sh.ok(f"%chain approvals --db {db}")
    assert "orders: 1 queued" in inbox.summary.value
    worker = subprocess.Popen(
        [sys.executable, "-m", "chainlab", "worker", "--db", db, "--tools",
         "tests.workers.fleet_tools:toolbox", "--queue", "orders", "--name", "w-nb"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                       "CHAINLAB_LEDGER": str(tmp_path / "ledger.jsonl")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        await until(lambda: run.status == "suspended", "the worker to reach the approval",
                    detail=lambda: (run.status, worker.poll()))
        widget.refresh()
        widget.inbox.card("ship").approve_button.click()
        await until(lambda: run.status == "succeeded", "the fleet to apply the approval",
                    detail=lambda: (run.status, widget.error.value))
        assert not run.active and "w-nb" not in sh.session.runs  # never driven here
        kinds = [(str(e.kind), e.payload.get("worker", {}).get("name"))
                 for e in run.history() if str(e.kind) in ("run_started", "run_resumed")]
        assert kinds == [("run_started", "w-nb"), ("run_resumed", "w-nb")]
    finally:
        worker.terminate()
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "claimed run" in out and "(decided)" in out
