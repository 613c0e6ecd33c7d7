"""Wide fan-outs drawn as a grid (issue 40): pure planning, no Graphviz.

Graphviz puts the steps of one rank in one row: a 1,112-step fan-out was a row 1,112 nodes
wide, its first and last steps far off screen, and 1,112 edges fanning out of one node. Steps
that have exactly the same dependencies and the same dependants (the same edges in and out,
by kind) are interchangeable in the picture; :func:`plan_grids` gathers every such group of
at least :data:`GRID_FROM` steps. The writer (:mod:`chainlab.render.dot`) draws each as a
cluster of rows (declaration order, row by row, about as many columns as rows) with ONE edge
in and ONE edge out, each standing for the group's edges, so the whole fan-out, its first
and its last step fit one picture. Every step is still its own node (status, click,
inspector). Nothing here depends on how a step came to be (a hand-written fan-out, or the
instances of a mapped step).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from chainlab.plan.graph import Edge

__all__ = ["GRID_FROM", "Grid", "plan_grids"]

#: the fewest interchangeable steps drawn as a grid (fewer read well in one row)
GRID_FROM = 12


@dataclass(frozen=True, slots=True)
class Grid:
    """A group of interchangeable steps, drawn as ``cols`` columns (``members``: their ids
    in declaration order, row by row; ``name``: the Graphviz cluster)."""

    name: str
    members: tuple[str, ...]
    cols: int
    connected: bool = True  # False: steps with no edge at all (independent steps)

    @property
    def top(self) -> tuple[str, ...]:
        """The first row: where the edges into the group arrive."""
        return self.members[: self.cols]

    @property
    def bottom(self) -> tuple[str, ...]:
        """The last step of every column: where the edges out of the group leave."""
        n = len(self.members)
        return tuple(m for i, m in enumerate(self.members) if i + self.cols >= n)

    @property
    def head(self) -> str:
        """The node the group's one inbound edge points at (the first row's middle)."""
        return self.top[len(self.top) // 2]

    @property
    def tail(self) -> str:
        """The node the group's one outbound edge leaves (the bottom of the middle column)."""
        column = self.members.index(self.head)
        last = column + self.cols * ((len(self.members) - 1 - column) // self.cols)
        return self.members[last]

    def columns(self) -> list[tuple[str, str]]:
        """(upper, lower) pairs that stack the rows: invisible edges between ranks."""
        n = len(self.members)
        return [(self.members[i], self.members[i + self.cols]) for i in range(n - self.cols)]

    def rows(self) -> list[tuple[str, ...]]:
        """The rows, in order: each is one rank whose invisible flat edges keep it in
        declaration order, left to right."""
        return [self.members[i:i + self.cols] for i in range(0, len(self.members), self.cols)]

    def label(self) -> str:
        first, last = self.members[0], self.members[-1]
        what = (f"{len(self.members):,} steps with the same inputs and outputs"
                if self.connected else f"{len(self.members):,} independent steps")
        return f"{what}: {first} … {last}"


def _columns(n: int) -> int:
    # a node is about twice as wide as it is tall: as many columns as rows gives a picture
    # about twice as wide as tall, which fits an output's width at a readable zoom
    return max(1, math.ceil(math.sqrt(n)))


def plan_grids(step_ids: Sequence[str], level_edges: Sequence[Edge],
               eligible: Collection[str], *, prefix: str = "",
               minimum: int = GRID_FROM) -> list[Grid]:
    """The groups of at least ``minimum`` steps of one chain level (``step_ids`` in
    declaration order; only ``eligible`` ones: plain nodes) with the same edges in and the
    same edges out (sources, targets and kinds). Members are full ids (``prefix`` + id)."""
    ins: dict[str, list[tuple[str, str]]] = {}
    outs: dict[str, list[tuple[str, str]]] = {}
    for e in level_edges:
        outs.setdefault(e.source, []).append((e.target, e.kind))
        ins.setdefault(e.target, []).append((e.source, e.kind))
    groups: dict[tuple[tuple[tuple[str, str], ...], ...], list[str]] = {}
    for step_id in step_ids:
        if step_id not in eligible:
            continue
        key = (tuple(sorted(ins.get(step_id, ()))), tuple(sorted(outs.get(step_id, ()))))
        groups.setdefault(key, []).append(step_id)
    return [Grid(f"cluster_grid_{prefix}{members[0]}", tuple(prefix + m for m in members),
                 _columns(len(members)), connected=key != ((), ()))
            for key, members in groups.items() if len(members) >= minimum]
