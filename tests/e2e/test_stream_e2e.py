"""A streamed agent turn in a real JupyterLab and a real browser (issue 48 item 1): while the
model writes, the run widget's Inspector shows the agent step's transcript with the turn
being written (``writing…``), its text growing piece by piece in the DOM; once the turn is
recorded, the row is the final answer. Screenshots of the widget mid-stream in the light and
the dark theme go to tests/artifacts/ (``CHAINLAB_SHOTS=DIR`` elsewhere). With ``-s`` it
prints how late each growth of the text reached the DOM after the scripted server sent the
piece that made it (the kernel's and the browser's wall clocks, one machine): a figure, never
asserted."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    NOTEBOOKS,
    PANEL,
    open_and_run_all,
    require_chromium,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "streamed.ipynb"
TEXT = " ".join(f"word{n:02d}" for n in range(60))  # 360 characters: 52 pieces

CELLS = [f'''
import chainlab
from chainlab.jupyter import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import Reply
from chainlab.testing.openai_server import FakeOpenAI

model = FakeOpenAI([Reply({TEXT!r}, delay_s=2.0, gap_s=0.25)]).start()
desk = chainlab.Toolbox("desk")
desk.add_agent(chainlab.Agent("writer", "You write.", [], model="fake-model",
                              base_url=model.base_url, stream=True))
chain = chainlab.Chain.from_dict({{"name": "answer", "steps": [
    {{"id": "answer", "tool": "agent:writer", "args": {{"request": "write"}}}}]}})
''', '''
runtime = Runtime(desk, MemoryStore())
run = await runtime.start(chain, paused=True)
widget = RunWidget(run)
display(widget)
widget.tabs.inspect("answer")
await run.unpause()  # the model answers in 2 s, then writes for ~13 s
''', '''
import json, time
await run.wait()
offset = time.time() - time.perf_counter()  # the server notes perf_counter; the page Date.now
sent, said = [], 0
for at, piece in model.pieces:
    said += len(piece)
    sent.append([(at + offset) * 1000, said])
print("SENT " + json.dumps(sent))
''']

#: every time the Inspector's "writing…" row changes: (Date.now(), its text's length)
JS_WATCH = """() => {
  window.__grew = [];
  new MutationObserver(() => {
    for (const row of document.querySelectorAll('table.cl-transcript tr')) {
      if (!row.textContent.includes('writing')) continue;
      const said = row.querySelectorAll('td')[1];
      const n = said ? said.textContent.length : 0;
      const last = window.__grew[window.__grew.length - 1];
      if (!last || last[1] !== n) window.__grew.push([Date.now(), n]);
    }
  }).observe(document, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("labstream")
    notebook = write_notebook(work / NOTEBOOK, CELLS)
    with Lab(work / "lab", [notebook, NOTEBOOKS / "tools_demo.py"]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "e2e-stream-failure.png", width=1400) as page:
        yield page


def test_the_inspector_grows_a_streamed_turn_in_the_browser(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    page.add_init_script(f"({JS_WATCH})()")
    open_and_run_all(page, lab, NOTEBOOK)  # (its last cell waits for the run's end)
    shots: Path = shots_dir()
    run = page.locator(f"{PANEL} .cl-run").first
    transcript = run.locator(".cl-inspector table.cl-transcript")
    writing = transcript.locator("tr", has_text="writing…")
    expect(writing).to_be_visible(timeout=60_000)
    first = writing.inner_text()
    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        themed(page, theme)
        run.scroll_into_view_if_needed()
        run.screenshot(path=str(shots / f"stream-widget-{name}.png"))
    themed(page, "JupyterLab Light")
    later = writing.inner_text() if writing.count() else ""
    assert later == "" or len(later) > len(first), (first, later)  # it grew (or ended)
    final = transcript.locator("tr", has_text="final answer")
    expect(final).to_be_visible(timeout=60_000)
    expect(final).to_contain_text("word00 word01")
    expect(transcript.locator("tr", has_text="writing…")).to_have_count(0)
    out = page.locator(f"{PANEL} .jp-OutputArea-output", has_text="SENT ")
    expect(out).to_be_visible(timeout=60_000)
    found = re.search(r"SENT (\[.*\])", out.inner_text())
    assert found is not None
    sent = json.loads(found.group(1))
    late = []
    for at, n in page.evaluate("() => window.__grew"):
        made = next((t for t, said in sent if said >= n), None)  # the piece that made it
        if made is not None and n < sent[-1][1]:
            late.append(at - made)
    if late:
        print(f"\nstreamed text in the DOM: {len(late)} growths, after the piece was sent: "
              f"median {statistics.median(late):.0f} ms, max {max(late):.0f} ms")
