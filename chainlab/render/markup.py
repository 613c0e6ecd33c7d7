"""String surgery on Graphviz SVG (no XML library, no Graphviz): clean it, add the legend,
find each step's shape and text elements, read a step's colours back.

Graphviz writes every cluster, node and edge as a sibling ``<g id=... class="node|edge|
cluster ...">`` under the graph's group, each with its shape first and its label lines as
``<text>`` elements; 2.43 (Debian) and 16.x (WebAssembly) agree on that, which is all this
module relies on.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from chainlab.render.legend import Legend, legend_svg
from chainlab.render.style import FONT, FONT_NAME

__all__ = ["StepMarkup", "add_legend", "clean_svg", "node_styles", "step_groups"]

_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)
_ROOT = re.compile(r'<svg\b([^>]*?) width="([\d.]+)pt" height="([\d.]+)pt"\s+viewBox="([^"]*)"')
_GROUP = re.compile(r'<g id="([^"]+)" class="(node|edge|cluster)([^"]*)">')
SHAPE = re.compile(r"<(?:path|polygon|ellipse)\b[^>]*>")
TEXT = re.compile(r"<text\b([^>]*)>([^<]*)</text>")
_ATTR = re.compile(r'([\w:-]+)="([^"]*)"')


def clean_svg(raw: str, scope: str) -> str:
    """Graphviz's SVG made embeddable and deterministic: no XML prolog, DOCTYPE or comments
    (the version comment differs between builds), ``&#45;`` written as ``-``, and the view's
    classes (``cl-dag`` plus ``scope``) on the ``<svg>`` element.

    Raises ValueError if ``raw`` holds no ``<svg`` element.
    """
    start = raw.find("<svg")
    if start < 0:
        raise ValueError(f"not an SVG document: {raw[:80]!r}")
    svg = _COMMENT.sub("", raw[start:]).replace("&#45;", "-")
    svg = svg.replace(f'font-family="{FONT_NAME}"', f'font-family="{FONT}"')
    classes = f"cl-dag {scope}".strip()
    svg = svg.replace("<svg ", f'<svg class="{classes}" ', 1)
    return svg.rstrip() + "\n"


def _size(svg: str) -> tuple[float, float, list[float], re.Match[str]]:
    m = _ROOT.search(svg)
    if m is None:
        raise ValueError("no Graphviz <svg width=..pt height=..pt viewBox=..> header found")
    return float(m[2]), float(m[3]), [float(v) for v in m[4].split()], m


def add_legend(svg: str, scope: str, *, statuses: bool | Collection[str],
               kinds: frozenset[str], edge_kinds: frozenset[str]) -> str:
    """``svg`` with a legend beside it (right of a tall graph, below a wide one: whichever
    makes the smaller picture). The graph's own coordinates do not change."""
    w, h, vb, m = _size(svg)
    gap = 12.0
    right = legend_svg(scope, statuses=statuses, kinds=kinds, edge_kinds=edge_kinds, columns=2)
    below = legend_svg(scope, statuses=statuses, kinds=kinds, edge_kinds=edge_kinds, columns=5)
    area_right = (w + gap + right.width) * max(h, right.height + 8)
    area_below = max(w, below.width + 8) * (h + gap + below.height)
    legend: Legend
    if area_right <= area_below:
        legend, x, y = right, vb[0] + w + gap, vb[1] + 4
        new_w, new_h = w + gap + right.width + 4, max(h, right.height + 8)
    else:
        legend, x, y = below, vb[0] + 4, vb[1] + h + gap
        new_w, new_h = max(w, below.width + 8), h + gap + below.height + 4
    header = (f'<svg{m[1]} width="{new_w:.0f}pt" height="{new_h:.0f}pt"\n'
              f' viewBox="{vb[0]:.2f} {vb[1]:.2f} {new_w:.2f} {new_h:.2f}"')
    body = svg[: m.start()] + header + svg[m.end():]
    end = body.rstrip().rfind("</svg>")
    placed = f'<g transform="translate({x:.2f},{y:.2f})">{legend.markup}</g>\n'
    return body[:end] + placed + body[end:]


@dataclass(frozen=True, slots=True)
class StepMarkup:
    """Where a step's element sits in the SVG text: the group span, its shape tag and its
    text elements (``(start, end)`` offsets into the document)."""

    element_id: str
    kind: str  # "node" | "cluster"
    span: tuple[int, int]
    shape: tuple[int, int] | None
    texts: tuple[tuple[int, int], ...]


def step_groups(svg: str) -> Iterator[StepMarkup]:
    """Every node and cluster group drawn for a step (class ``cl-step``), in document order."""
    stop = svg.find('class="cl-legend"')
    stop = len(svg) if stop < 0 else stop
    matches = [m for m in _GROUP.finditer(svg) if m.start() < stop]
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else stop
        if m[2] == "edge" or "cl-step" not in m[3]:
            continue
        shape = SHAPE.search(svg, m.end(), end)
        texts = tuple(t.span() for t in TEXT.finditer(svg, m.end(), end))
        yield StepMarkup(m[1], m[2], (m.start(), end), shape.span() if shape else None, texts)


def attrs(tag: str) -> dict[str, str]:
    """The attributes of one tag (``<path fill="x" .../>`` -> ``{"fill": "x", ...}``)."""
    return dict(_ATTR.findall(tag))


@dataclass(frozen=True, slots=True)
class NodeStyle:
    """What a step looks like in an SVG: border and fill paint, text colours, text lines."""

    fill: str
    stroke: str
    width: str
    dash: str
    text_fills: tuple[str, ...]
    lines: tuple[str, ...]


def node_styles(svg: str) -> dict[str, NodeStyle]:
    """``{element_id: NodeStyle}`` for every step in a chainlab SVG (a fresh render or a
    patched one), with Graphviz's defaults made explicit (width 1, no dashes, black text) so
    that two drawings can be compared."""
    from xml.sax.saxutils import unescape

    out: dict[str, NodeStyle] = {}
    for g in step_groups(svg):
        shape = attrs(svg[g.shape[0]:g.shape[1]]) if g.shape else {}
        fills, lines = [], []
        for a, b in g.texts:
            m = TEXT.match(svg, a, b)
            assert m is not None
            fills.append(attrs(m[1]).get("fill", "black"))
            lines.append(unescape(m[2]))
        out[g.element_id] = NodeStyle(
            fill=shape.get("fill", "none"), stroke=shape.get("stroke", "black"),
            width=f"{float(shape.get('stroke-width', '1')):g}",
            dash=shape.get("stroke-dasharray", "none"), text_fills=tuple(fills),
            lines=tuple(lines))
    return out
