"""Issue 18, item 1: a click that arrives while the kernel is idle must drive the run by itself.

The exact click sequence of the report, in a real JupyterLab and a real browser: a run with
two slow parallel steps and a confirmation step after them; **Pause** while both run; when
the confirmation step waits (header "paused"), **Approve**; then **Continue**. No cell runs
after the first one (the kernel is idle the whole time), yet the approved step must start
and the run must succeed.

The slow steps do not sleep for a fixed time: they poll for a file that the test writes
only after Pause was clicked, so "Pause while both run" holds on any machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    ARTIFACTS,
    PANEL,
    require_chromium,
    run_all,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "stuck_run_e2e.ipynb"
CELL = '''%load_ext chainlab
from pathlib import Path

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

tb = Toolbox("stuck")
RELEASE = Path("release-slow-steps")
started = []

@tb.tool
async def slow(name: str) -> str:
    """A slow step: runs until the test releases it."""
    while not RELEASE.exists():
        await anyio.sleep(0.05)
    return name

@tb.tool(side_effects=True, idempotent=True, requires_confirmation=True)
def publish(text: str) -> str:
    """Publish (a person approves first)."""
    started.append(text)
    return text

chain = Chain.from_yaml("""
name: stuck
steps:
  - {id: a, tool: slow, args: {name: a}}
  - {id: b, tool: slow, args: {name: b}}
  - {id: c, tool: publish, args: {text: "{{ steps.a.output }} {{ steps.b.output }}"}}
""")
runtime = Runtime(tb, MemoryStore())
run = await runtime.start(chain)
run'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("stuck-lab")
    path = write_notebook(work / NOTEBOOK, [CELL])
    with Lab(work, [path]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-stuck-failure.png") as page:
        yield page


def node(widget: Any, page: Any, step_id: str) -> Any:
    return widget.locator("g.node", has=page.locator("title", has_text=step_id))


def test_continue_after_pause_and_approve_in_an_idle_kernel(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)

    w = page.locator(f"{PANEL} .cl-run").first
    head = w.locator(".cl-head")
    expect(head).to_contain_text("2 running", timeout=30_000)  # a and b both run
    w.locator("button.jupyter-button", has_text="Pause").click()
    expect(w.locator(".cl-badge.cl-r-paused")).to_be_visible(timeout=10_000)

    (lab.root / "release-slow-steps").write_text("go")  # a and b finish while paused
    approve = w.locator("button.jupyter-button", has_text="Approve")
    expect(approve).to_be_visible(timeout=20_000)  # c waits for confirmation
    expect(head).to_contain_text("2 succeeded")
    approve.click()
    expect(head).to_contain_text("1 ready", timeout=10_000)
    expect(w.locator(".cl-badge.cl-r-paused")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "e2e-stuck-before-continue.png"))

    w.locator("button.jupyter-button", has_text="Continue").click()

    expect(w.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=20_000)
    expect(head).to_contain_text("3 succeeded")
    fill = node(w, page, "c").evaluate(
        "n => getComputedStyle(n.querySelector('.cl-shape')).fill")
    assert fill == "rgb(205, 238, 224)"  # STATUS_STYLE["succeeded"].fill, #cdeee0
    assert Path(lab.root / "release-slow-steps").exists()
    page.screenshot(path=str(ARTIFACTS / "e2e-stuck-after-continue.png"))

    # the widget in both themes, Timeline tab open (issue 18: dark-readable Gantt)
    w.locator(".lm-TabBar-tab", has_text="Timeline").click()
    light_png = w.locator("img.cl-theme-light-only")
    expect(light_png).to_be_visible(timeout=30_000)
    expect(w.locator("img.cl-theme-dark-only")).to_be_hidden()
    w.screenshot(path=str(ARTIFACTS / "e2e-run-widget-light.png"))
    themed(page, "JupyterLab Dark")
    expect(w.locator("img.cl-theme-dark-only")).to_be_visible()
    expect(light_png).to_be_hidden()
    w.screenshot(path=str(ARTIFACTS / "e2e-run-widget-dark.png"))
    themed(page, "JupyterLab Light")
