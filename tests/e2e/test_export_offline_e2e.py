"""Issue 29, item 7: a plain ``jupyter nbconvert --to html --execute`` export, opened in a
browser with no network, shows the run's final picture where the run widget was.

The notebooks are executed by exactly that command (a real subprocess and a real kernel; it
saves the widget state, so nbconvert renders the widget view, which needs require.js and the
widget manager from a CDN). The HTML file is opened in Debian's Chromium with every request
but the file itself aborted and the context offline, and the statuses are read from what the
page shows (the inner text of visible elements), not from the HTML source. A run that waits
for approval, exported while it waits, shows that and says how to act on it. In a live
JupyterLab the widget is shown and the static picture hidden (shown again once a kernel
restart has cut the widget off). Screenshots of the offline
export (light and dark theme) go to tests/artifacts/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import CHROME_ARGS, CHROMIUM, Lab, browser_page, write_notebook
from .test_lab import (
    ARTIFACTS,
    PANEL,
    REPO,
    require_chromium,
    run_all,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

TOOLS = '''%load_ext chainlab
from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

tb = Toolbox("export")

@tb.tool
def fetch(n: int) -> list[int]:
    """Fetch n numbers."""
    return list(range(n))

@tb.tool
def total(items: list[int]) -> int:
    """Add them up."""
    return sum(items)

@tb.tool(side_effects=True, requires_confirmation=True)
def publish(value: int) -> str:
    """Publish the total (a person approves it first)."""
    return f"published {value}"
'''

FINISHED = [TOOLS + '''
chain = Chain.from_yaml("""
name: export-demo
steps:
  - {id: numbers, tool: fetch, args: {n: 4}}
  - {id: sum, tool: total, args: {items: "{{ steps.numbers.output }}"}}
""")
runtime = Runtime(tb, SQLiteStore("runs.db"))
run = await runtime.start(chain, paused=True)
run''', '''await run.unpause()
result = await run.wait()
print(result.status, result.outputs["sum"])''']

WAITING = [TOOLS + '''
chain = Chain.from_yaml("""
name: export-approval
steps:
  - {id: numbers, tool: fetch, args: {n: 3}}
  - {id: sum, tool: total, args: {items: "{{ steps.numbers.output }}"}}
  - {id: publish, tool: publish, args: {value: "{{ steps.sum.output }}"}}
