"""What a drawing holds, whoever lays it out: its nodes (shape, look, text), its edges and its
grids, as the DOT writer (:mod:`chainlab.render.dot`) decides them.

The DOT text is what Graphviz lays out; a :class:`Scene` is the same picture as data, for
chainlab's own layout (:mod:`chainlab.render.layered`), so both draw the same shapes,
colours, marks, labels and edge styles from ONE decision. A scene that holds a cluster (a
sub-chain or an agent step drawn as a frame around its steps) is counted, not described:
only Graphviz draws those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chainlab.render.grid import Grid
from chainlab.render.style import LineStyle

__all__ = ["Link", "Scene", "Shape"]


@dataclass(frozen=True, slots=True)
class Shape:
    """One node as drawn: its name (the Graphviz node name: a step id, or a repeated id's
    :func:`~chainlab.render.ids.occurrence`), its outline (``box``, ``octagon``, ``folder``;
    ``rounded`` corners for a box), its look, its text lines and its tooltip."""

    name: str
    outline: str
    rounded: bool
    fill: str
    stroke: str
    width: float
    line: LineStyle
    text: str
    lines: tuple[str, ...]
    tooltip: str
    grid: str | None = None  # the grid (its cluster name) the node is a cell of


@dataclass(frozen=True, slots=True)
class Link:
    """One drawn edge: from the node ``source`` to the node ``target`` (or from / to the
    grid named by ``source_grid`` / ``target_grid``: one edge stands for a grid's edges),
    ``kind`` ``"explicit"`` (solid) or ``"data"`` (dashed, with its ``label``), ``number``
    its place in the drawing (the SVG id ``<scope>-e<number>``)."""

    source: str
    target: str
    kind: str
    label: str
    number: int
    source_grid: str | None = None
    target_grid: str | None = None


@dataclass(slots=True)
class Scene:
    """A drawing's nodes, edges and grids, in drawing order; ``clusters`` counts the
    sub-chain and agent frames (drawn by Graphviz only); ``name`` the chain's name, ``title``
    the lines above the picture;
    ``rankdir`` ``"TB"`` (top to bottom) or ``"LR"``."""

    name: str = "chain"
    title: tuple[str, ...] = ()
    rankdir: str = "TB"
    shapes: list[Shape] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    grids: list[Grid] = field(default_factory=list)
    clusters: int = 0
