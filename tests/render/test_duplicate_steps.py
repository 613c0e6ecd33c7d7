"""A duplicated step id (issue 18, item 4): every step that repeats an id is its own node,
marked in error, instead of one merged node; the problem in the tooltip names both lines."""

from __future__ import annotations

import re

import pytest

from chainlab import Chain
from chainlab.render import chain_svg
from chainlab.render.dot import draw_chain
from chainlab.render.ids import element_id, occurrence, step_of

TEXT = """\
name: dup
steps:
  - id: fetch
    tool: load
  - id: parse
    tool: split
    depends_on: [fetch]
  - id: fetch
    tool: download
"""


@pytest.fixture
def chain() -> Chain:
    return Chain.from_yaml(TEXT)


def node_lines(dot: str) -> dict[str, str]:
    """Graphviz node name -> its attribute text."""
    return dict(re.findall(r'^\s*"([^"]+)" \[(.*)\];$', dot, flags=re.MULTILINE))


def test_each_repeat_is_its_own_node_marked_in_error(chain: Chain) -> None:
    drawing = draw_chain(chain, None, None, chain.problems(), scope="s")
    nodes = node_lines(drawing.dot)
    assert list(nodes) == ["fetch", "parse", "fetch#2"]
    for name, tool in (("fetch", "load"), ("fetch#2", "download")):
        assert f'label="fetch\\n{tool}\\n⚠ duplicate_step"' in nodes[name]
        assert 'color="#d55e00"' in nodes[name] and "dashed" in nodes[name]
        assert "(lines 3 and 8)" in nodes[name]  # the tooltip holds the problem
    assert "duplicate_step" not in nodes["parse"]
    assert drawing.steps == {"fetch": "s-n-fetch", "parse": "s-n-parse",
                             "fetch#2": element_id("s", "fetch#2")}
    assert len(set(drawing.steps.values())) == 3
    # the edge from depends_on meets the first step with the id
    assert re.findall(r'"([^"]+)" -> "([^"]+)"', drawing.dot) == [("fetch", "parse")]


def test_repeats_are_marked_without_the_problems_too(chain: Chain) -> None:
    nodes = node_lines(draw_chain(chain).dot)
    assert all("⚠ duplicate_step" in nodes[n] for n in ("fetch", "fetch#2"))
    assert "⚠" not in nodes["parse"]


def test_graphviz_draws_three_nodes(chain: Chain) -> None:
    svg = chain_svg(chain, problems=chain.problems(), legend=False, scope="s")
    ids = re.findall(r'<g id="(s-n-[^"]+)" class="node cl-step', svg)
    assert ids == ["s-n-fetch", "s-n-parse", element_id("s", "fetch#2")]
    assert svg.count(">⚠ duplicate_step</text>") == 2


def test_names_of_repeats_map_back_to_the_step_id() -> None:
    assert occurrence("fetch", 2) == "fetch#2"
    assert step_of("fetch#2") == "fetch"
    assert step_of("parent/child#3") == "parent/child"
    assert step_of("fetch") == "fetch"
    assert step_of("a#b") == "a#b"  # not a repeat's name
