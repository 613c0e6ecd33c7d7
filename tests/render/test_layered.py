"""Issue 49 item 4: chainlab's own layered layout (chainlab.render.layered), the SVG it is
drawn as (chainlab.render.scene_svg) and who lays a drawing out (chainlab.render.layout).

Counted, never timed: every box placed, no two boxes of a layer overlap, every edge goes
down, a long chain stays a column; and the drawing looks like Graphviz's: the same nodes
with the same outlines, paint, text and status lines, the same edges, dashed where
Graphviz's are."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from itertools import pairwise

import pytest

from chainlab import Chain, Toolbox
from chainlab.events.status import StepStatus
from chainlab.render import LiveDag, chain_mimebundle, chain_svg, node_styles
from chainlab.render import svg as svg_module
from chainlab.render.dot import Drawing, draw_chain
from chainlab.render.layered import Placement, Spacing, layered
from chainlab.render.layout import LAYERED_FROM, layout_of, layout_svg
from chainlab.render.markup import SHAPE, step_groups
from chainlab.render.metrics import text_width
from chainlab.render.style import TIMES

from .conftest import demo_chain, demo_toolbox, needs_backend


# ----------------------------------------------------------------------------- graphs
def chain_with_skips(n: int, skip: int = 10) -> list[tuple[int, int]]:
    """bench_history's shape: a chain, every ``skip``-th step also depending ``skip`` back."""
    out = [(i - 1, i) for i in range(1, n)]
    out += [(i - skip, i) for i in range(skip, n, skip)]
    return out


def random_dag(n: int, seed: int, width: int = 6) -> list[tuple[int, int]]:
    """Layers of about ``width`` boxes, each box fed by 1-3 boxes of earlier layers."""
    rng = random.Random(seed)
    out = []
    for i in range(width, n):
        for j in rng.sample(range(max(0, i - 3 * width), i - i % width), k=rng.randint(1, 3)):
            out.append((j, i))
    return sorted(set(out))


def sizes_for(n: int, seed: int = 0) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(rng.choice([54.0, 90.0, 157.0, 235.0]), rng.choice([21.6, 41.0, 62.5]))
            for _ in range(n)]


def check_placement(p: Placement, sizes: list[tuple[float, float]],
                    edges: list[tuple[int, int]]) -> None:
    """What every layout must hold (each a count of failures that must be zero)."""
    spacing = Spacing()
    n = len(sizes)
    assert len(p.x) == len(p.y) == len(p.layer) == n  # every box placed
    boxes = [(p.x[i] - w / 2, p.y[i] - h / 2, p.x[i] + w / 2, p.y[i] + h / 2)
             for i, (w, h) in enumerate(sizes)]
    assert all(b[0] >= -0.01 and b[1] >= -0.01 and b[2] <= p.width + 0.01
               and b[3] <= p.height + 0.01 for b in boxes)  # inside the picture
    by_layer: dict[int, list[int]] = {}
    for i, k in enumerate(p.layer):
        by_layer.setdefault(k, []).append(i)
    overlaps = 0
    for members in by_layer.values():
        members.sort(key=lambda i: p.x[i])
        for a, b in pairwise(members):
            overlaps += boxes[b][0] - boxes[a][2] < spacing.node - 0.01
    assert overlaps == 0  # no two boxes of a layer overlap (nor come closer than nodesep)
    upward = [(s, t) for s, t in edges if not (p.layer[t] > p.layer[s]
                                                and boxes[t][1] > boxes[s][3])]
    assert upward == []  # every edge goes down: its target's top below its source's bottom
    assert len(p.routes) == len(edges)
    for (s, t), route in zip(edges, p.routes, strict=True):
        assert abs(route[0][1] - boxes[s][3]) < 0.01 and abs(route[-1][1] - boxes[t][1]) < 0.01
        assert boxes[s][0] <= route[0][0] <= boxes[s][2]  # leaves from its source's bottom
        assert boxes[t][0] <= route[-1][0] <= boxes[t][2]  # enters its target's top
        ys = [y for _, y, _ in route]
        assert ys == sorted(ys)  # never back up


