"""A run enqueued from a notebook, driven by a real ``chainlab worker``, approved with the
widget's button, in a real JupyterLab and a real browser (DESIGN §19, issue 39).

The notebook enqueues the run (``%chain run order --enqueue orders``): the widget shows it
``queued``. The test starts a worker process (slow calls): the header reads "driven by worker
'w-lab' on host ..." while it works; the run then waits for approval and holds no worker;
the test clicks **Approve**; the worker applies it and the run succeeds. Screenshots of each
moment, in the light and the dark theme, go to tests/artifacts/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import Lab, browser_page
from .test_lab import ARTIFACTS, IDLE, PANEL, REPO, open_and_run_all, require_chromium, themed

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "fleet.ipynb"
CELLS = [
    "%load_ext chainlab\nfrom fleet_tools import ORDER as order, toolbox as tb",
    "run = %chain run order --enqueue orders --tools tb --db fleet.db "
    "--context '{\"n\": 25, \"customer\": \"ada\"}'\nrun",
]


def notebook(path: Path) -> Path:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
              "outputs": [], "source": src} for i, src in enumerate(CELLS)]
    path.write_text(json.dumps({
        "cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3",
                                                    "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("labfleet")
    files = [notebook(work / NOTEBOOK), REPO / "tests" / "workers" / "fleet_tools.py"]
    with Lab(work, files) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-fleet-failure.png") as page:
        yield page


def shots(page: Any, widget: Any, name: str) -> None:
    for theme, suffix in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        themed(page, theme)
        widget.scroll_into_view_if_needed()
        widget.screenshot(path=str(ARTIFACTS / f"e2e-fleet-{name}-{suffix}.png"))
    themed(page, "JupyterLab Light")


def test_enqueued_driven_by_a_worker_approved_in_the_browser(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    open_and_run_all(page, lab, NOTEBOOK)
    page.wait_for_selector(IDLE, timeout=60_000)
    widget = page.locator(f"{PANEL} .cl-run").first
    header = widget.locator(".cl-head").first
    expect(header).to_contain_text("queued in orders: a worker of the fleet starts it",
                                   timeout=30_000)
    expect(widget.locator(".cl-badge.cl-r-queued")).to_have_count(1)
    shots(page, widget, "queued")
    env = {**os.environ, "PYTHONPATH": f"{lab.root}:{REPO}", "CHAINLAB_DELAY": "2",
           "CHAINLAB_LEDGER": str(lab.work / "ledger.jsonl")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "chainlab", "worker", "--db", "fleet.db", "--tools",
         "fleet_tools:toolbox", "--queue", "orders", "--name", "w-lab", "--poll", "0.1"],
        cwd=lab.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        expect(header).to_contain_text("driven by worker 'w-lab' on host", timeout=60_000)
        shots(page, widget, "driven")
        approve = widget.locator("button.jupyter-button", has_text="Approve")
        expect(approve).to_be_visible(timeout=60_000)
        expect(header).to_contain_text("no worker while it waits for a person",
                                       timeout=30_000)
        shots(page, widget, "waiting")
        approve.click()
        expect(widget.locator(".cl-badge.cl-r-succeeded")).to_have_count(1, timeout=60_000)
        shots(page, widget, "succeeded")
    finally:
        worker.terminate()
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "(decided)" in out
    assert not page.errors, page.errors
