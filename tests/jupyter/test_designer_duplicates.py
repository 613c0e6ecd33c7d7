"""The designer's DAG with a duplicated step id: one node per step, each marked as a
problem by the designer's style, and a click on either selects the step id."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from chainlab import Toolbox
from chainlab.jupyter import ChainDesigner

pytestmark = pytest.mark.anyio

TEXT = """\
name: dup
steps:
- id: fetch
  tool: fetch
- id: fetch
  tool: fetch
"""


@pytest.fixture
async def designer() -> AsyncIterator[ChainDesigner]:
    tb = Toolbox("dup")

    @tb.tool
    def fetch() -> int:
        """Fetch."""
        return 1

    d = ChainDesigner(tb, name="dup")
    yield d
    d.close()


async def test_both_steps_are_drawn_and_marked(designer: ChainDesigner) -> None:
    designer.yaml = TEXT
    designer.flush()
    assert [(p.code, p.line) for p in designer.problems] == [("duplicate_step", 5)]
    ids = designer.dag.element_ids
    assert list(ids) == ["fetch", "fetch#2"] and len(set(ids.values())) == 2
    marked = re.findall(r"#([\w-]+)\{--cl-s:#d55e00", designer.dag.canvas.css)
    assert sorted(marked) == sorted(ids.values())
    assert all(f'id="{eid}"' in designer.dag.canvas.svg for eid in ids.values())
    assert set(designer.dag.canvas.steps.values()) == {"fetch"}  # a click selects the id
