"""The legend of a DAG drawing: plain SVG written here, added next to Graphviz's layout.

Why not a DOT cluster: legend nodes would share ranks with the chain's nodes and spread over
the whole height of a large graph, and HTML-table labels are not supported by the
WebAssembly Graphviz build. Written by hand it is compact, identical for every Graphviz
backend and never moves the chain's layout.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from xml.sax.saxutils import escape

from chainlab.render.style import (
    EDGE_COLOR,
    FONT,
    KIND_MARK,
    MUTED_TEXT,
    NEUTRAL,
    PROBLEM,
    STATUS_STYLE,
    StatusStyle,
    dasharray,
)

__all__ = ["Legend", "LegendItem", "legend_items", "legend_svg"]

_KINDS = [  # (kind, label, shape)
    ("plain", "no side effects", "rounded"),
    ("effect", f"{KIND_MARK['effect']} side effects", "box"),
    ("idempotent", f"{KIND_MARK['idempotent']} idempotent effects", "box"),
    ("confirm", f"{KIND_MARK['confirm']} needs approval", "octagon"),
    ("subchain", f"{KIND_MARK['subchain']} sub-chain", "folder"),
    ("for_each", f"{KIND_MARK['for_each']} once per item (counts)", "box"),
    ("agent", f"{KIND_MARK['agent']} agent: its model turns and their calls", "rounded"),
    ("conditional", "◇ has a condition", "rounded"),
    ("problem", "⚠ plan problem", "rounded"),
]
_EDGES = [("explicit", "depends_on", "solid"), ("data", "data reference", "dashed")]
FONT_SIZE = 8.5
CHAR_W = 5.1  # DejaVu Sans at 8.5 pt averages ~4.7 pt per character; symbols are wider
CELL_H = 15.0
GAP = 5.0
PAD = 8.0


@dataclass(frozen=True, slots=True)
class Legend:
    """A legend as an SVG ``<g>`` drawn from (0, 0), and its size in points."""

    markup: str
    width: float
    height: float

    def svg(self) -> str:
        """The legend alone, as an ``<svg>`` element of its own size (e.g. beside a live DAG
        that is drawn without one)."""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(self.width)}pt" '
                f'height="{_f(self.height)}pt" viewBox="0 0 {_f(self.width)} '
                f'{_f(self.height)}">{self.markup}</svg>')


def _f(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _shape(kind: str, x: float, y: float, w: float, h: float, style: StatusStyle) -> str:
    paint = (f'fill="{style.fill}" stroke="{style.stroke}" stroke-width="{_f(style.width)}" '
             f'stroke-dasharray="{dasharray(style.line)}"')
    if kind in ("rounded", "box"):
        rx = ' rx="4"' if kind == "rounded" else ""
        return f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}"{rx} {paint}/>'
    if kind == "octagon":
        c = 5.0
        pts = [(x + c, y), (x + w - c, y), (x + w, y + c), (x + w, y + h - c), (x + w - c, y + h),
               (x + c, y + h), (x, y + h - c), (x, y + c)]
    else:  # folder: a tab on the top right
        t = 3.0
        pts = [(x, y + t), (x + w - 16, y + t), (x + w - 13, y), (x + w - 3, y), (x + w, y + t),
               (x + w, y + h), (x, y + h)]
    points = " ".join(f"{_f(a)},{_f(b)}" for a, b in pts)
    return f'<polygon points="{points}" {paint}/>'


def _text(x: float, y: float, label: str, colour: str, anchor: str = "middle") -> str:
    return (f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-family="{FONT}" '
            f'font-size="{_f(FONT_SIZE)}" fill="{colour}">{escape(label)}</text>')


def _edge(x: float, y: float, w: float, label: str, line: str) -> str:
    x2 = x + 26
    dash = ' stroke-dasharray="5,2"' if line == "dashed" else ""
    return (f'<path d="M{_f(x)},{_f(y)} L{_f(x2 - 6)},{_f(y)}" fill="none" '
            f'stroke="{EDGE_COLOR}"{dash}/>'
            f'<polygon points="{_f(x2 - 6)},{_f(y - 3)} {_f(x2)},{_f(y)} {_f(x2 - 6)},{_f(y + 3)}" '
            f'fill="{EDGE_COLOR}" stroke="{EDGE_COLOR}"/>'
            + _text(x2 + 4, y + 3, label, MUTED_TEXT, "start"))


@dataclass(frozen=True, slots=True)
class LegendItem:
    """One entry of a legend: ``section`` ("status" | "kind" | "edge"), ``name`` (the status,
    kind or edge kind), ``label`` as shown, ``style`` (None for an edge) and ``shape`` (the
    node shape, or the edge's line pattern)."""

    section: str
    name: str
    label: str
    style: StatusStyle | None
    shape: str


def legend_items(*, statuses: bool | Collection[str], kinds: Collection[str],
                 edge_kinds: Collection[str]) -> list[LegendItem]:
    """What a legend lists, in palette order: every status (``statuses=True``) or only those
    named (the statuses present in a run, issue 18), the step ``kinds`` and the
    ``edge_kinds`` that occur (with no kind at all: "no side effects")."""
    items: list[LegendItem] = []
    present = None if statuses is True else {str(s) for s in statuses or ()}
    items += [LegendItem("status", str(name), style.caption, style, "rounded")
              for name, style in STATUS_STYLE.items() if present is None or str(name) in present]
    shown = [k for k in _KINDS if k[0] in kinds] or [_KINDS[0]]
    items += [LegendItem("kind", kind, label, PROBLEM if kind == "problem" else NEUTRAL, shape)
              for kind, label, shape in shown]
    items += [LegendItem("edge", kind, label, None, line)
              for kind, label, line in _EDGES if kind in edge_kinds]
    return items


def legend_svg(scope: str, *, statuses: bool | Collection[str], kinds: Collection[str],
               edge_kinds: Collection[str], columns: int = 2) -> Legend:
    """The legend of a drawing (:func:`legend_items`) in a grid of ``columns`` columns."""
    items = [(i.section, i.label, i.style, i.shape)
             for i in legend_items(statuses=statuses, kinds=kinds, edge_kinds=edge_kinds)]
    cell_w = max(len(label) for _, label, _, _ in items) * CHAR_W + 16
    parts = [_text(PAD, PAD + 8, "legend", MUTED_TEXT, "start")]
    y = PAD + 14
    col = 0
    section = items[0][0]
    for sec, label, style, shape in items:
        if sec != section or col == columns:  # each section starts a new row
            y += CELL_H + GAP
            col = 0
            section = sec
        x = PAD + col * (cell_w + GAP)
        if style is None:
            parts.append(_edge(x, y + CELL_H / 2, cell_w, label, shape))
        else:
            parts.append(_shape(shape, x, y, cell_w, CELL_H, style))
            parts.append(_text(x + cell_w / 2, y + CELL_H / 2 + 3, label, style.text))
        col += 1
    width = 2 * PAD + columns * cell_w + (columns - 1) * GAP
    height = y + CELL_H + PAD
    frame = (f'<rect x="0.5" y="0.5" width="{_f(width - 1)}" height="{_f(height - 1)}" rx="6" '
             f'fill="none" stroke="#9a9a9a" stroke-dasharray="5,2"/>')
    markup = (f'<g id="{scope}-legend" class="cl-legend">{frame}' + "".join(parts) + "</g>")
    return Legend(markup, width, height)
