"""A :class:`~chainlab.render.scene.Scene` laid out by chainlab's own layout
(:mod:`chainlab.render.layered`) and written as Graphviz writes SVG.

The markup has Graphviz's form, element for element (a ``<g class="node|edge|cluster">``
per node, edge and grid frame, its ``<title>``, the node's tooltip link, its outline first
and a ``<text>`` per label line; edges before nodes), with Graphviz's sizes (DOT's node
margins, ``nodesep``, ``ranksep``, ``pad``, arrow size) and the scene's own colours, so
everything that reads a Graphviz picture (the live view's template and status boxes, the
legend, ``node_styles``, the front end's tiles, the tests) reads this one the same way, and
a person sees the same shapes, colours, marks, labels and edge styles.

Only what Graphviz's drawing of the same DOT holds is drawn: the scene's nodes, its grids
(a frame of rows, one edge in and one out), its edges (``depends_on`` solid, data dashed and
labelled) and its title. A scene with a sub-chain or agent frame, laid out left to right,
or whose edges hold a cycle is Graphviz's to draw: :func:`scene_svg` returns None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from chainlab.render.grid import Grid
from chainlab.render.ids import element_id
from chainlab.render.layered import Placement, Spacing, layered
from chainlab.render.metrics import text_width
from chainlab.render.scene import Scene, Shape
from chainlab.render.style import CLUSTER_STROKE, EDGE_COLOR, FONT, MUTED_TEXT, dasharray

__all__ = ["scene_svg"]

# DOT's attributes (chainlab.render.dot: graph, node and edge defaults), in points
_PAD = 0.12 * 72
_MARGIN_X, _MARGIN_Y = 0.12 * 72, 0.05 * 72
_MIN_W, _MIN_H = 0.75 * 72, 0.3 * 72  # Graphviz's default node width; DOT's height
_NODE_PT, _EDGE_PT, _TITLE_PT, _GRID_PT = 10.0, 8.0, 11.0, 10.0
_LINE = 1.1  # line pitch per point of font size, as Graphviz sets label lines
_ARROW, _ARROW_HALF = 7.0, 2.45  # arrowsize 0.7
_OCTAGON = (1.53, 1.525)  # Graphviz's octagon around a label box, width and height
_TAN = math.tan(math.pi / 8)  # an octagon's side over its half width
_CORNER = 6.0  # a rounded box's corner
_GRID_PAD = 8.0  # inside a grid's frame
_GRID_ROW = Spacing().rank  # between its rows: as Graphviz, whose rows are ranks
_SPACING = Spacing()


def escape(text: str) -> str:
    """``text`` as XML character data."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attr(text: str) -> str:
    """``text`` as a double-quoted XML attribute value (a newline kept as ``&#10;``)."""
    return escape(text).replace('"', "&quot;").replace("\n", "&#10;")


def _box(shape: Shape) -> tuple[float, float]:
    wide = max(text_width(line, _NODE_PT) for line in shape.lines)
    w = max(_MIN_W, math.ceil(wide + 2 * _MARGIN_X))
    h = max(_MIN_H, math.ceil(len(shape.lines) * _LINE * _NODE_PT + 2 * _MARGIN_Y))
    if shape.outline == "octagon":
        return w * _OCTAGON[0], h * _OCTAGON[1]
    return float(w), float(h)


def _port_room(shape: Shape, w: float) -> float:
    """The half width of a node's top and bottom edges that edges may attach to."""
    if shape.outline == "octagon":
        return max(0.0, _TAN * w / 2 - 2)
    return max(0.0, w / 2 - (2 * _CORNER if shape.rounded else 4))


