"""Issue 18, item 2: every Run display carries a static fallback, replaced when the run
settles, so nbconvert, GitHub and a reopened notebook show the last state."""

from __future__ import annotations

import re

import pytest

from chainlab.render.display import run_html, run_mimebundle

from .conftest import Harness

pytestmark = pytest.mark.anyio

WIDGET = "application/vnd.jupyter.widget-view+json"


def statuses_in(html: str) -> list[str]:
    """The status column of the static table, in step order."""
    rows = html.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]
    return [row.split("<td>")[3].split("</td>")[0] for row in rows]


async def test_the_widget_output_is_replaced_when_the_run_settles(shop: Harness) -> None:
    await shop.ok("run = %chain run trip\nrun")  # the magic shows it; `run` adds nothing
    def shown() -> list[dict]:  # (not the picture's updates: the run may settle meanwhile)
        return [o for o in shop.pub.outputs if not o.get("update")]

    view, picture = shown()  # the widget view, then its picture in its own output
    await shop.ok("run")  # shown again in a later cell: the same widget, same display id
    _, _, view2, again = shown()
    assert WIDGET in view["data"] and "text/html" not in view["data"]
    assert view2["data"][WIDGET] == view["data"][WIDGET]
    display_id = picture["transient"]["display_id"]
    assert again["transient"]["display_id"] == display_id  # one widget, updated everywhere
    assert WIDGET not in picture["data"] and not picture.get("update")
    assert 'class="cl-static-run"' in picture["data"]["text/html"]
    # (the run is driven on its own loop: it may have settled already; the picture was
    # replaced when it did, and once more when the next cell started)
    await shop.ok("r = await run.wait()\nimport asyncio\nawait asyncio.sleep(0)")
    updates = [o for o in shop.pub.outputs if o.get("update")]
    assert updates and all(u["data"] == updates[0]["data"] for u in updates)
    update = updates[-1]
    assert update["transient"]["display_id"] == display_id
    assert WIDGET not in update["data"]  # only the picture is replaced, never the live view
    html = update["data"]["text/html"]
    assert "run <span class=\"cl-run-status\">succeeded</span>" in html
    assert statuses_in(html) == ["succeeded"] * len(shop.ns["run"].steps)
    assert "<svg" in html  # the DAG, statuses baked in
    assert "cl-static-next" not in html  # the run ended: nothing to act on
    # the same words as the first picture's: nbval keeps the first (it ignores updates)
    assert update["data"]["text/plain"] == picture["data"]["text/plain"] == (
        f"picture of run {shop.ns['run'].run_id} (chain 'trip')")


async def test_a_waiting_run_s_picture_says_how_to_act_on_it(shop: Harness) -> None:
    """Exported while it waits for a person, the picture says what waits and the commands
    (issue 29 item 7)."""
    await shop.ok("run = %chain run shop --db w.db\nr = await run.wait()")
    run = shop.ns["run"]
    waiting = [s for s, st in run.steps.items() if str(st.status) == "waiting_confirmation"]
    assert waiting == ["out"] and str(run.status) == "suspended"
    await shop.ok("from chainlab.jupyter import widget\nwidget(run)._throttle.flush()")
    html = [o for o in shop.pub.outputs if o.get("update")][-1]["data"]["text/html"]
    rid = run.run_id
    assert f"<code>{waiting[0]}</code> waits for approval" in html
    assert f"<code>%chain resume {rid}</code>" in html
    assert f"<code>%chain approve {rid} {waiting[0]}</code>" in html
    assert f"<code>%chain show {rid}</code>" in html


async def test_a_bare_run_without_the_widget_has_the_same_static_html(shop: Harness) -> None:
    await shop.ok("run = %chain run trip\nr = await run.wait()")
    run = shop.ns["run"]
    bundle = run_mimebundle(run)
    assert bundle["text/html"] == run_html(run, svg=bundle["image/svg+xml"], svg_titled=True)
    assert statuses_in(bundle["text/html"]) == [str(st.status) for st in run.steps.values()]
    # the title once: the SVG carries "trip · run succeeded", so no title above it (issue 40)
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<title>.*?</title>", " ", bundle["text/html"]))
    assert text.count("run succeeded") == 1, text


async def test_the_widgets_picture_says_its_title_once(shop: Harness) -> None:
    """Issue 40: an export printed the picture's title twice, above the DAG and in it."""
    await shop.ok("run = %chain run trip\nr = await run.wait()")
    from chainlab.jupyter import widget

    picture = widget(shop.ns["run"]).picture_bundle()["text/html"]
    shown = re.sub(r"<title>.*?</title>", " ", picture)  # (tooltips are not shown)
    text = re.sub(r"<[^>]+>", " ", shown)
    assert len(re.findall(r"\btrip\b", text)) == 1, text  # the chain's name, once
    assert 'run <span class="cl-run-status">succeeded</span>' in picture


async def test_the_static_legend_lists_only_the_statuses_present(shop: Harness) -> None:
    from chainlab.render.style import STATUS_STYLE

    await shop.ok("run = %chain run trip\nr = await run.wait()")
    svg = run_mimebundle(shop.ns["run"])["image/svg+xml"]
    legend = svg.split('class="cl-legend"')[1]
    shown = [name for name, style in STATUS_STYLE.items() if f">{style.caption}<" in legend]
    assert shown == ["succeeded"]