""")
runtime = Runtime(tb, SQLiteStore("runs.db"))
run = await runtime.start(chain)
run''', '''result = await run.wait()
print(result.status, result.waiting, run.run_id)''']


def nbconvert(notebook: Path, *extra: str) -> Path:
    """``jupyter nbconvert --to html --execute NOTEBOOK`` in the notebook's folder (the
    venv's jupyter, this checkout first on the kernel's path); the HTML file it wrote."""
    jupyter = Path(sys.executable).with_name("jupyter")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("JPY_SESSION_NAME", None)
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "html", "--execute",
                           notebook.name, *extra], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = notebook.with_suffix(".html")
    assert out.exists(), done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_chromium()
    work = tmp_path_factory.mktemp("export")
    out: dict[str, Path] = {}
    for name, cells in [("finished", FINISHED), ("waiting", WAITING)]:
        folder = work / name
        folder.mkdir()
        out[name] = nbconvert(write_notebook(folder / f"{name}.ipynb", cells))
    dark = work / "dark"
    dark.mkdir()
    out["dark"] = nbconvert(write_notebook(dark / "dark.ipynb", FINISHED),
                            "--HTMLExporter.theme=dark")
    return out


class Offline:
    """Open HTML files in Chromium with the network off: every request but the file itself
    is aborted (and recorded in ``blocked``), and the context is offline."""

    def __init__(self, page: Any):
        self.page = page
        self.blocked: list[str] = []

    def open(self, html: Path) -> Any:
        target = html.resolve().as_uri()
        self.blocked.clear()

        def route(r: Any) -> None:
            if r.request.url == target:
                r.continue_()
            else:
                self.blocked.append(r.request.url)
                r.abort()

        self.page.context.route("**/*", route)
        self.page.context.set_offline(True)
        self.page.goto(target)
        self.page.wait_for_load_state("load")
        return self.page


@pytest.fixture
def offline() -> Iterator[Offline]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
        try:
            yield Offline(page)
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "export-offline-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def shown_rows(picture: Any) -> list[list[str]]:
    """The status table's rows as a person reads them (visible cells' inner text)."""
    rows = picture.locator("table.cl-status-table tbody tr")
    return [[c.strip() for c in row.inner_text().split("\t")] for row in rows.all()]


def first_output(page: Any) -> Any:
    """The outputs of the first code cell: where the run widget was."""
    return page.locator(".jp-Cell").first.locator(".jp-Cell-outputArea")


def test_the_offline_export_shows_the_finished_run(exports: dict[str, Path],
                                                    offline: Offline) -> None:
    from playwright.sync_api import expect

    page = offline.open(exports["finished"])
    assert any("unpkg.com" in u or "require" in u for u in offline.blocked), offline.blocked
    out = first_output(page)
    picture = out.locator(".cl-static-run")
    expect(picture).to_be_visible()
    title = picture.locator("p").first
    expect(title).to_be_visible()
    assert title.inner_text().strip() == "export-demo · run succeeded"
    assert shown_rows(picture) == [["numbers", "fetch", "succeeded", "1", ""],
                                   ["sum", "total", "succeeded", "1", ""]]
    dag = picture.locator("svg").first
    expect(dag).to_be_visible()
    box = dag.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 50
    assert "pending" not in out.inner_text() and "paused" not in out.inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "export-offline-light.png"), full_page=True)

    page = offline.open(exports["dark"])
    picture = first_output(page).locator(".cl-static-run")
    expect(picture).to_be_visible()
    assert picture.locator("p").first.inner_text().strip() == "export-demo · run succeeded"
    assert [r[2] for r in shown_rows(picture)] == ["succeeded", "succeeded"]
    page.screenshot(path=str(ARTIFACTS / "export-offline-dark.png"), full_page=True)


def test_the_offline_export_of_a_run_waiting_for_approval_says_how_to_act(
        exports: dict[str, Path], offline: Offline) -> None:
    from playwright.sync_api import expect

    page = offline.open(exports["waiting"])
    printed = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-output").inner_text()
    status, rest = printed.strip().split(" ", 1)
    assert status == "suspended" and "'publish': 'waiting_confirmation'" in rest
    run_id = rest.rsplit(" ", 1)[1]
    picture = first_output(page).locator(".cl-static-run")
    expect(picture).to_be_visible()
    assert picture.locator("p").first.inner_text().strip() == "export-approval · run suspended"
    assert [r[:3] for r in shown_rows(picture)] == [["numbers", "fetch", "succeeded"],
                                                    ["sum", "total", "succeeded"],
                                                    ["publish", "publish",
                                                     "waiting_confirmation"]]
    todo = first_output(page).locator(".cl-static-next")
    expect(todo).to_be_visible()
    line = todo.inner_text()
    assert "publish waits for approval" in line
    assert f"%chain resume {run_id}" in line and f"%chain approve {run_id} publish" in line
    assert f"%chain show {run_id}" in line
    page.screenshot(path=str(ARTIFACTS / "export-offline-waiting-light.png"), full_page=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("export-lab")
    nb = write_notebook(work / "export-live.ipynb", FINISHED)
    with Lab(work, [nb]) as server:
        yield server


def test_live_jupyterlab_shows_the_widget_not_the_static_picture(lab: Lab) -> None:
    """The same notebook run in JupyterLab: the live widget, and the static picture that sits
    next to it for exports hidden (not shown twice); after a kernel restart, both the
    widget's reattach line and the picture."""
    from playwright.sync_api import expect

    with browser_page(ARTIFACTS / "export-live-failure.png") as page:
        run_all(page, lab, "export-live.ipynb")
        cell = page.locator(f"{PANEL} .jp-CodeCell").first
        widget = cell.locator(".cl-run")
        expect(widget).to_be_visible()
        expect(widget.locator(".cl-badge.cl-r-succeeded")).to_be_visible()
        static = cell.locator(".cl-static-run")
        expect(static).to_have_count(1)  # the output is there (saved with the notebook) ...
        expect(static).to_be_hidden()  # ... and hidden while the live widget shows
        cell.screenshot(path=str(ARTIFACTS / "export-live-lab.png"))
        # the kernel restarts: the widget is marked disconnected (its reattach line shows)
        # and the picture of the run's last state is no longer hidden
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext"
                      ".session.kernel.restart()")
        expect(cell.locator(".cl-run.jupyter-widgets-disconnected")).to_have_count(1)
        expect(cell.locator(".cl-stale-line")).to_be_visible()
        expect(static).to_be_visible()
        assert static.locator("p").first.inner_text().strip() == "export-demo · run succeeded"
        cell.screenshot(path=str(ARTIFACTS / "export-live-lab-after-restart.png"))
