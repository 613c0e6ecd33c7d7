"""`%%chain` cells are highlighted as YAML in JupyterLab (issue 18, item 4), by the prebuilt
labextension the wheel ships (share/jupyter/labextensions/chainlab-cellmagic, built from
widgets/cellmagic/). JupyterLab loads it from the repository's copy; the test checks each cell's
editor mime type, follows a cell as its first line gains and loses the magic, and takes a
screenshot of the cells in the light and the dark theme (tests/artifacts/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import Lab, browser_page
from .test_lab import ARTIFACTS, JS_KERNEL_READY, REPO, require_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

EXTENSIONS = REPO / "share" / "jupyter" / "labextensions"
NOTEBOOK = "magic.ipynb"
CELLS = [
    "%%chain invoice\nsteps:\n  - id: orders  # a comment\n    tool: fetch_orders\n"
    "    args: {customer: \"{{ context.customer }}\", limit: 3, open: true}\n",
    "import math\n\ndef area(r: float) -> float:\n    return math.pi * r ** 2  # Python\n",
    "steps:\n  - id: orders\n",  # YAML-looking text without the magic stays Python
]
JS_MIMES = """() => window.jupyterapp.shell.currentWidget.content.widgets
  .map(cell => cell.model.mimeType)"""


class LabWithExtension(Lab):
    """JupyterLab that also loads the labextensions in the repository's share/ folder."""

    def command(self, settings: Path) -> list[str]:
        return [*super().command(settings),
                f"--LabApp.extra_labextensions_path={EXTENSIONS}"]


def notebook(path: Path) -> Path:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
              "outputs": [], "source": text} for i, text in enumerate(CELLS)]
    path.write_text(json.dumps({
        "cells": cells, "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"},
                     "language_info": {"name": "python"}}}))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("magic")
    with LabWithExtension(work, [notebook(work / NOTEBOOK)]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-cellmagic-failure.png") as page:
        yield page


def test_the_extension_is_the_one_in_the_repository() -> None:
    meta = json.loads((EXTENSIONS / "chainlab-cellmagic" / "package.json").read_text())
    source = json.loads((REPO / "widgets" / "cellmagic" / "package.json").read_text())
    assert meta["name"] == source["name"] == "chainlab-cellmagic"
    assert (EXTENSIONS / "chainlab-cellmagic" / meta["jupyterlab"]["_build"]["load"]).is_file()
    # the built plugin holds the source's rule (rebuild: widgets/README.md)
    built = "".join(p.read_text() for p in (EXTENSIONS / "chainlab-cellmagic" / "static")
                    .glob("*.js"))
    assert "%%chain" in built and "text/x-yaml" in built


def test_chain_cells_are_yaml_and_follow_their_first_line(lab: Lab, page: Any) -> None:
    page.goto(lab.url(NOTEBOOK))
    page.wait_for_function(JS_KERNEL_READY, timeout=90_000)
    page.wait_for_function(f"() => ({JS_MIMES})()[0] === 'text/x-yaml'", timeout=30_000)
    assert page.evaluate(JS_MIMES) == ["text/x-yaml", "text/x-ipython", "text/x-ipython"]
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    page.wait_for_timeout(300)  # the editors re-highlight
    cells.screenshot(path=str(ARTIFACTS / "e2e-cellmagic-light.png"))

    # the magic typed into the third cell makes it YAML; taken away, Python again
    set_source = """([i, text]) => window.jupyterapp.shell.currentWidget.content.widgets[i]
      .model.sharedModel.setSource(text)"""
    page.evaluate(set_source, [2, "%%chain other\n" + CELLS[2]])
    page.wait_for_function(f"() => ({JS_MIMES})()[2] === 'text/x-yaml'", timeout=10_000)
    page.evaluate(set_source, [2, CELLS[2]])
    page.wait_for_function(f"() => ({JS_MIMES})()[2] === 'text/x-ipython'", timeout=10_000)
    # a new cell (added at the end) is watched too
    page.evaluate("""() => { const app = window.jupyterapp;
      const nb = app.shell.currentWidget.content;
      nb.activeCellIndex = nb.widgets.length - 1;
      return app.commands.execute('notebook:insert-cell-below'); }""")
    count = len(CELLS) + 1
    page.wait_for_function(f"() => ({JS_MIMES})().length === {count}", timeout=10_000)
    assert page.evaluate(JS_MIMES)[3] == "text/x-ipython"
    page.evaluate(set_source, [3, "%%chain fresh\nsteps: []\n"])
    page.wait_for_function(f"() => ({JS_MIMES})()[3] === 'text/x-yaml'", timeout=10_000)
    assert page.evaluate(JS_MIMES) == ["text/x-yaml", "text/x-ipython", "text/x-ipython",
                                       "text/x-yaml"]

    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Dark'})")
    page.wait_for_function(
        "() => document.body.getAttribute('data-jp-theme-light') === 'false'", timeout=30_000)
    page.wait_for_timeout(500)
    cells.screenshot(path=str(ARTIFACTS / "e2e-cellmagic-dark.png"))
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', "
                  "{theme: 'JupyterLab Light'})")
    assert not [e for e in page.errors if "chainlab-cellmagic" in e], page.errors
