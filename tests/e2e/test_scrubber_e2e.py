"""The history scrubber in a real JupyterLab and a real browser (notebook 06).

The notebook runs top to bottom by itself (its approvals are magics). Then the test drags
the first run widget's history slider to an earlier event, checks that the DAG node of the
failed step reads what it was at that event, steps one event back with the arrow key, and
returns to **Live**. Screenshots of the scrubbed widget in the light and the dark theme go
to tests/artifacts/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .lab import Lab, browser_page
from .test_lab import ARTIFACTS, JS_NODE_LOOK, NOTEBOOKS, PANEL, require_chromium, run_all, themed

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "06-time-travel.ipynb"


def parse_status_at(seq: int) -> str:
    """What notebook 06's failed run says of `parse` after event ``seq`` (its history is
    deterministic: the chain runs sequentially; the notebook prints this table)."""
    if seq <= 6:
        return "pending"
    if seq <= 11:
        return "ready"
    if seq == 12:
        return "running"
    return "failed"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_chromium()
    work = tmp_path_factory.mktemp("lab06")
    with Lab(work, [NOTEBOOKS / NOTEBOOK, NOTEBOOKS / "tools_demo.py"]) as server:
        yield server


@pytest.fixture
def page(lab: Lab) -> Iterator[Any]:
    with browser_page(ARTIFACTS / "e2e-scrubber-failure.png") as page:
        yield page


def caption_of(widget: Any, page: Any, step_id: str) -> str:
    node = widget.locator("g.node", has=page.locator("title", has_text=step_id)).first
    _, caption = node.evaluate(JS_NODE_LOOK)
    return str(caption).strip('"')


def caption_becomes(widget: Any, page: Any, step_id: str, want: str,
                    timeout: float = 10.0) -> str:
    """The step's caption once it reads ``want`` (or at the timeout): the badge and the
    DAG's style patch arrive in separate messages."""
    deadline = time.monotonic() + timeout
    while (caption := caption_of(widget, page, step_id)) != want \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return caption


def settled_seq(widget: Any, page: Any, timeout: float = 20.0) -> int:
    """The scrubbed event once the header and the DAG agree on it (the header and the style
    patch arrive in separate messages; a dragged or keyed slider may pass through values)."""
    deadline = time.monotonic() + timeout
    while True:
        seq = scrubbed_seq(widget)
        if (parse_status_at(seq) in caption_of(widget, page, "parse")
                and handle_value(widget) == seq and scrubbed_seq(widget) == seq) \
                or time.monotonic() > deadline:
            return seq
        time.sleep(0.1)


def handle_value(widget: Any) -> int | None:
    """The slider's value in the page. The front end sends a moving slider's values one at
    a time, each after the kernel answered the last: until the header shows the handle's
    value, a value is still on its way, and a click sent now could be overtaken by it (on a
    loaded machine the ▶ below was: 7 + 1 = 8, then the late 7 arrived)."""
    now = widget.locator(".cl-scrubber .noUi-handle").first.get_attribute("aria-valuenow")
    return None if now is None else round(float(now))


def scrubbed_seq(widget: Any) -> int:
    text = widget.locator(".cl-head").inner_text()
    match = re.search(r"history: after event (\d+) of (\d+)", text)
    assert match, text
    return int(match.group(1))


def test_scrub_back_in_the_browser(lab: Lab, page: Any) -> None:
    from playwright.sync_api import expect

    run_all(page, lab, NOTEBOOK)

    first = page.locator(f"{PANEL} .cl-run").first
    first.scroll_into_view_if_needed()
    expect(first.locator(".cl-badge.cl-r-failed")).to_be_visible(timeout=30_000)
    assert caption_becomes(first, page, "parse", "✗ failed") == "✗ failed"

    # drag the slider's handle to a quarter of its track: an earlier event
    track = first.locator(".cl-scrubber .widget-slider .noUi-base, .cl-scrubber .slider")
    handle = first.locator(".cl-scrubber .noUi-handle").first
    hb = handle.bounding_box()
    tb = track.first.bounding_box()
    assert hb and tb
    page.mouse.move(hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2)
    page.mouse.down()
    page.mouse.move(tb["x"] + tb["width"] * 0.45, hb["y"] + hb["height"] / 2, steps=12)
    page.mouse.up()
    expect(first.locator(".cl-head")).to_contain_text("history: after event", timeout=10_000)
    seq = settled_seq(first, page)
    assert 0 < seq < 16
    assert parse_status_at(seq) in caption_of(first, page, "parse")
    assert caption_of(first, page, "charge").endswith("pending")
    # history is read-only: the toolbar's buttons are disabled
    assert first.locator(".cl-toolbar button:not([disabled])").count() == 0
    first.screenshot(path=str(ARTIFACTS / "e2e-06-scrubber-light.png"))

    # back with the keyboard (the focused slider handle takes arrow keys; noUiSlider moves
    # a keyboard step, about a tenth of the track)
    handle.focus()
    page.keyboard.press("ArrowLeft")
    expect(first.locator(".cl-head")).not_to_contain_text(f"after event {seq} of 16",
                                                          timeout=10_000)
    earlier = settled_seq(first, page)  # the slider may pass through a value on its way
    assert earlier < seq
    assert parse_status_at(earlier) in caption_of(first, page, "parse")
    # and exactly one event forward with the ▶ button
    first.locator(".cl-scrubber button").nth(1).click()
    expect(first.locator(".cl-head")).to_contain_text(f"after event {earlier + 1} of 16",
                                                      timeout=10_000)

    themed(page, "JupyterLab Dark")
    first.scroll_into_view_if_needed()
    first.screenshot(path=str(ARTIFACTS / "e2e-06-scrubber-dark.png"))
    themed(page, "JupyterLab Light")

    first.locator(".cl-scrubber button", has_text="Live").click()
    expect(first.locator(".cl-head")).not_to_contain_text("history:", timeout=10_000)
    assert caption_becomes(first, page, "parse", "✗ failed") == "✗ failed"
