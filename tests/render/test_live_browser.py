"""The live view in a real browser (headless Chromium): the CSS block recolours the nodes and
writes their status lines, in light and dark pages; the static patched SVG shows the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chainlab.render import STATUS_STYLE, LiveDag
from chainlab.render.style import TIMES

from .conftest import demo_chain, demo_toolbox

pytestmark = pytest.mark.e2e

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
STATUSES = {"fetch": "succeeded", "parse": "running", "store": "in_doubt",
            "notify": "compensating", "notify/mail": "failed"}


@pytest.fixture(scope="module")
def page():  # type: ignore[no-untyped-def]
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium executable (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        yield browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
        browser.close()


def _computed(page, live: LiveDag, step_id: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.evaluate("""(id) => {
        const g = document.getElementById(id);
        const shape = g.querySelector('.cl-shape');
        const text = g.querySelector('text');
        const box = g.querySelector('.cl-st');
        const cs = getComputedStyle(shape);
        return {fill: cs.fill, stroke: cs.stroke, width: cs.strokeWidth,
                text: getComputedStyle(text).fill,
                caption: getComputedStyle(box, '::after').content,
                visible: box.getBoundingClientRect().width > 0};
    }""", live.element_id(step_id))


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


@pytest.mark.parametrize("background", ["#ffffff", "#111111"])
def test_css_update_recolours_in_the_browser(page, tmp_path: Path,  # type: ignore[no-untyped-def]
                                             background: str) -> None:
    live = LiveDag(demo_chain(), demo_toolbox())
    html = tmp_path / "live.html"
    html.write_text(f'<html><body style="background:{background}">'
                    f'<div id="style">{live.css({})}</div>{live.svg}</body></html>', "utf-8")
    page.goto(html.as_uri())
    before = _computed(page, live, "fetch")
    assert before["caption"] == '"○ pending"' and before["fill"] == _rgb(
        STATUS_STYLE["pending"].fill)
    # what a widget does on each update: replace the small style block only
    page.evaluate("(css) => { document.getElementById('style').innerHTML = css; }",
                  live.css(STATUSES, {"fetch": f"{TIMES}3"}))
    for step_id, status in STATUSES.items():
        st = STATUS_STYLE[status]
        got = _computed(page, live, step_id)
        assert got["fill"] == _rgb(st.fill) and got["stroke"] == _rgb(st.stroke), step_id
        assert got["text"] == _rgb(st.text) and got["width"] == f"{st.width:g}px"
        assert got["visible"]
    assert _computed(page, live, "fetch")["caption"] == f'"✓ succeeded · {TIMES}3"'
    assert _computed(page, live, "done")["caption"] == '"○ pending"'
    page.screenshot(path=str(tmp_path / "live.png"), full_page=True)


def test_patched_svg_shows_in_an_img(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    live = LiveDag(demo_chain(), demo_toolbox())
    (tmp_path / "dag.svg").write_text(live.patched_svg(STATUSES), "utf-8")
    (tmp_path / "page.html").write_text('<img id="dag" src="dag.svg">', "utf-8")
    page.goto((tmp_path / "page.html").as_uri())
    size = page.evaluate("() => { const i = document.getElementById('dag');"
                         " return [i.complete, i.naturalWidth, i.naturalHeight]; }")
    assert size[0] and size[1] > 300 and size[2] > 300
