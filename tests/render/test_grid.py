"""Issue 40: a wide fan-out is drawn as a grid of rows with one edge in and one edge out,
so the whole graph, its first and its last step fit one picture (chainlab.render.grid)."""

from __future__ import annotations

import re

from chainlab import Chain
from chainlab.plan.graph import edges
from chainlab.render import chain_svg
from chainlab.render.dot import draw_chain
from chainlab.render.grid import GRID_FROM, plan_grids


def fan(n: int, *, middle: str = "s") -> Chain:
    steps = [{"id": "start", "tool": "t"}]
    steps += [{"id": f"{middle}{i:03d}", "tool": "t", "depends_on": ["start"]} for i in range(n)]
    steps += [{"id": "end", "tool": "t", "depends_on": [f"{middle}{i:03d}" for i in range(n)]}]
    return Chain.from_dict({"name": "fan", "steps": steps})


def test_the_interchangeable_steps_of_a_fan_out_form_one_grid() -> None:
    chain = fan(30)
    ids = [s.id for s in chain.steps]
    grid, = plan_grids(ids, edges(chain), set(ids))
    assert grid.members == tuple(f"s{i:03d}" for i in range(30))  # declaration order
    assert grid.cols == 6  # about as many columns as rows
    assert grid.top == grid.members[:6] and grid.rows()[0] == grid.top
    assert grid.bottom == grid.members[24:]  # the last step of every column
    assert grid.head == "s003" and grid.tail == "s027"  # the middle column, top and bottom
    assert ("s000", "s006") in grid.columns() and len(grid.columns()) == 24
    assert grid.label() == "30 steps with the same inputs and outputs: s000 … s029"


def test_small_or_different_groups_stay_rows() -> None:
    small = fan(GRID_FROM - 1)
    ids = [s.id for s in small.steps]
    assert plan_grids(ids, edges(small), set(ids)) == []
    # two halves that depend on different steps are two groups, each a grid of its own
    steps = [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t"}]
    steps += [{"id": f"x{i}", "tool": "t", "depends_on": ["a" if i % 2 else "b"]}
              for i in range(2 * GRID_FROM)]
    chain = Chain.from_dict({"name": "two", "steps": steps})
    ids = [s.id for s in chain.steps]
    grids = plan_grids(ids, edges(chain), set(ids))
    assert sorted(len(g.members) for g in grids) == [GRID_FROM, GRID_FROM]
    assert {g.members[0] for g in grids} == {"x0", "x1"}
    # only eligible steps (plain nodes) are grouped
    assert plan_grids(ids, edges(chain), {"a", "b"}) == []


def test_the_dot_has_one_edge_in_and_one_edge_out_of_the_grid() -> None:
    drawing = draw_chain(fan(100), reserve_status=True)
    visible = [line for line in drawing.dot.splitlines()
               if "->" in line and "style=invis" not in line]
    assert len(visible) == 2, visible  # start -> grid, grid -> end (not 200 edges)
    assert 'lhead="cluster_grid_s000"' in visible[0] and '"start" ->' in visible[0]
    assert 'ltail="cluster_grid_s000"' in visible[1] and '-> "end"' in visible[1]
    assert len(drawing.steps) == 102  # every step is still its own node
    assert "100 steps with the same inputs and outputs: s000 … s099" in drawing.dot


def test_a_thousand_step_fan_out_fits_one_picture() -> None:
    svg = chain_svg(fan(1000), statuses={}, legend=False)
    width, height = (float(v) for v in re.search(
        r'<svg[^>]* width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    # one row was ~120,000 pt wide; a grid of 32 columns is a few thousand, and about as
    # tall as wide: fitted to an output's width, start and end are both in view
    assert width < 8000 and 0.3 < height / width < 3, (width, height)
    tops = {m[1]: float(m[2]) for m in re.finditer(
        r'<g id="[^"]*-n-(start|end|s000|s999)"[^>]*>.*?<text[^>]* y="([\d.-]+)"', svg, re.S)}
    # Graphviz's y grows downwards in SVG: start above the grid, end below it
    assert tops["start"] < tops["s000"] < tops["s999"] < tops["end"], tops
