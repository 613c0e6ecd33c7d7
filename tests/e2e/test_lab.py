"""The whole thing once in a real JupyterLab and a real browser.

JupyterLab runs headless on 127.0.0.1 (private config/data/runtime dirs, a copy of the
notebook); Debian's chromium is driven by Playwright (no browser download). The test runs
notebook 02 top to bottom: the cell after the run waits for a decision, the test clicks
**Approve** in the widget like a person would, and then checks that the run finished and
that the DAG shows the approved step as succeeded. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import CHROMIUM, Lab, browser_page

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "tests" / "artifacts"
NOTEBOOK = "02-approvals-and-rollback.ipynb"

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
IDLE = f'{PANEL} .jp-Notebook-ExecutionIndicator[data-status="idle"]'
BUSY = f'{PANEL} .jp-Notebook-ExecutionIndicator[data-status="busy"]'
STDOUT = f'{PANEL} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]'
JS_KERNEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(w && w.sessionContext.isReady && k && k.status === 'idle'); }"""
JS_ALL_CELLS_RAN = """() => {
  const ps = [...document.querySelectorAll(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt')]
    .map(e => e.textContent.trim());
  return ps.length > 0 && ps.every(p => /^\\[\\d+\\]:$/.test(p)); }"""
JS_SHOW_LAST_CELL = """() => { const nb = window.jupyterapp.shell.currentWidget.content;
  nb.activeCellIndex = nb.widgets.length - 1;
  nb.scrollToItem(nb.widgets.length - 1, 'end'); }"""
# the look of a step in the live DAG: its shape's fill and its status line (CSS content)
JS_NODE_LOOK = """node => [getComputedStyle(node.querySelector('.cl-shape')).fill,
  getComputedStyle(node.querySelector('.cl-st'), '::after').content]"""


def require_chromium() -> None:
    """Skip only off Debian: on Debian a missing chromium is a broken setup, not a reason."""
    if Path(CHROMIUM).exists():
        return
    if Path("/etc/debian_version").exists():
        pytest.fail(f"{CHROMIUM} is missing on Debian: `sudo apt-get install chromium` "
                    "(`make system` does it)")
    pytest.skip(f"{CHROMIUM} is not installed and this is not Debian: install Chromium "
                "there to run the browser test")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab")
    with Lab(work, [NOTEBOOKS / NOTEBOOK, NOTEBOOKS / "tools_demo.py"]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-failure.png") as page:
        yield page


def open_and_run_all(page: Any, lab: Lab, notebook: str = NOTEBOOK) -> None:
    """A fresh kernel, ``notebook`` opened, "run all cells" fired (and forgotten: the
    command's promise resolves only when every cell has run, and a cell may wait for a
    click)."""
    lab.shutdown_kernels()
    page.goto(lab.url(notebook))
    page.wait_for_selector(IDLE, timeout=60_000)
    page.wait_for_function(JS_KERNEL_READY, timeout=60_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


JS_PROMPTS = """() => [...document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputArea-prompt')]
  .map(e => e.textContent.trim())"""
JS_ERRORS = """() => [...document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]
  .map(e => e.innerText).filter(t => /Error|Traceback/.test(t)).map(t => t.slice(-1500))"""


def run_all(page: Any, lab: Lab, notebook: str) -> None:
    """:func:`open_and_run_all`, then wait until every cell has run and the kernel idles.
    When no cell has even started after 30 s, the command reached no notebook (fired while
    the panel was still being attached, under load): it is fired once more, which cannot
    run a cell twice. When the cells do not all run, the failure says which prompts are
    left and what the outputs' errors were (a run-all stops at a cell's error)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    open_and_run_all(page, lab, notebook)
    try:
        page.wait_for_function(JS_ALL_CELLS_RAN, timeout=30_000)
    except PlaywrightTimeout:
        if all(p in ("[ ]:", "") for p in page.evaluate(JS_PROMPTS)):  # nothing started
            page.evaluate("() => { window.jupyterapp.commands.execute("
                          "'notebook:run-all-cells'); }")
        try:
            page.wait_for_function(JS_ALL_CELLS_RAN, timeout=120_000)
        except PlaywrightTimeout:
            raise AssertionError(
                f"not every cell of {notebook} ran: prompts {page.evaluate(JS_PROMPTS)}; "
                f"errors shown: {page.evaluate(JS_ERRORS)}") from None
    page.wait_for_selector(IDLE, timeout=30_000)


JS_THEME = """theme => window.jupyterapp.commands.execute('apputils:change-theme',
  {theme: theme})"""


def themed(page: Any, theme: str) -> None:
    """Switch JupyterLab's theme (``"JupyterLab Dark"`` / ``"JupyterLab Light"``): wait until
    the page says it changed, then let its fonts and colours settle."""
    page.evaluate(JS_THEME, theme)
    light = "false" if "Dark" in theme else "true"
    page.wait_for_selector(f'body[data-jp-theme-light="{light}"]', state="attached",
                           timeout=30_000)
    page.wait_for_timeout(500)


def shots_dir() -> Path:
    """Where screenshots go: tests/artifacts/ (``CHAINLAB_SHOTS=DIR`` elsewhere)."""
    out = Path(os.environ.get("CHAINLAB_SHOTS") or ARTIFACTS)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_approve_in_the_browser(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    open_and_run_all(page, lab)
    first = page.locator(f"{PANEL} .cl-run").first
    approve = first.locator("button.jupyter-button", has_text="Approve")
    expect(approve).to_be_visible(timeout=60_000)
    expect(first.locator(".cl-card")).to_contain_text("Charge 42.00 EUR to the card ending 4242")
    page.wait_for_selector(BUSY, timeout=10_000)  # the cell is waiting for the decision
    time.sleep(0.5)  # would an unattended notebook approve by itself? (it must not here)
    assert first.locator(".cl-badge.cl-r-suspended").count() == 1
    first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "e2e-02-before-approve.png"))

    approve.click()

    expect(first.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=20_000)
    charge = first.locator("g.node", has=page.locator("title", has_text="charge"))
    fill, caption = charge.evaluate(JS_NODE_LOOK)
    assert caption == '"✓ succeeded · approved"'  # what the node reads
    assert fill == "rgb(205, 238, 224)"  # STATUS_STYLE["succeeded"].fill, #cdeee0
    expect(page.locator(STDOUT, has_text="succeeded - approved in the widget")).to_be_visible()
    first.screenshot(path=str(ARTIFACTS / "e2e-02-run-widget.png"))

    page.wait_for_function(JS_ALL_CELLS_RAN, timeout=60_000)
    page.wait_for_selector(IDLE, timeout=30_000)
    expect(page.locator(STDOUT, has_text="rolled_back")).to_be_visible()
    expect(page.locator(STDOUT, has_text="the customer changed their mind").first).to_be_visible()
    page.evaluate(JS_SHOW_LAST_CELL)
    time.sleep(0.5)  # the notebook renders the cells that scrolled into view
    errors = [e for e in page.errors if "favicon" not in e]
    assert not [e for e in errors if "Error displaying widget" in e], errors
    page.screenshot(path=str(ARTIFACTS / "e2e-02-end.png"))