def crossings_of(p: Placement, edges: list[tuple[int, int]]) -> int:
    """Crossings between edges joining adjacent layers, counted from the places."""
    spans = [(p.layer[s], p.x[s], p.x[t]) for s, t in edges if p.layer[t] == p.layer[s] + 1]
    return sum(1 for i, (k, a, b) in enumerate(spans) for (k2, c, d) in spans[i + 1:]
               if k == k2 and (a - c) * (b - d) < 0)


# ----------------------------------------------------------------------------- the layout
@pytest.mark.parametrize("seed", range(6))
def test_random_dags_hold_every_rule(seed: int) -> None:
    edges = random_dag(120, seed)
    sizes = sizes_for(120, seed)
    labels = [(60.0, 8.8) if (s + t) % 2 else None for s, t in edges]
    p = layered(sizes, edges, labels)
    assert p is not None
    check_placement(p, sizes, edges)
    for (s, t), label, at in zip(edges, labels, p.labels, strict=True):
        assert (at is None) == (label is None)
        if at is None or label is None:
            continue
        left, mid = at  # a label lies between its edge's ends, clear of every box
        assert p.y[s] < mid < p.y[t]
        hits = [i for i, (w, h) in enumerate(sizes)
                if abs(p.y[i] - mid) < h / 2 + label[1] / 2
                and p.x[i] - w / 2 < left + label[0] and left < p.x[i] + w / 2]
        assert hits == []


def test_a_long_chain_stays_one_column() -> None:
    """bench_history's 3,332 steps: the chain is a column and its long edges run beside it;
    nothing drifts sideways however long the chain (the picture is as wide as a box plus
    the long edges' lane)."""
    n = 3332
    edges = chain_with_skips(n)
    sizes = [(157.0, 41.0)] * n
    p = layered(sizes, edges)
    assert p is not None
    check_placement(p, sizes, edges)
    assert p.layer == list(range(n))  # one step a layer
    assert p.width < 157 + 3 * Spacing().node
    assert max(p.x) - min(p.x) < 1.0  # the column is straight
    assert p.crossings == 0


def test_barycenter_sweeps_undo_crossings() -> None:
    # two parents, their children declared crosswise, then a second level crosswise again
    edges = [(0, 3), (1, 2), (2, 5), (3, 4), (0, 6), (1, 7)]
    sizes = [(54.0, 21.6)] * 8
    p = layered(sizes, edges)
    assert p is not None
    check_placement(p, sizes, edges)
    assert p.crossings == crossings_of(p, edges) == 0


