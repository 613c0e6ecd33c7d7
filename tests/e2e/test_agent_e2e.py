"""An agent step in a real JupyterLab and a real browser (issue 37 item 6, notebook 13).

The notebook runs top to bottom by itself (its approval is code). Then the test looks at the
first run widget, the support agent's: the DAG draws the agent step as a cluster of its
model turns, the first turn's two calls side by side under it, each a node with its own
status, and the final answer last; a click on a call opens the Inspector on that call, a
click on the cluster's title on the agent step, whose transcript lists each call (its step,
status and what the model was told) and the final answer.
Screenshots of the widget in the light and the dark theme go to tests/artifacts/
(``CHAINLAB_SHOTS=DIR`` elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page
from .test_lab import (
    JS_NODE_LOOK,
    NOTEBOOKS,
    PANEL,
    require_chromium,
    run_all,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "13-agent-steps.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab13")
    with Lab(work, [NOTEBOOKS / NOTEBOOK, NOTEBOOKS / "tools_demo.py"]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(shots_dir() / "e2e-agent-failure.png", width=1400) as page:
        yield page


def test_the_agent_steps_transcript_in_the_inspector(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)
    shots = shots_dir()

    run = page.locator(f"{PANEL} .cl-run").first
    run.scroll_into_view_if_needed()
    expect(run.locator(".cl-badge.cl-r-succeeded")).to_be_visible(timeout=30_000)
    # the agent step: a cluster of its turns, the calls of turn 1 side by side under it
    dag = run.locator(".cl-dag")
    titles = dag.locator("g.node title")
    expect(titles).to_have_text(["help#t1", "help/1.1", "help/1.2", "help#t2"])
    expect(dag.locator("g.node", has=page.locator("title", has_text="help#t2"))).to_contain_text(
        "final answer")
    calls = [dag.locator("g.node", has=page.locator("title", has_text=f"help/1.{i}")).first
             for i in (1, 2)]
    boxes = [c.bounding_box() for c in calls]
    middles = [b["y"] + b["height"] / 2 for b in boxes if b]
    assert len(middles) == 2 and abs(middles[0] - middles[1]) < 2, boxes  # one row
    for call in calls:
        _, caption = call.evaluate(JS_NODE_LOOK)  # each call's own status
        assert caption.startswith('"✓ succeeded'), caption
    cluster = dag.locator("g.cluster", has=page.locator("title", has_text="cluster_help")).first
    _, caption = cluster.evaluate(JS_NODE_LOOK)  # the status line is the CSS's ::after
    assert "✓ 2" in caption, caption

    calls[1].click()
    expect(run.locator(".cl-inspector select").first).to_have_value("help/1.2", timeout=10_000)
    cluster.locator("text").first.click()  # the cluster's title: the agent step itself
    expect(run.locator(".cl-inspector select").first).to_have_value("help", timeout=10_000)
    transcript = run.locator(".cl-inspector table.cl-transcript")
    expect(transcript).to_be_visible()
    rows = transcript.locator("tr")
    expect(rows).to_have_count(4)  # the header, two calls, the final answer
    expect(rows.nth(1)).to_contain_text("lookup_order")
    expect(rows.nth(1)).to_contain_text("help/1.1")
    expect(rows.nth(2)).to_contain_text("help/1.2")
    expect(rows.nth(2)).to_contain_text('{"order":7,"refunded":15}')
    expect(rows.nth(3)).to_contain_text("final answer")
    expect(rows.nth(3)).to_contain_text("I refunded 15 of its 40")
    inspector = run.locator(".cl-inspector")
    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        themed(page, theme)
        run.locator(".cl-head").scroll_into_view_if_needed()  # the head and the DAG
        run.screenshot(path=str(shots / f"agent-widget-{name}.png"))
        transcript.scroll_into_view_if_needed()
        inspector.screenshot(path=str(shots / f"agent-transcript-{name}.png"))
    themed(page, "JupyterLab Light")