class _GridBox:
    """A grid laid out as one box: its frame, and the cell of each member."""

    def __init__(self, grid: Grid, sizes: dict[str, tuple[float, float]]):
        self.grid = grid
        self.cell_w = max(sizes[m][0] for m in grid.members)
        self.cell_h = max(sizes[m][1] for m in grid.members)
        rows = math.ceil(len(grid.members) / grid.cols)
        inner = grid.cols * self.cell_w + (grid.cols - 1) * _SPACING.node
        self.label = grid.label()
        self.band = _LINE * _GRID_PT + 6
        self.inner_left = _GRID_PAD + max(0.0, (text_width(self.label, _GRID_PT) + 8 - inner) / 2)
        self.w = max(inner, text_width(self.label, _GRID_PT) + 8) + 2 * _GRID_PAD
        self.h = self.band + rows * self.cell_h + (rows - 1) * _GRID_ROW + 2 * _GRID_PAD

    def cells(self, left: float, top: float) -> dict[str, tuple[float, float]]:
        """Each member's centre, given the frame's top left corner."""
        out = {}
        for i, m in enumerate(self.grid.members):
            row, col = divmod(i, self.grid.cols)
            out[m] = (left + self.inner_left + col * (self.cell_w + _SPACING.node)
                      + self.cell_w / 2,
                      top + _GRID_PAD + self.band + row * (self.cell_h + _GRID_ROW)
                      + self.cell_h / 2)
        return out


def scene_svg(scene: Scene, scope: str, name: str = "chain") -> str | None:
    """The scene laid out by :func:`~chainlab.render.layered.layered`, as Graphviz's SVG is
    after :func:`~chainlab.render.markup.clean_svg` (``scope``: the ids' prefix and the root's
    class, ``name``: the graph's title element); None when the scene is Graphviz's to draw
    (a cluster, ``LR``, a cycle)."""
    if scene.clusters or scene.rankdir != "TB":
        return None
    sizes = {s.name: _box(s) for s in scene.shapes}
    grids = {g.name: _GridBox(g, sizes) for g in scene.grids}
    shapes = {s.name: s for s in scene.shapes}
    units: list[str] = []  # a node's name or a grid's name, by unit
    unit_of: dict[str, int] = {}
    for s in scene.shapes:
        key = s.grid or s.name
        if key not in unit_of:
            unit_of[key] = len(units)
            units.append(key)
        unit_of[s.name] = unit_of[key]
    boxes: list[tuple[float, float]] = []
    room: list[float] = []
    for key in units:
        if key in grids:
            g = grids[key]
            boxes.append((g.w, g.h))
            room.append(g.w / 2 - 2 * _CORNER)
        else:
            boxes.append(sizes[key])
            room.append(_port_room(shapes[key], sizes[key][0]))
    edges = [(unit_of[link.source_grid or link.source], unit_of[link.target_grid or link.target])
             for link in scene.links]
    labels = [(text_width(link.label, _EDGE_PT), _LINE * _EDGE_PT) if link.label else None
              for link in scene.links]
    placed = layered(boxes, edges, labels, ports=room, spacing=_SPACING)
    if placed is None:
        return None
    return _Writer(scene, scope, placed, units, grids, sizes).write(name)