@pytest.mark.parametrize("seed", range(4))
def test_the_crossings_reported_are_the_crossings_drawn(seed: int) -> None:
    # layers of 8 boxes, each box fed by 2 of the layer above: no waypoints, so every
    # crossing is between two edges of adjacent layers, where the count is exact
    rng = random.Random(seed)
    edges = sorted({(8 * (k - 1) + j, 8 * k + i) for k in range(1, 6) for i in range(8)
                    for j in rng.sample(range(8), 2)})
    p = layered([(54.0, 21.6)] * 48, edges)
    assert p is not None
    check_placement(p, [(54.0, 21.6)] * 48, edges)
    assert p.crossings == crossings_of(p, edges)
    declared = sum(1 for i, (s, t) in enumerate(edges) for (u, v) in edges[i + 1:]
                   if s // 8 == u // 8 and (s - u) * (t - v) < 0)
    assert p.crossings <= declared  # never worse than the order the boxes were given in


@pytest.mark.parametrize("edges", [[(0, 1), (1, 2), (2, 0)], [(0, 0)], [(0, 1), (1, 0)]])
def test_a_cycle_has_no_layering(edges: list[tuple[int, int]]) -> None:
    assert layered([(54.0, 21.6)] * 3, edges) is None


def test_edges_of_one_side_are_spread_in_order() -> None:
    # one source, five targets: five ports on its bottom, left to right as the targets lie
    edges = [(0, i) for i in range(1, 6)]
    p = layered([(157.0, 41.0)] * 6, edges)
    assert p is not None
    starts = [route[0][0] for route in p.routes]
    ends = [p.x[t] for _, t in edges]
    assert len(set(starts)) == 5
    assert sorted(range(5), key=starts.__getitem__) == sorted(range(5), key=ends.__getitem__)


def test_sources_with_more_edges_out_sit_just_above_their_targets() -> None:
    # a root feeding a node far down: it is drawn one layer above it, not at the top
    edges = [(0, 1), (1, 2), (2, 3), (4, 3)]
    p = layered([(54.0, 21.6)] * 5, edges)
    assert p is not None
    assert p.layer == [0, 1, 2, 3, 2]


def test_text_widths_are_dejavu_sans() -> None:
    assert text_width("○ pending", 10) == pytest.approx(52.55, abs=0.01)
    assert text_width("", 10) == 0
    assert text_width("漢", 10) == pytest.approx(10.0)  # a wide letter: a whole em
    assert text_width("\u0301", 10) == 0  # a combining mark adds nothing
    assert text_width("x" * 10, 20) == pytest.approx(2 * text_width("x" * 10, 10))


# ----------------------------------------------------------------------------- the drawing
def toolbox() -> Toolbox:
    tb = Toolbox("kinds")
    tb.tool(lambda x=0: x, name="plain")
    tb.tool(lambda x=0: x, name="effect", side_effects=True)
    tb.tool(lambda x=0: x, name="idem", side_effects=True, idempotent=True)
    tb.tool(lambda x=0: x, name="approve", side_effects=True, requires_confirmation=True)
    return tb


def mixed_chain(n: int, seed: int = 5) -> Chain:
    """Every node kind (plain, effect, idempotent, confirmation, a condition, an unknown
    sub-chain's folder), explicit and data edges."""
    rng = random.Random(seed)
    steps: list[dict[str, object]] = []
    for i in range(n):
        tool = rng.choice(["plain", "plain", "effect", "idem", "approve", "chain:elsewhere"])
        earlier = [f"s{j}" for j in range(max(0, i - 8), i)]
        deps = rng.sample(earlier, k=min(len(earlier), rng.randint(1, 2))) if earlier else []
        step: dict[str, object] = {"id": f"s{i}", "tool": tool, "depends_on": deps[:1]}
        if len(deps) > 1:
            step["args"] = {"x": f"{{{{ steps.{deps[1]}.output }}}}"}
        if i % 7 == 3:
            step["when"] = f"{{{{ steps.{deps[0]}.output }}}}" if deps else "true"
        steps.append(step)
    return Chain.from_dict({"name": f"mixed-{n}", "steps": steps})


def every_status(chain: Chain) -> dict[str, str]:
    values = list(StepStatus)
    return {s.id: values[i % len(values)] for i, s in enumerate(chain.steps)}


def outlines(svg: str) -> dict[str, tuple[str, int]]:
    """Each step's outline: its element (path or polygon) and, for a polygon, its corners."""
    out = {}
    for g in step_groups(svg):
        assert g.shape is not None
        tag = svg[g.shape[0]:g.shape[1]]
        points = re.search(r' points="([^"]*)"', tag)
        out[g.element_id] = (tag[1:tag.index(" ")],
                             len(points[1].split()) if points else 0)
    return out


def edge_looks(svg: str) -> list[tuple[bool, str | None]]:
    """Each edge, in order: dashed or not, and its label."""
    found = []
    for m in re.finditer(r'<g id="[^"]+" class="edge">(.*?)</g>', svg, re.S):
        label = re.search(r"<text[^>]*>([^<]*)</text>", m[1])
        found.append(("stroke-dasharray" in m[1].split("<polygon")[0],
                      label[1] if label else None))
    return found


@pytest.fixture
def drawing() -> Drawing:
    chain = mixed_chain(60)
    return draw_chain(chain, toolbox(), every_status(chain),
                      badges={"s4": f"{TIMES}2", "s9": "approved"})


def test_both_layouts_draw_the_same_picture(drawing: Drawing) -> None:
    """What a person compares: every node with the same outline, fill, border, border
    pattern, text colour and lines; every edge, dashed where Graphviz's is, with its
    label. Only the places differ."""
    needs_backend("dot")
    ours = layout_svg(drawing, layout="layered")
    theirs = layout_svg(drawing, layout="graphviz", backend="dot")
    assert node_styles(ours) == node_styles(theirs)
    assert len(node_styles(ours)) == 60
    assert outlines(ours) == outlines(theirs)
    assert sorted(map(str, edge_looks(ours))) == sorted(map(str, edge_looks(theirs)))
    assert {k for k, _ in outlines(ours).values()} == {"path", "polygon"}
    assert {n for _, n in outlines(ours).values()} >= {0, 5, 8, 9}  # box, folder, octagon


def test_the_live_view_of_a_large_chain_needs_no_graphviz(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Past LAYERED_FROM steps Graphviz is not asked; the live view patches statuses on
    chainlab's layout exactly as a fresh drawing of them shows."""
    def no_graphviz(*_: object, **__: object) -> tuple[str, str]:
        raise AssertionError("Graphviz was asked to lay out a large chain")

    monkeypatch.setattr(svg_module, "render_svg", no_graphviz)
    chain, tb = mixed_chain(LAYERED_FROM + 20), toolbox()
    live = LiveDag(chain, tb, legend=True)
    statuses = every_status(chain)
    badges = {"s1": f"{TIMES}3", "s2": "upstream failed"}
    fresh = node_styles(chain_svg(chain, tb, statuses, badges=badges))
    patched = node_styles(live.patched_svg(statuses, badges))
    assert patched.keys() == {live.element_id(s.id) for s in chain.steps}
    for step in chain.steps:  # the same look (the fresh one is laid out for its own lines)
        a, b = fresh[chain_svg_scope(fresh, step.id)], patched[live.element_id(step.id)]
        assert (a.fill, a.stroke, a.width, a.dash, a.lines) == (b.fill, b.stroke, b.width,
                                                                b.dash, b.lines)
    assert live.svg.count('class="cl-fo"') == len(chain.steps)  # a status box per node
    assert "cl-legend" in live.patched_svg({})


def chain_svg_scope(styles: Mapping[str, object], step_id: str) -> str:
    found = [k for k in styles if k.endswith(f"-n-{step_id}")]
    assert len(found) == 1, found
    return found[0]


def test_a_chains_own_display_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_module, "render_svg", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("Graphviz asked")))
    bundle = chain_mimebundle(mixed_chain(LAYERED_FROM), toolbox())
    svg = bundle["image/svg+xml"]
    assert svg.count('class="node cl-step"') == LAYERED_FROM
    assert "cl-legend" in svg


