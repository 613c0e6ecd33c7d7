"""LiveDag: one layout, then recolouring by CSS or by patching; both must match what a fresh
render of the same statuses draws."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from chainlab import Chain
from chainlab.render import (
    STATUS_STYLE,
    LiveDag,
    chain_svg,
    node_styles,
    run_badges,
    run_statuses,
    run_svg,
    status_line,
)
from chainlab.render import live as live_module
from chainlab.render import svg as svg_module
from chainlab.render.style import TIMES, dasharray

from .conftest import ALL_STEP_IDS, demo_chain, demo_toolbox
from .scenarios import Lab, run_saga

# a run's progress as a series of changes (every status appears at least once)
CHANGES: list[tuple[str, str, str | None]] = [
    ("fetch", "ready", None), ("fetch", "running", None), ("fetch", "retry_wait", f"{TIMES}1"),
    ("fetch", "running", f"{TIMES}2"), ("fetch", "succeeded", f"{TIMES}2"),
    ("parse", "running", None),
    ("parse", "succeeded", None), ("store", "running", None), ("store", "in_doubt", "timeout"),
    ("store", "succeeded", None), ("pay", "waiting_confirmation", None), ("move", "ready", None),
    ("pay", "rejected", None), ("notify", "skipped", "rejected"),
    ("notify/render", "skipped", None), ("notify/mail", "cancelled", None),
    ("move", "failed", None), ("done", "skipped", "upstream failed"),
    ("store", "compensating", None), ("fetch", "compensation_failed", None),
    ("store", "compensated", None), ("notify/deep", "pending", None),
]


def _states() -> list[tuple[dict[str, str], dict[str, str]]]:
    statuses: dict[str, str] = {}
    badges: dict[str, str] = {}
    out = []
    for step, status, badge in CHANGES:
        statuses[step] = status
        if badge:
            badges[step] = badge
        else:
            badges.pop(step, None)
        out.append((dict(statuses), dict(badges)))
    return out


def css_vars(css: str) -> dict[str, dict[str, str]]:
    """What a browser would apply: ``{element_id: {--cl-x: value}}``, later rules winning."""
    out: dict[str, dict[str, str]] = {}
    body = css.split(">", 1)[1].rsplit("</style>", 1)[0]
    for selectors, decls in re.findall(r'([^{}]+)\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}', body):
        values = dict(re.findall(r'(--cl-\w)\s*:\s*("(?:[^"\\]|\\.)*"|[^;]*)', decls))
        for sel in selectors.strip().split(","):
            assert sel.startswith("#"), sel
            out.setdefault(sel[1:], {}).update(values)
    return out


def css_unquote(value: str) -> str:
    assert value.startswith('"') and value.endswith('"')
    return re.sub(r"\\3c ", "<", value[1:-1]).replace('\\"', '"').replace("\\\\", "\\")


@pytest.fixture
def live(backend: str) -> LiveDag:
    return LiveDag(demo_chain(), demo_toolbox(), scope="cl-dag-p", backend=backend)


def test_patched_and_css_match_a_fresh_render_after_every_change(live: LiveDag,
                                                                 backend: str) -> None:
    seen = set()
    for statuses, badges in _states():
        fresh = node_styles(chain_svg(demo_chain(), demo_toolbox(), statuses, badges=badges,
                                      scope="cl-dag-p", backend=backend))
        patched = node_styles(live.patched_svg(statuses, badges))
        assert patched == fresh
        applied = css_vars(live.css(statuses, badges))
        for eid, want in fresh.items():
            got = applied[eid]
            assert (got["--cl-f"], got["--cl-s"], got["--cl-w"], got["--cl-d"]) == (
                want.fill, want.stroke, f"{want.width}px", want.dash), eid
            assert {got["--cl-t"]} == set(want.text_fills)
            assert css_unquote(got["--cl-c"]) == want.lines[-1]
        seen |= set(statuses.values())
    assert seen | {"pending"} == set(STATUS_STYLE)


def test_layout_runs_graphviz_once(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    calls: list[str] = []
    real_dot, real_wasm = svg_module._run_dot, svg_module._run_wasm

    def counting(name: str, real: Callable[[str], str]) -> Callable[[str], str]:
        def run(dot: str) -> str:
            calls.append(name)
            return real(dot)

        return run

    monkeypatch.setattr(svg_module, "_run_dot", counting("dot", real_dot))
    monkeypatch.setattr(svg_module, "_run_wasm", counting("wasm", real_wasm))
    monkeypatch.setenv("CHAINLAB_LAYOUT_CACHE", "off")
    svg_module._cache.clear()
    live_module._TEMPLATES.clear()
    live = LiveDag(demo_chain(), demo_toolbox(), backend=backend)
    for statuses, badges in _states():
        live.css(statuses, badges)
        live.patched_svg(statuses, badges)
    assert calls == [backend]
    # issue 38: a second view of the same chain (its own scope) reuses the layout
    again = LiveDag(demo_chain(), demo_toolbox(), backend=backend)
    assert calls == [backend] and again.scope != live.scope
    assert again.svg == live.svg.replace(live.scope, again.scope)
    statuses, badges = _states()[-1]
    assert again.patched_svg(statuses, badges) == \
        live.patched_svg(statuses, badges).replace(live.scope, again.scope)


def test_a_slow_layout_is_kept_on_disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                       backend: str) -> None:
    calls: list[str] = []
    real = svg_module._run_dot if backend == "dot" else svg_module._run_wasm

    def counting(dot: str) -> str:
        calls.append(dot)
        return real(dot)

    monkeypatch.setattr(svg_module, f"_run_{backend}", counting)
    monkeypatch.setattr(svg_module, "DISK_AFTER_S", 0.0)  # every layout counts as slow
    monkeypatch.setenv("CHAINLAB_LAYOUT_CACHE", str(tmp_path / "layouts"))
    for _ in range(2):  # as if in a new process each time: nothing in memory
        svg_module._cache.clear()
        live_module._TEMPLATES.clear()
        live = LiveDag(demo_chain(), demo_toolbox(), backend=backend)
    assert len(calls) == 1  # the second process read the layout from disk
    assert len(list((tmp_path / "layouts").glob("*.svg.gz"))) == 1
    assert "cl-shape" in live.svg
    # a damaged file is laid out again, never an error
    next((tmp_path / "layouts").glob("*.svg.gz")).write_bytes(b"not gzip")
    svg_module._cache.clear()
    live_module._TEMPLATES.clear()
    LiveDag(demo_chain(), demo_toolbox(), backend=backend)
    assert len(calls) == 2
    # CHAINLAB_LAYOUT_CACHE=off keeps none
    monkeypatch.setenv("CHAINLAB_LAYOUT_CACHE", "off")
    assert svg_module.layout_cache_dir() is None


def test_live_markup(live: LiveDag) -> None:
    root = ET.fromstring(live.svg)  # well-formed, foreignObject content included
    assert root.get("class") == "cl-dag cl-dag-p"
    assert live.step_ids == ALL_STEP_IDS
    ns = "{http://www.w3.org/2000/svg}"
    groups = {el.get("id"): el for el in root.iter(f"{ns}g")}
    for step_id in live.step_ids:
        g = groups[live.element_id(step_id)]
        assert len(list(g.iter(f"{ns}foreignObject"))) == 1
        assert [el.get("class") for el in g.iter() if el.get("class") == "cl-shape"]
    style = next(root.iter(f"{ns}style")).text or ""
    pending = STATUS_STYLE["pending"]
    assert f"var(--cl-f,{pending.fill})" in style and '"○ pending"' in style
    assert all(rule.startswith(".cl-dag-p ") for rule in re.findall(r"\}?([^{}]+)\{", style))
    assert "LONGEST" not in live.svg and "↯ compensation failed" not in live.svg.split(
        "cl-legend")[0]  # the reserved text is replaced by the CSS-driven box


def test_patched_svg_is_static(live: LiveDag) -> None:
    statuses, badges = _states()[-1]
    out = live.patched_svg(statuses, badges)
    ET.fromstring(out)
    assert "foreignObject" not in out and "<style" not in out and "var(--" not in out
    assert out == live.patched_svg(statuses, badges)
    assert live.patched_svg({}) == LiveDag(demo_chain(), demo_toolbox(), scope="cl-dag-p",
                                           backend=_backend(live)).patched_svg({})


def _backend(live: LiveDag) -> str:
    return "wasm" if 'xml:space="preserve"' in live.svg else "dot"


def test_missing_steps_are_pending_and_unknown_ids_ignored(live: LiveDag) -> None:
    css = css_vars(live.css({"fetch": "running", "not-a-step": "failed"}))
    assert css[live.element_id("fetch")]["--cl-c"] == '"▶ running"'
    assert css[live.element_id("done")]["--cl-c"] == '"○ pending"'
    assert "not-a-step" not in live.css({"not-a-step": "failed"})
    lines = node_styles(live.patched_svg({}))
    assert {s.lines[-1] for s in lines.values()} == {"○ pending"}


def test_unknown_status_is_refused(live: LiveDag) -> None:
    for fn in (live.css, live.patched_svg):
        with pytest.raises(ValueError, match="unknown step status 'done'"):
            fn({"fetch": "done"})


def test_badges_are_escaped(live: LiveDag) -> None:
    nasty = '"</style><script>alert(1)</script>\\'
    css = live.css({"fetch": "failed"}, {"fetch": nasty})
    assert css.count("</style>") == 1 and "<script" not in css
    assert css_unquote(css_vars(css)[live.element_id("fetch")]["--cl-c"]) == \
        status_line("failed", nasty)
    patched = live.patched_svg({"fetch": "failed"}, {"fetch": nasty})
    ET.fromstring(patched)
    assert node_styles(patched)[live.element_id("fetch")].lines[-1] == status_line(
        "failed", nasty)


def test_every_view_has_its_own_scope() -> None:
    a, b = LiveDag(demo_chain(), demo_toolbox()), LiveDag(demo_chain(), demo_toolbox())
    assert a.scope != b.scope and a.scope.startswith("cl-dag-")
    assert a.element_id("fetch").startswith(a.scope)
    assert a.html({"fetch": "running"}).endswith(a.svg)
    assert a.html({}).startswith(f'<style class="{a.scope}-status">')
    with pytest.raises(KeyError):
        a.element_id("nope")


def test_css_groups_steps_by_status(live: LiveDag) -> None:
    css = live.css(dict.fromkeys(ALL_STEP_IDS, "succeeded"), {"fetch": f"{TIMES}3"})
    rules = css.strip().splitlines()[1:-1]
    assert len(rules) == 2  # one rule for the status, one for the badge
    assert rules[0].count("#cl-dag-p-n-") == len(ALL_STEP_IDS)


@pytest.mark.anyio
async def test_for_run_matches_the_run_view(backend: str) -> None:
    lab = Lab()
    run = await run_saga(lab)
    live = LiveDag.for_run(run, backend=backend)
    fresh = node_styles(run_svg(run, backend=backend))
    patched = node_styles(live.patched_svg(run_statuses(run), run_badges(run)))
    assert {eid.split("-n-")[1]: s for eid, s in patched.items()} == \
        {eid.split("-n-")[1]: s for eid, s in fresh.items()}
    assert patched[live.element_id("pay")].lines == ("pay", "☐⚡ pay",
                                                     "↩ compensated · approved")


def test_throttled_redraws_keep_the_latest_state(live: LiveDag) -> None:
    from chainlab.render import Throttle
    from chainlab.render.throttle import ManualTimers

    timers = ManualTimers()
    shown: list[str] = []
    redraw: Throttle[dict[str, str]] = Throttle(lambda st: shown.append(live.css(st)), 10,
                                                clock=timers.now,
                      call_later=timers.call_later)
    states = _states()
    for statuses, _ in states:  # a burst of events at one instant
        redraw(statuses)
    timers.advance(1.0)
    assert len(shown) == 2 and shown[-1] == live.css(states[-1][0])


def test_width_and_dash_values_are_graphviz_equivalents() -> None:
    assert {dasharray(s.line) for s in STATUS_STYLE.values()} == {"none", "5,2", "1,5"}


@pytest.mark.parametrize(("status", "badge"), [("skipped", "upstream failed"),
                                               ("succeeded", "approved")])
def test_a_live_node_is_wide_enough_for_its_usual_badged_line(backend: str, status: str,
                                                              badge: str) -> None:
    """Issue 29 item 9: the live DAG cut "⇥ skipped · upstream failed" to "upstream…" and
    "✓ succeeded · approved" to "approv…": its nodes were laid out for the longest bare
    caption only. Each status box is now at least as wide as the shape of a fresh layout that
    shows that very line (the same Graphviz metrics), less the inset on both sides."""
    from chainlab.render.live import _INSET, _x_span

    chain = Chain.from_dict({"name": "w", "steps": [
        {"id": "a", "tool": "fetch"}, {"id": "b", "tool": "pay", "depends_on": ["a"]}]})
    live = LiveDag(chain, demo_toolbox(), scope="cl-dag-w", backend=backend)
    fresh = chain_svg(chain, demo_toolbox(), statuses={"a": status, "b": status},
                      badges={"a": badge, "b": badge}, scope="cl-dag-w", legend=False,
                      backend=backend)
    for step_id in ("a", "b"):
        gid = live.element_id(step_id)
        box = re.search(rf'id="{gid}"[\s\S]*?<foreignObject[^>]* width="([\d.]+)"', live.svg)
        shape = re.search(rf'id="{gid}"[\s\S]*?(<(?:polygon|path)[^>]*>)', fresh)
        assert box and shape, step_id
        span = _x_span(shape[1])
        assert span is not None
        needed = span[1] - span[0] - 2 * _INSET
        assert float(box[1]) >= needed - 0.5, (step_id, float(box[1]), needed)


def test_a_chain_of_the_same_content_is_drawn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: a widget opened again on a stored run (a new Chain object, the same
    content) reuses the drawing; a tool whose look changed (side effects) is drawn again."""
    from chainlab import Toolbox

    drawn: list[str] = []
    real = live_module.draw_chain

    def counting(chain: Chain, *args: object, **kwargs: object) -> object:
        drawn.append(chain.name)
        return real(chain, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(live_module, "draw_chain", counting)
    live_module._DRAWN.clear()
    data = {"name": "same", "steps": [{"id": "a", "tool": "t"},
                                      {"id": "b", "tool": "t", "depends_on": ["a"]}]}
    tb = Toolbox("look")
    tb.tool(lambda: 1, name="t")
    first = LiveDag(Chain.from_dict(data), tb)
    again = LiveDag(Chain.from_dict(data), tb)  # another object, the same content
    assert drawn == ["same"] and again.svg == first.svg.replace(first.scope, again.scope)
    other = Toolbox("look")
    other.tool(lambda: 1, name="t", side_effects=True)  # a square box with ⚡ now
    changed = LiveDag(Chain.from_dict(data), other)
    assert drawn == ["same", "same"] and "⚡" in changed.svg and "⚡" not in first.svg
