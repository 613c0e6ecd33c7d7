"""The quick start in Notebook 7 (``jupyter notebook``, installed by the jupyter extra), in
headless Chromium: the file browser at /tree lists the notebook, /notebooks/... opens it, and
running it shows the run widget, which renders and follows the run to its end, in the light
and the dark theme. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import Lab, browser_page
from .test_cellmagic_e2e import EXTENSIONS
from .test_lab import ARTIFACTS, JS_KERNEL_READY, NOTEBOOKS, require_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "01-quickstart.ipynb"
RUN = ".cl-run"
JS_CHAIN_CELLS_ARE_YAML = """() => {
  const code = window.jupyterapp.shell.currentWidget.content.widgets
    .filter(cell => cell.model.type === 'code');
  const magic = cell => cell.model.sharedModel.getSource().startsWith('%%chain');
  return code.some(magic) && code.every(
    cell => cell.model.mimeType === (magic(cell) ? 'text/x-yaml' : 'text/x-ipython')); }"""


class Notebook7(Lab):
    """A private Notebook 7 server (same private directories and settings as :class:`Lab`)."""

    def command(self, settings: Path) -> list[str]:
        return [sys.executable, "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
                f"--port={self.port}", f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={self.root}", "--ServerApp.open_browser=False",
                f"--JupyterNotebookApp.app_settings_dir={settings}",
                f"--JupyterNotebookApp.workspaces_dir={self.work / 'workspaces'}",
                "--expose-app-in-browser"]

    def start(self, timeout: float = 60.0) -> Lab:
        # the wheel's labextension, installed where Jupyter's data directory keeps them
        # (Notebook 7 lists extra_labextensions_path but does not serve its files)
        installed = self.work / "data" / "labextensions" / "chainlab-cellmagic"
        shutil.copytree(EXTENSIONS / "chainlab-cellmagic", installed, dirs_exist_ok=True)
        return super().start(timeout)

    def tree(self) -> str:
        return f"{self.base}/tree?token={self.token}"

    def url(self, notebook: str) -> str:
        return f"{self.base}/notebooks/{notebook}?token={self.token}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notebook7]:
    require_chromium()
    with Notebook7(tmp_path_factory.mktemp("nb7"), [NOTEBOOKS / NOTEBOOK]) as nb7:
        yield nb7


@pytest.fixture
def page(server: Notebook7) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-nb7-failure.png") as page:
        yield page


def test_the_run_widget_renders_in_notebook_7(server: Notebook7, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server.tree())
    listed = page.locator(".jp-DirListing-item", has_text=NOTEBOOK)
    expect(listed).to_be_visible(timeout=60_000)
    assert page.title().startswith("Home")  # Notebook 7's file browser, not JupyterLab

    page.goto(server.url(NOTEBOOK))
    page.wait_for_function(JS_KERNEL_READY, timeout=90_000)
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    # the %%chain cells are YAML here too, the other code cells Python
    page.wait_for_function(JS_CHAIN_CELLS_ARE_YAML, timeout=30_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    widget = page.locator(RUN).first
    expect(widget.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=90_000)
    nodes = widget.locator("svg g.node")
    expect(nodes).to_have_count(4)  # orders, discount, sum, line
    # run-all scrolls on; Notebook 7 may hide or re-render a cell scrolled out of view
    # (windowing) or whose output is republished: measure it once it is in view again
    box = None
    for _ in range(100):
        widget.scroll_into_view_if_needed()
        box = widget.bounding_box()
        if box is not None:
            break
        page.wait_for_timeout(100)
    assert box is not None and box["width"] > 300 and box["height"] > 150
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(ARTIFACTS / "e2e-nb7-run-widget-light.png"))

    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Dark'})")
    page.wait_for_function(
        "() => document.body.getAttribute('data-jp-theme-light') === 'false'", timeout=30_000)
    page.wait_for_timeout(500)  # the theme's stylesheet applies
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(ARTIFACTS / "e2e-nb7-run-widget-dark.png"))
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Light'})")

    errors = [e for e in page.errors if "favicon" not in e]
    assert not [e for e in errors if "Error displaying widget" in e], errors
