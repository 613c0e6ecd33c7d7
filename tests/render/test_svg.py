"""SVG through Graphviz: both backends (system dot and the WebAssembly build), cleaning,
determinism, the legend, and the error when neither backend exists."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from chainlab import Chain, MissingExtraError
from chainlab.render import (
    STATUS_STYLE,
    GraphvizError,
    GraphvizUnavailable,
    chain_dot,
    chain_mimebundle,
    chain_svg,
    node_styles,
    to_svg,
)
from chainlab.render import svg as svg_module
from chainlab.render.dot import draw_chain
from chainlab.render.grid import GRID_FROM
from chainlab.render.style import FONT, dasharray

from .conftest import ALL_STEP_IDS, demo_chain, demo_toolbox, needs_backend

MID_RUN = {"fetch": "succeeded", "parse": "succeeded", "store": "in_doubt",
           "pay": "waiting_confirmation", "move": "retry_wait", "notify": "running",
           "notify/render": "succeeded", "notify/mail": "failed", "notify/deep": "skipped",
           "notify/deep/hello": "skipped", "done": "cancelled"}


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_svg_is_clean_embeddable_and_has_every_step(backend: str) -> None:
    drawing = draw_chain(demo_chain(), demo_toolbox(), MID_RUN, scope="cl-dag-t")
    svg = to_svg(drawing.dot, backend=backend)  # type: ignore[arg-type]
    assert svg.startswith('<svg class="cl-dag cl-dag-t" ')
    assert "<?xml" not in svg and "<!--" not in svg and "DOCTYPE" not in svg
    assert "&#45;" not in svg and f'font-family="{FONT}"' in svg
    root = _parse(svg)  # well-formed XML
    ids = {el.get("id") for el in root.iter()}
    assert set(drawing.steps.values()) <= ids
    styles = node_styles(svg)
    assert set(styles) == set(drawing.steps.values())
    for step_id, status in MID_RUN.items():
        st = STATUS_STYLE[status]
        got = styles[drawing.steps[step_id]]
        assert (got.fill, got.stroke, got.width, got.dash) == (
            st.fill, st.stroke, f"{st.width:g}", dasharray(st.line)), step_id
        assert set(got.text_fills) == {st.text} and got.lines[-1] == st.caption


def test_same_dot_same_bytes(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINLAB_LAYOUT_CACHE", "off")  # each render a real one
    dot_a = chain_dot(demo_chain(), demo_toolbox(), MID_RUN)
    dot_b = chain_dot(demo_chain(), demo_toolbox())
    first = to_svg(dot_a, backend=backend)  # type: ignore[arg-type]
    svg_module._cache.clear()  # render again for real, after another graph
    to_svg(dot_b, backend=backend)  # type: ignore[arg-type]
    svg_module._cache.clear()
    assert to_svg(dot_a, backend=backend) == first  # type: ignore[arg-type]


def test_backends_agree_on_everything_but_geometry() -> None:
    needs_backend("dot")
    needs_backend("wasm")
    dot = chain_dot(demo_chain(), demo_toolbox(), MID_RUN)
    by_dot, by_wasm = to_svg(dot, backend="dot"), to_svg(dot, backend="wasm")
    assert node_styles(by_dot) == node_styles(by_wasm)
    assert by_dot != by_wasm  # coordinates and sizes differ (Graphviz 2.43 vs 16.x)


def test_legend_shows_every_status_and_the_kinds_in_use(backend: str) -> None:
    svg = chain_svg(demo_chain(), demo_toolbox(), MID_RUN, backend=backend)
    root = _parse(svg)
    legend = next(el for el in root.iter() if el.get("class") == "cl-legend")
    texts = [t.text for t in legend.iter("{http://www.w3.org/2000/svg}text")]
    for style in STATUS_STYLE.values():
        assert style.caption in texts
    for label in ("no side effects", "⚡= idempotent effects", "☐ needs approval",
                  "⇢ sub-chain", "◇ has a condition", "depends_on", "data reference"):
        assert label in texts
    assert "⚡ side effects" in texts  # send_email inside the sub-chain
    assert "⚠ plan problem" not in texts
    plain = chain_svg(Chain.from_dict({"name": "p", "steps": [{"id": "a", "tool": "t"}]}),
                      backend=backend)
    plain_texts = [t.text for t in _parse(plain).iter("{http://www.w3.org/2000/svg}text")]
    assert "✓ succeeded" not in plain_texts and "no side effects" in plain_texts
    assert "depends_on" not in plain_texts  # no edges, no edge legend


def test_legend_goes_beside_a_tall_graph_and_below_a_wide_one(backend: str) -> None:
    tall = Chain.from_dict({"name": "tall", "steps": [
        {"id": f"s{i}", "tool": "t", "depends_on": [f"s{i - 1}"] if i else []}
        for i in range(12)]})
    # (fewer than GRID_FROM independent steps: more are drawn as a grid, not a row)
    wide = Chain.from_dict({"name": "wide", "steps": [{"id": f"s{i}", "tool": "t"}
                                                      for i in range(GRID_FROM - 1)]})
    for chain, where in ((tall, "right"), (wide, "below")):
        svg = chain_svg(chain, statuses={}, backend=backend)
        translate = svg.split('<g transform="translate(')[-1].split(")")[0]
        x, y = (float(v) for v in translate.split(","))
        assert (x > y) == (where == "right"), (where, x, y)


def test_bad_dot_is_a_graphviz_error(backend: str) -> None:
    with pytest.raises(GraphvizError) as info:
        to_svg("digraph { a -> ", backend=backend)  # type: ignore[arg-type]
    assert info.value.backend == backend


def test_neither_backend_names_both_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_module, "_which_dot", lambda: None)
    monkeypatch.setattr(svg_module, "_wasm_available", lambda: False)
    monkeypatch.delenv("CHAINLAB_GRAPHVIZ", raising=False)
    dot = chain_dot(demo_chain(), demo_toolbox())  # DOT text still works
    with pytest.raises(GraphvizUnavailable) as info:
        to_svg(dot)
    message = str(info.value)
    assert "apt-get install graphviz" in message and 'pip install "chainlab[jupyter]"' in message
    assert isinstance(info.value, MissingExtraError) and isinstance(info.value, ImportError)
    assert info.value.extra == "jupyter"
    bundle = chain_mimebundle(demo_chain(), demo_toolbox())
    assert set(bundle) == {"text/plain"} and "apt-get install graphviz" in bundle["text/plain"]
    with pytest.raises(GraphvizUnavailable, match="no 'dot' on PATH"):
        to_svg(dot, backend="dot")


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINLAB_GRAPHVIZ", "gnuplot")
    with pytest.raises(ValueError, match="CHAINLAB_GRAPHVIZ='gnuplot'"):
        to_svg("digraph {}")
    monkeypatch.setenv("CHAINLAB_GRAPHVIZ", "wasm")
    monkeypatch.setattr(svg_module, "_wasm_available", lambda: False)
    with pytest.raises(GraphvizUnavailable, match="backend 'wasm' asked for"):
        to_svg("digraph {}")
    with pytest.raises(ValueError, match="backend='png'"):
        to_svg("digraph {}", backend="png")  # type: ignore[arg-type]


def test_auto_prefers_dot_then_wasm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAINLAB_GRAPHVIZ", raising=False)
    monkeypatch.setattr(svg_module, "_which_dot", lambda: "/usr/bin/dot")
    monkeypatch.setattr(svg_module, "_wasm_available", lambda: True)
    assert svg_module._choose("auto") == "dot"
    monkeypatch.setattr(svg_module, "_which_dot", lambda: None)
    assert svg_module._choose("auto") == "wasm"


def test_steps_ids_cover_subchains() -> None:
    assert list(draw_chain(demo_chain(), demo_toolbox()).steps) == ALL_STEP_IDS
