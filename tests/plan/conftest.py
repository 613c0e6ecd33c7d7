"""Shared fixtures for the plan contract tests: a small typed toolbox with sub-chains."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from chainlab import Chain, Toolbox

SUB = """
name: sub
description: splits the text it is given
steps:
  - id: s1
    tool: split
    args: {text: "{{ context.text }}"}
"""

# loop_a -> loop_b -> loop_a (mutual recursion) and selfie -> selfie (self recursion)
LOOP_A = """
name: loop_a
steps:
  - id: x
    tool: "chain:loop_b"
"""
LOOP_B = """
name: loop_b
steps:
  - id: y
    tool: "chain:loop_a"
"""
SELFIE = """
name: selfie
steps:
  - id: z
    tool: "chain:selfie"
"""


CHAINS = {"sub": SUB, "loop_a": LOOP_A, "loop_b": LOOP_B, "selfie": SELFIE}


def build_toolbox(*, chains: Iterable[str] = tuple(CHAINS)) -> Toolbox:
    """A fresh toolbox: split, estimate, create_records (side effects, compensated by
    delete_records), delete_records; plus the named sub-chains above."""
    tb = Toolbox("plan-tests")

    @tb.tool
    def split(text: str) -> list[str]:
        """Split text into words."""
        return text.split()

    @tb.tool
    def estimate(tasks: list[str], hours_per_task: float = 1.0) -> dict:
        """Estimate the hours for some tasks."""
        return {"hours": len(tasks) * hours_per_task}

    @tb.tool(side_effects=True, compensate=("delete_records", {
        "table_id": "{{ input.table_id }}", "ids": "{{ output.ids }}"}))
    def create_records(table_id: str, rows: list[dict]) -> dict:
        """Insert rows into a table."""
        return {"ids": list(range(len(rows)))}

    @tb.tool(side_effects=True)
    def delete_records(table_id: str, ids: list[int]) -> None:
        """Delete rows from a table."""

    for name in chains:
        tb.add_chain(Chain.from_yaml(CHAINS[name]))
    return tb


@pytest.fixture(scope="session")
def toolbox() -> Toolbox:
    """Shared, never mutated by tests (use ``make_toolbox`` for a private one)."""
    return build_toolbox()


@pytest.fixture
def make_toolbox() -> Callable[..., Toolbox]:
    return build_toolbox