def fan(n: int) -> Chain:
    steps: list[dict[str, object]] = [{"id": "start", "tool": "plain"}]
    steps += [{"id": f"s{i:04d}", "tool": "plain", "depends_on": ["start"]} for i in range(n)]
    steps += [{"id": "end", "tool": "plain", "depends_on": [f"s{i:04d}" for i in range(n)]}]
    return Chain.from_dict({"name": "fan", "steps": steps})


def test_a_fan_out_is_a_grid_in_its_frame() -> None:
    drawing = draw_chain(fan(1000), toolbox(), {})
    assert layout_of(drawing) == "layered"
    svg = layout_svg(drawing)
    frame = re.search(r'<g id="[^"]*cluster_grid_s0000" class="cluster">.*?d="([^"]*)".*?'
                      r">([^<]*)</text>", svg, re.S)
    assert frame is not None
    assert frame[2] == "1,000 steps with the same inputs and outputs: s0000 … s0999"
    xs = [float(v) for v in re.findall(r"([\d.]+),[\d.]+", frame[1])]
    ys = [float(v) for v in re.findall(r"[\d.]+,([\d.]+)", frame[1])]
    centres = {m[1]: (float(m[2]), float(m[3])) for m in re.finditer(
        r'-n-([\w-]+)" class="node[^"]*">.*?<text x="([\d.]+)" y="([\d.]+)"', svg, re.S)}
    assert len(centres) == 1002
    inside = [s for s, (x, y) in centres.items() if s.startswith("s")
              and min(xs) < x < max(xs) and min(ys) < y < max(ys)]
    assert len(inside) == 1000  # every member in the frame
    assert centres["start"][1] < min(ys) and centres["end"][1] > max(ys)
    assert svg.count('class="edge"') == 2  # one edge in, one out
    width, height = (float(v) for v in re.search(
        r'<svg[^>]* width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())  # type: ignore[union-attr]
    assert width < 4000 and 0.3 < height / width < 3  # fits one picture


def test_who_lays_out_what(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAINLAB_LAYOUT", raising=False)
    tb = toolbox()
    small = draw_chain(mixed_chain(20), tb)
    large = draw_chain(mixed_chain(LAYERED_FROM), tb)
    assert layout_of(small) == "graphviz" and layout_of(large) == "layered"
    assert layout_of(draw_chain(mixed_chain(LAYERED_FROM - 1), tb)) == "graphviz"
    assert layout_of(draw_chain(fan(12), tb)) == "layered"  # a grid: regular
    assert layout_of(draw_chain(mixed_chain(LAYERED_FROM), tb, rankdir="LR")) == "graphviz"
    frames = draw_chain(demo_chain(), demo_toolbox())  # sub-chains drawn as frames
    assert frames.scene.clusters and layout_of(frames, "layered") == "graphviz"
    monkeypatch.setenv("CHAINLAB_LAYOUT", "graphviz")
    assert layout_of(large) == "graphviz"
    monkeypatch.setenv("CHAINLAB_LAYOUT", "layered")
    assert layout_of(small) == "layered"
    monkeypatch.setenv("CHAINLAB_LAYOUT", "chainlab")
    with pytest.raises(ValueError, match="CHAINLAB_LAYOUT='chainlab': expected"):
        layout_of(small)
    with pytest.raises(ValueError, match="layout='dot'"):
        layout_of(small, "dot")  # type: ignore[arg-type]


def test_a_large_plan_with_a_cycle_goes_to_graphviz() -> None:
    needs_backend("dot")
    steps = [{"id": f"s{i}", "tool": "plain", "depends_on": [f"s{i - 1}"] if i else ["s199"]}
             for i in range(LAYERED_FROM + 50)]
    steps[0]["depends_on"] = [f"s{LAYERED_FROM + 49}"]
    chain = Chain.from_dict({"name": "loop", "steps": steps})
    drawing = draw_chain(chain, toolbox(), problems=chain.problems(toolbox()))
    assert layout_of(drawing) == "layered"
    svg = layout_svg(drawing, backend="dot")  # the layered layout declines: Graphviz draws it
    assert svg.count('class="node cl-step"') == LAYERED_FROM + 50


def test_same_drawing_same_bytes(drawing: Drawing) -> None:
    assert layout_svg(drawing, layout="layered") == layout_svg(drawing, layout="layered")


def iter_texts(svg: str) -> Iterator[str]:
    yield from re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_text_is_escaped() -> None:
    steps = [{"id": f"s{i}", "tool": "plain", "depends_on": [f"s{i - 1}"] if i else [],
              "description": 'a <b> & "c"'} for i in range(LAYERED_FROM)]
    chain = Chain.from_dict({"name": "xyz", "steps": steps})
    svg = layout_svg(draw_chain(chain, toolbox(), title="x<y>&z"))
    assert "x&lt;y&gt;&amp;z" in list(iter_texts(svg))
    assert 'xlink:title="s0: plain&#10;a &lt;b&gt; &amp; &quot;c&quot;"' in svg
    assert SHAPE.search(svg) is not None
