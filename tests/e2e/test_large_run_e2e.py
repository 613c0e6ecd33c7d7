"""Issue 49 item 4 in a real JupyterLab and headless Chromium: a stored 10,000-event,
3,332-step run (bench_history's shape, on SQLite) shown with ``%chain show RUN --db FILE`` in
a fresh kernel, laid out by chainlab (no layout cached anywhere: the kernel's layout cache is
an empty directory).

The DOM must hold every step's node; a scrubber position must patch the nodes' statuses (the
middle step reads running, the last pending); a click on a node must open it in the
Inspector; nothing may be logged as an error. How long the page took from the ``%chain show``
cell's start to every node in the page is written next to the screenshots (light and dark
theme, ``large-run-3332-*.png``), never asserted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.render.scenarios import history_chain

from .lab import Lab, browser_page, write_notebook
from .test_lab import PANEL, require_chromium, run_all, shots_dir, themed

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

STEPS = 3332
MIDDLE = f"s{STEPS // 2}"
JS_LOOK = """([widget, ids]) => Object.fromEntries(ids.map(id => {
  const g = [...widget.querySelectorAll('g.node')].find(
    n => n.querySelector('title').textContent === id);
  return [id, g ? (g.getAttribute('data-st') || 'pending') : null]; }))"""


def build(path: Path) -> tuple[str, int]:
    """The run (:func:`~tests.render.scenarios.history_chain`, as benchmarks/bench_history.py
    builds it), driven to its end on SQLite; its id and the event at which MIDDLE
    started."""
    import anyio

    from chainlab import Toolbox
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    tb = Toolbox("bench")
    tb.tool(lambda i: i, name="noop")
    chain = history_chain(STEPS, max_concurrency=8)

    async def main() -> str:
        store = SQLiteStore(path)
        async with Runtime(tb, store) as rt:
            run = await rt.start(chain)
            assert (await run.wait()).ok
        store.close()
        return run.run_id

    run_id = anyio.run(main)
    store = SQLiteStore(path, readonly=True)
    try:
        events = store.load_events(run_id)
    finally:
        store.close()
    assert len(events) >= 9_990
    return run_id, next(ev.seq for ev in events
                        if str(ev.kind) == "step_started" and ev.step_id == MIDDLE)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, str, int]]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab-large-run")
    db = work / "history.db"
    run_id, seq = build(db)
    cache = work / "empty-layout-cache"
    cache.mkdir()
    nb = write_notebook(work / "big.ipynb", [
        f"import os; os.environ['CHAINLAB_LAYOUT_CACHE'] = {str(cache)!r}\n%load_ext chainlab",
        "import time; print(time.time())",
        f"%chain show {run_id} --db {db}",
    ])
    with Lab(work / "lab", [nb]) as server:
        yield server, run_id, seq


@pytest.fixture
def page(big: tuple[Lab, str, int]) -> Iterator[Any]:
    with browser_page(shots_dir() / "large-run-failure.png", width=1280) as page:
        page.errors = []
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
        yield page


def test_a_large_stored_run_opens_patches_and_inspects(big: tuple[Lab, str, int],
                                                       page: Any) -> None:
    from playwright.sync_api import expect

    lab, _, seq = big
    run_all(page, lab, "big.ipynb")
    widget = page.locator(f"{PANEL} .cl-run").first
    expect(widget.locator("g.node.cl-step")).to_have_count(STEPS, timeout=120_000)
    drawn = time.time()
    started = float(page.locator(f"{PANEL} .jp-OutputArea-output").nth(0).inner_text())
    info = widget.locator(".cl-zoominfo")
    expect(info).to_contain_text(f"{STEPS:,} steps")
    widget.scroll_into_view_if_needed()
    shots = shots_dir()
    (shots / "large-run-3332-open.txt").write_text(
        f"%chain show of a {STEPS}-step run: {drawn - started:.1f} s from the cell before "
        "it until every node was in the page (the test's polling included)\n")
    widget.screenshot(path=str(shots / "large-run-3332-light.png"))

    # a scrubber position patches the statuses: the middle step was just starting
    box = widget.locator(".cl-scrubber input[type=number]")
    box.fill(str(seq))
    box.press("Enter")
    expect(widget.locator(".cl-head")).to_contain_text(f"after event {seq} of", timeout=60_000)
    want = {"s0": "succeeded", MIDDLE: "running", f"s{STEPS - 1}": "pending"}
    deadline = time.monotonic() + 60
    while (got := page.evaluate(JS_LOOK, [widget.element_handle(), list(want)])) != want \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == want

    # back to the present, then a click on a node in view opens it in the Inspector
    widget.locator(".cl-scrubber button", has_text="Live").click()
    expect(widget.locator(".cl-head")).not_to_contain_text("history:", timeout=60_000)
    node = widget.locator("g.node", has=page.locator("title", has_text=re.compile("^s3$")))
    node.click()
    expect(widget.locator(".widget-tab-contents .widget-dropdown select").first).to_have_value(
        "s3", timeout=30_000)

    themed(page, "JupyterLab Dark")
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(shots / "large-run-3332-dark.png"))
    themed(page, "JupyterLab Light")
    errors = [e for e in page.errors if "favicon" not in e]
    assert not errors, errors