class _Writer:
    def __init__(self, scene: Scene, scope: str, placed: Placement, units: list[str],
                 grids: dict[str, _GridBox], sizes: dict[str, tuple[float, float]]):
        self.scene, self.scope, self.placed = scene, scope, placed
        self.title_h = len(scene.title) * _LINE * _TITLE_PT + 6 if scene.title else 0.0
        self.centre: dict[str, tuple[float, float]] = {}
        self.frames: list[tuple[_GridBox, float, float]] = []
        dy = self.title_h
        for i, key in enumerate(units):
            x, y = placed.x[i], placed.y[i] + dy
            g = grids.get(key)
            if g is None:
                self.centre[key] = (x, y)
                continue
            left, top = x - g.w / 2, y - g.h / 2
            self.frames.append((g, left, top))
            self.centre.update(g.cells(left, top))
        self.sizes = sizes
        self.out: list[str] = []

    def write(self, name: str) -> str:
        """The whole document. What every text shares (the font, its size and centring)
        is said once, on the graph's group; a text that differs says so itself."""
        w = self.placed.width + 2 * _PAD
        h = self.title_h + self.placed.height + 2 * _PAD
        out = self.out
        out.append(f'<svg class="cl-dag {self.scope}" width="{w:.0f}pt" height="{h:.0f}pt"\n'
                   f' viewBox="0.00 0.00 {w:.2f} {h:.2f}" xmlns="http://www.w3.org/2000/svg" '
                   'xmlns:xlink="http://www.w3.org/1999/xlink">\n'
                   f'<g id="{self.scope}" class="graph" transform="scale(1 1) rotate(0) '
                   f'translate({_PAD:.2f} {_PAD:.2f})" font-family="{FONT}" '
                   f'font-size="{_NODE_PT:.2f}" text-anchor="middle">\n'
                   f"<title>{escape(name)}</title>\n")
        for i, line in enumerate(self.scene.title):
            out.append(_label(0.0, (i + 1) * _LINE * _TITLE_PT, line, _TITLE_PT))
        for g, left, top in self.frames:
            self._frame(g, left, top)
        links = self.scene.links
        for i, link in enumerate(links):
            self._edge(i, link.source, link.target, link.kind, link.label, link.number)
        for shape in self.scene.shapes:
            self._node(shape)
        out.append("</g>\n</svg>\n")
        return "".join(out)

    def _frame(self, g: _GridBox, left: float, top: float) -> None:
        eid = f"{self.scope}-{g.grid.name}"
        self.out.append(
            f'<g id="{eid}" class="cluster">\n<title>{escape(g.grid.name)}</title>\n'
            f'<path fill="transparent" stroke="{CLUSTER_STROKE}" stroke-dasharray="5,2" '
            f'd="{_rounded(left, top, left + g.w, top + g.h)}"/>\n'
            + _label(left + _GRID_PAD, top + _GRID_PAD + _GRID_PT, g.label, _GRID_PT)
            + "</g>\n")

    def _edge(self, i: int, source: str, target: str, kind: str, label: str,
              number: int) -> None:
        dy = self.title_h
        d, arrow = _curve([(x, y + dy, slope) for x, y, slope in self.placed.routes[i]])
        dash = ' stroke-dasharray="5,2"' if kind == "data" else ""
        at = self.placed.labels[i]
        text = _label(at[0], at[1] + dy + _EDGE_PT * 0.35, label, _EDGE_PT) \
            if label and at is not None else ""
        self.out.append(
            f'<g id="{self.scope}-e{number}" class="edge">\n'
            f"<title>{escape(source)}-&gt;{escape(target)}</title>\n"
            f'<path fill="none" stroke="{EDGE_COLOR}"{dash} d="{d}"/>\n'
            f'<polygon fill="{EDGE_COLOR}" stroke="{EDGE_COLOR}" points="{arrow}"/>\n'
            f"{text}</g>\n")

    def _node(self, shape: Shape) -> None:
        eid = element_id(self.scope, shape.name)
        cx, cy = self.centre[shape.name]
        w, h = self.sizes[shape.name]
        paint = f'fill="{shape.fill}" stroke="{shape.stroke}"'
        if shape.width != 1:
            paint += f' stroke-width="{shape.width:g}"'
        if shape.line != "solid":
            paint += f' stroke-dasharray="{dasharray(shape.line)}"'
        if shape.outline == "box" and shape.rounded:
            d = _rounded(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            outline = f'<path {paint} d="{d}"/>\n'
        else:
            outline = f'<polygon {paint} points="{_polygon(shape.outline, cx, cy, w, h)}"/>\n'
        pitch = _LINE * _NODE_PT
        first = cy - (len(shape.lines) - 1) / 2 * pitch + _NODE_PT / 4
        colour = shape.text
        texts = "".join(f'<text x="{cx:.1f}" y="{first + i * pitch:.1f}" fill="{colour}">'
                        f"{escape(line)}</text>\n" for i, line in enumerate(shape.lines))
        self.out.append(
            f'<g id="{eid}" class="node cl-step">\n<title>{escape(shape.name)}</title>\n'
            f'<g id="a_{eid}"><a xlink:title="{escape_attr(shape.tooltip)}">\n'
            f"{outline}{texts}</a>\n</g>\n</g>\n")


def _label(x: float, y: float, text: str, size: float) -> str:
    """A text on the page's background (a title, a grid's or an edge's label), from its
    left end."""
    return (f'<text text-anchor="start" x="{x:.1f}" y="{y:.1f}" font-size="{size:.2f}" '
            f'fill="{MUTED_TEXT}">{escape(text)}</text>\n')


def _curve(points: list[tuple[float, float, float]]) -> tuple[str, str]:
    """A smooth path through ``points`` (x, y, slope dx/dy: cubic Béziers whose handles
    follow the slopes, a third of the way down each, so the path never turns back up) that
    stops an arrow's length short of the last point, and that arrow's polygon."""
    tx, ty, slope = points[-1]
    norm = math.hypot(slope, 1.0)
    ux, uy = slope / norm, 1.0 / norm
    ends = [*points[:-1], (tx - ux * _ARROW, ty - uy * _ARROW, slope)]
    d = [f"M{ends[0][0]:.1f},{ends[0][1]:.1f}"]
    for (x0, y0, s0), (x1, y1, s1) in pairwise(ends):
        third = (y1 - y0) / 3
        d.append(f"C{x0 + s0 * third:.1f},{y0 + third:.1f} {x1 - s1 * third:.1f},"
                 f"{y1 - third:.1f} {x1:.1f},{y1:.1f}")
    bx, by = ends[-1][0], ends[-1][1]
    wx, wy = -uy * _ARROW_HALF, ux * _ARROW_HALF
    arrow = (f"{bx + wx:.1f},{by + wy:.1f} {tx:.1f},{ty:.1f} {bx - wx:.1f},{by - wy:.1f} "
             f"{bx + wx:.1f},{by + wy:.1f}")
    return " ".join(d), arrow


def _rounded(left: float, top: float, right: float, bottom: float) -> str:
    """A rounded rectangle as a path (its corners as ``x,y`` pairs, as Graphviz's are: the
    outermost of them are the shape's extent)."""
    r = _CORNER
    return (f"M{left + r:.1f},{top:.1f}H{right - r:.1f}Q{right:.1f},{top:.1f} "
            f"{right:.1f},{top + r:.1f}V{bottom - r:.1f}Q{right:.1f},{bottom:.1f} "
            f"{right - r:.1f},{bottom:.1f}H{left + r:.1f}Q{left:.1f},{bottom:.1f} "
            f"{left:.1f},{bottom - r:.1f}V{top + r:.1f}Q{left:.1f},{top:.1f} "
            f"{left + r:.1f},{top:.1f}Z")


def _polygon(outline: str, cx: float, cy: float, w: float, h: float) -> str:
    hw, hh = w / 2, h / 2
    points: Sequence[tuple[float, float]]
    if outline == "octagon":
        a, b = hw * _TAN, hh * _TAN
        points = [(hw, -b), (hw, b), (a, hh), (-a, hh), (-hw, b), (-hw, -b), (-a, -hh),
                  (a, -hh)]
    elif outline == "folder":  # a box with a tab on its top right, as Graphviz's
        points = [(hw, -hh), (hw - 3, -hh - 4), (hw - 24, -hh - 4), (hw - 27, -hh), (-hw, -hh),
                  (-hw, hh), (hw, hh)]
    else:
        points = [(hw, -hh), (-hw, -hh), (-hw, hh), (hw, hh)]
    points = [*points, points[0]]
    return " ".join(f"{cx + x:.1f},{cy + y:.1f}" for x, y in points)
