"""Issue 18, item 2: an executed notebook exported with nbconvert shows the run's last state
(the static picture in its own output after the widget view's, replaced when the run ended;
tests/e2e/test_export_offline_e2e.py opens a plain ``--execute`` export offline in Chromium).

The notebook is executed the way a notebook saved from JupyterLab looks (no widget state
saved: JupyterLab does not save it by default), exported to HTML, and the HTML is checked for
the final statuses. ``CHAINLAB_EXPORT_HTML=PATH`` keeps the HTML (for a browser screenshot).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow

CELLS = ['''%load_ext chainlab
from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

tb = Toolbox("export")

@tb.tool
def fetch(n: int) -> list[int]:
    """Fetch n numbers."""
    return list(range(n))

@tb.tool
def total(items: list[int]) -> int:
    """Add them up."""
    return sum(items)

chain = Chain.from_yaml("""
name: export-demo
steps:
  - {id: numbers, tool: fetch, args: {n: 4}}
  - {id: sum, tool: total, args: {items: "{{ steps.numbers.output }}"}}
""")
runtime = Runtime(tb, MemoryStore())
run = await runtime.start(chain, paused=True)
run''', '''await run.unpause()
result = await run.wait()
print(result.status, result.outputs["sum"])''']


def execute(cells: list[str], folder: Path) -> nbformat.NotebookNode:
    """A notebook of ``cells`` executed by nbclient in a real kernel, as a notebook saved from
    JupyterLab looks (no widget state saved)."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def test_nbconvert_html_shows_the_final_statuses(tmp_path: Path) -> None:
    from nbconvert import HTMLExporter

    nb = execute(CELLS, tmp_path)
    assert nb.cells[1].outputs[0]["text"] == "succeeded 6\n"
    widget, picture = nb.cells[0].outputs  # the widget view, then the static picture in an
    # output of its own (issue 29 item 7), replaced in place (display id) when the run ended
    assert "application/vnd.jupyter.widget-view+json" in widget["data"]
    assert "text/html" not in widget["data"]
    static = picture["data"]["text/html"]
    assert 'run <span class="cl-run-status">succeeded</span>' in static
    assert "cl-static-next" not in static  # an ended run needs no "how to act" line

    body, _ = HTMLExporter().from_notebook_node(nb)
    if os.environ.get("CHAINLAB_EXPORT_HTML"):
        Path(os.environ["CHAINLAB_EXPORT_HTML"]).write_text(body)
    assert 'run <span class="cl-run-status">succeeded</span>' in body
    rows = re.findall(r"<tr class=\"cl-row-(\w+)\"><td><code>(\w+)</code></td>"
                      r"<td>(\w+)</td><td>([\w ·]+)</td><td>(\d+)</td>", body)
    assert rows == [("succeeded", "numbers", "fetch", "succeeded", "1"),
                    ("succeeded", "sum", "total", "succeeded", "1")]
    assert "pending" not in re.sub(r"<style.*?</style>", "", body.split('cl-static-run')[1],
                                   flags=re.S).split("</table>")[0].split("<tbody>")[1]


RACE = ['''%load_ext chainlab
import asyncio, time
from chainlab import Chain, Toolbox
from chainlab.jupyter.run_widget.widget import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

tb = Toolbox("race")

@tb.tool
async def slow() -> int:
    """Take a moment."""
    await asyncio.sleep(0.2)
    return 1

runtime = Runtime(tb, MemoryStore())
run = await runtime.start(Chain.from_dict({"name": "race", "steps": [{"id": "s", "tool": "slow"}]}))
RunWidget(run)''',
        # blocks the loop: the run can only end after this cell, before the next one
        '''time.sleep(1)''',
        '''print(run.status)''']


def test_a_run_that_ends_between_two_cells_is_shown_ended(tmp_path: Path) -> None:
    """The update sent when the run ended is parented to a cell that is already done (nbclient
    drops it); the next cell sends it again, so the saved notebook holds the final state."""
    nb = execute(RACE, tmp_path)
    assert nb.cells[2].outputs[0]["text"] == "succeeded\n"
    static = nb.cells[0].outputs[1]["data"]["text/html"]
    assert 'run <span class="cl-run-status">succeeded</span>' in static
