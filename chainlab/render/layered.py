"""chainlab's own layout of a DAG: layered, top to bottom, pure Python (no Graphviz).

Graphviz lays a 3,332-step chain out in seconds (8.7 s measured, issue 49); this layout does
it in a fraction of a second, at the price of Graphviz's finer touches (its network-simplex
ranking and spline routing). The steps, as in every Sugiyama-style layout:

1. **Layers**: each box sits one layer below the lowest of its sources (longest path from
   the sources, Kahn's order), and a box with more edges out than in is then pulled down
   to just above its highest target, which shortens edges (a cycle: no layout, ``None``).
2. **Long edges** get one waypoint per layer they cross; an edge with a label gets its
   label as a waypoint of its own (the layers are then doubled, as Graphviz does), so a
   label takes room and overlaps nothing.
3. **Order** within each layer: barycenter sweeps and neighbour swaps, keeping the order
   with the fewest crossings (:mod:`chainlab.render.ordering`).
4. **Places**: each layer is placed as close as its order and spacing allow to the
   weighted median of its neighbours' places (weighted isotonic regression,
   pool-adjacent-violators: O(n) per layer), sweeping down and up, then once between both
   sides. A waypoint follows its edge (long edges run straight) but yields to a box where
   they collide, and a box follows the boxes it joins more than the long edges that reach
   it, so a long chain stays a column.
5. **Routes**: every edge leaves its source's bottom and enters its target's top through
   its waypoints; the edges of one side of a box are spread over that side, in the order
   of where they go.

Work is linear in boxes plus waypoints per sweep, and the sweeps are bounded. Nothing here
knows about steps or SVG: :mod:`chainlab.render.scene_svg` draws a scene with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from chainlab.render.ordering import reduce_crossings

__all__ = ["Placement", "layered"]

Point = tuple[float, float]
#: a point of an edge's route and the route's slope there (dx / dy: 0 is straight down)
Waypoint = tuple[float, float, float]
_SWEEPS = 4  # down + up pairs of the ordering and the placing
# how hard a vertex holds its wanted place when two collide: a waypoint yields to a box (a
# long edge bends round a column of boxes; were it the other way round, every edge that
# reaches into a chain would push the chain aside a little, and a long chain would drift)
_DUMMY_WEIGHT = 1e-6
_FREE_WEIGHT = 1e-9  # a vertex with no neighbour on the side looked at
_SETTLED = 0.5  # points: a sweep that moves nothing further ends the placing


@dataclass(frozen=True, slots=True)
class Spacing:
    """Distances in points: between boxes of a layer (``node``), between layers
    (``rank``), beside a waypoint (``waypoint``), between the ports of one side
    (``port``)."""

    node: float = 21.6
    rank: float = 32.4
    waypoint: float = 8.0
    port: float = 12.0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where :func:`layered` put everything (points, y growing downwards, the picture from
    (0, 0) to (``width``, ``height``)): each box's centre (``x``, ``y``) and layer; each
    edge's route (from its source's bottom to its target's top: its ends, and for each
    layer it crosses one point where it passes that layer at a gentle slope, else the top
    and bottom of a run straight down the layer beside its boxes; each with the route's
    slope, so that a curve through them never turns back up and never cuts into a box) and
    its label's left end on the text's middle line (or None)."""

    x: list[float]
    y: list[float]
    layer: list[int]
    routes: list[list[Waypoint]]
    labels: list[Point | None]
    width: float
    height: float
    crossings: int


def layered(sizes: Sequence[tuple[float, float]], edges: Sequence[tuple[int, int]],
            labels: Sequence[tuple[float, float] | None] = (), *,
            ports: Sequence[float] = (), spacing: Spacing = Spacing()) -> Placement | None:
    """Lay out boxes (``sizes``: width, height) joined by ``edges`` (source, target: indices
    into ``sizes``). ``labels`` gives an edge's label size (or None), ``ports`` each box's
    half width over which its edges may attach (default: a third of the box). Returns None
    when the edges hold a cycle (a self-loop included): then no layering exists."""
    n = len(sizes)
    layer = _layers(n, edges)
    if layer is None:
        return None
    labels = list(labels) + [None] * (len(edges) - len(labels))
    doubled = any(lab is not None for lab in labels)
    if doubled:
        layer = [2 * k for k in layer]
    g = _Graph(sizes, layer, spacing)
    chains = [g.chain(s, t, labels[i]) for i, (s, t) in enumerate(edges)]
    crossings = g.order()
    g.place()
    heights = g.vertical(doubled)
    room = list(ports) or [w / 3 for w, _ in sizes]
    routes, label_at = g.routes(chains, labels, room)
    width = max((g.x[v] + g.half[v] for v in range(g.count)), default=0.0)
    height = heights[-1] if heights else 0.0
    return Placement(g.x[:n], g.y[:n], layer, routes, label_at, width, height, crossings)


def _layers(n: int, edges: Sequence[tuple[int, int]]) -> list[int] | None:
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for s, t in edges:
        if s == t:
            return None
        succ[s].append(t)
        indeg[t] += 1
    outdeg = [len(x) for x in succ]
    inputs = indeg[:]
    ready = [v for v in range(n) if indeg[v] == 0]
    order: list[int] = []
    layer = [0] * n
    while ready:
        nxt: list[int] = []
        for v in ready:
            order.append(v)
            for t in succ[v]:
                layer[t] = max(layer[t], layer[v] + 1)
                indeg[t] -= 1
                if indeg[t] == 0:
                    nxt.append(t)
        ready = nxt
    if len(order) < n:
        return None
    for v in reversed(order):  # more edges out than in: sit just above the targets
        if succ[v] and outdeg[v] > inputs[v]:
            layer[v] = max(layer[v], min(layer[t] for t in succ[v]) - 1)
    return layer


class _Graph:
    """Boxes and waypoints (``v >= boxes``) by layer, with their neighbours and places."""

    def __init__(self, sizes: Sequence[tuple[float, float]], layer: list[int],
                 spacing: Spacing):
        self.boxes = len(sizes)
        self.spacing = spacing
        self.half = [w / 2 for w, _ in sizes]
        self.tall = [h for _, h in sizes]
        self.shift = [0.0] * self.boxes  # where edges pass, from the centre (a label's left)
        self.weight = [1.0] * self.boxes
        self.level = list(layer)
        self.up: list[list[int]] = [[] for _ in sizes]
        self.down: list[list[int]] = [[] for _ in sizes]
        depth = max(layer, default=-1) + 1
        self.rows: list[list[int]] = [[] for _ in range(depth)]
        for v, k in enumerate(layer):
            self.rows[k].append(v)
        self.x: list[float] = []
        self.y: list[float] = []
        self.bands: list[tuple[float, float]] = []  # each layer's top and bottom

    @property
    def count(self) -> int:
        return len(self.level)

    def _add(self, level: int, half: float, tall: float, shift: float = 0.0) -> int:
        v = len(self.level)
        self.level.append(level)
        self.half.append(half)
        self.tall.append(tall)
        self.shift.append(shift)
        self.weight.append(_DUMMY_WEIGHT)
        self.up.append([])
        self.down.append([])
        self.rows[level].append(v)
        return v

    def chain(self, s: int, t: int, label: tuple[float, float] | None) -> list[int]:
        """The vertices an edge passes, its ends included (a waypoint per layer between)."""
        path = [s]
        for k in range(self.level[s] + 1, self.level[t]):
            if label is not None and k == self.level[s] + 1:
                half = label[0] / 2 + 2
                path.append(self._add(k, half, label[1], -half))
            else:
                path.append(self._add(k, 0.0, 0.0))
        path.append(t)
        for a, b in pairwise(path):
            self.down[a].append(b)
            self.up[b].append(a)
        return path

    # ------------------------------------------------------------------ order
    def order(self) -> int:
        """The order within each layer (:func:`~chainlab.render.ordering.reduce_crossings`);
        returns how many crossings are left."""
        self.rows, crossings = reduce_crossings(self.rows, self.up, self.down, _SWEEPS)
        return crossings

    # ------------------------------------------------------------------ places
    def _gap(self, a: int, b: int) -> float:
        sp = self.spacing
        room = sp.waypoint if a >= self.boxes and b >= self.boxes else sp.node
        return self.half[a] + self.half[b] + room

    def place(self) -> None:
        offsets: list[list[float]] = []  # each vertex's least distance from its row's first
        for row in self.rows:
            at, found = 0.0, []
            for i, v in enumerate(row):
                at += self._gap(row[i - 1], v) if i else 0.0
                found.append(at)
            offsets.append(found)
        self.x = [0.0] * self.count
        for row, found in zip(self.rows, offsets, strict=True):  # packed, left to right
            for v, at in zip(row, found, strict=True):
                self.x[v] = at + self.half[row[0]]
        down = list(zip(self.rows[1:], offsets[1:], strict=True))
        up = list(zip(self.rows[-2::-1], offsets[-2::-1], strict=True))
        for _ in range(_SWEEPS):
            before = self.x[:]
            for row, found in down:
                self._align(row, found, self.up)
            for row, found in up:
                self._align(row, found, self.down)
            if max(abs(a - b) for a, b in zip(before, self.x, strict=True)) < _SETTLED:
                break
        both = [up + down for up, down in zip(self.up, self.down, strict=True)]
        for row, found in zip(self.rows, offsets, strict=True):  # last, between both sides:
            self._align(row, found, both)  # a waypoint on its edge's way
        left = min((self.x[v] - self.half[v] for v in range(self.count)), default=0.0)
        self.x = [x - left for x in self.x]

    def _want(self, v: int, others: list[int]) -> float:
        """Where ``v`` would sit by its neighbours ``others``: their weighted median (a box
        weighs twice a waypoint), so a box at the end of a long edge stays in its column
        instead of drifting to the mean (which, along a long chain, adds up)."""
        x, shift, boxes = self.x, self.shift, self.boxes
        if len(others) == 1:
            u = others[0]
            return x[u] + shift[u] - shift[v]
        found = sorted((x[u] + shift[u], 1.0 if u < boxes else 0.5) for u in others)
        half = sum(w for _, w in found) / 2
        seen = 0.0
        for i, (at, w) in enumerate(found):
            seen += w
            if seen > half + 1e-9:
                return at - shift[v]
            if abs(seen - half) <= 1e-9:
                return (at + found[i + 1][0]) / 2 - shift[v]
        return found[-1][0] - shift[v]

    def _align(self, row: list[int], offsets: list[float], near: list[list[int]]) -> None:
        """Place ``row`` in order, each vertex as near as spacing (``offsets``: from the
        row's first) allows to where its neighbours in ``near`` want it (:meth:`_want`):
        weighted isotonic regression by pool adjacent violators, a block of vertices
        pushed together sitting at its members' weighted mean."""
        x, weight = self.x, self.weight
        if len(row) <= 2:  # (most rows of a long chain: a box, and a long edge beside it)
            self._align_few(row, offsets, near)
            return
        shift = self.shift
        weights: list[float] = []  # the blocks: weight, weighted sum of targets, size
        sums: list[float] = []
        sizes: list[int] = []
        for v, offset in zip(row, offsets, strict=True):
            others = near[v]
            if not others:
                w, total = _FREE_WEIGHT, _FREE_WEIGHT * (x[v] - offset)
            elif len(others) == 1:
                u = others[0]
                w = weight[v]
                total = w * (x[u] + shift[u] - shift[v] - offset)
            else:
                w = weight[v]
                total = w * (self._want(v, others) - offset)
            size = 1
            while weights and sums[-1] * w >= total * weights[-1]:
                w += weights.pop()
                total += sums.pop()
                size += sizes.pop()
            weights.append(w)
            sums.append(total)
            sizes.append(size)
        i = 0
        for w, total, size in zip(weights, sums, sizes, strict=True):
            at = total / w
            for _ in range(size):
                x[row[i]] = at + offsets[i]
                i += 1

    def _align_few(self, row: list[int], offsets: list[float], near: list[list[int]]) -> None:
        """:meth:`_align` of a row of one or two vertices, worked out directly."""
        x = self.x
        wants = [self._want(v, near[v]) if near[v] else x[v] for v in row]
        if len(row) == 1:
            x[row[0]] = wants[0]
            return
        a, b = row
        gap = offsets[1]
        if wants[1] - wants[0] >= gap:
            x[a], x[b] = wants
            return
        wa = self.weight[a] if near[a] else _FREE_WEIGHT
        wb = self.weight[b] if near[b] else _FREE_WEIGHT
        at = (wa * wants[0] + wb * (wants[1] - gap)) / (wa + wb)
        x[a], x[b] = at, at + gap

    # ------------------------------------------------------------------ heights and routes
    def vertical(self, doubled: bool) -> list[float]:
        """Each vertex's y (its layer's middle); returns the layers' bottoms (the last:
        the picture's height)."""
        gap = self.spacing.rank / 2 if doubled else self.spacing.rank
        self.y = [0.0] * self.count
        self.bands = []
        top = 0.0
        for row in self.rows:
            tall = max((self.tall[v] for v in row), default=0.0)
            for v in row:
                self.y[v] = top + tall / 2
            self.bands.append((top, top + tall))
            top += tall + gap
        return [bottom for _, bottom in self.bands]

    def routes(self, chains: list[list[int]], labels: Sequence[tuple[float, float] | None],
               room: Sequence[float]) -> tuple[list[list[Waypoint]], list[Point | None]]:
        x, y, shift = self.x, self.y, self.shift
        outs: dict[int, list[int]] = {}
        ins: dict[int, list[int]] = {}
        for i, path in enumerate(chains):
            outs.setdefault(path[0], []).append(i)
            ins.setdefault(path[-1], []).append(i)
        start: dict[int, float] = {}
        end: dict[int, float] = {}
        for table, ends, side in ((outs, start, 1), (ins, end, -2)):
            for v, found in table.items():  # (in the order of where each edge goes next)
                found.sort(key=lambda i: x[chains[i][side]] + shift[chains[i][side]])
                k = len(found)
                step = min(self.spacing.port, 2 * room[v] / (k - 1)) if k > 1 else 0.0
                for j, i in enumerate(found):
                    ends[i] = x[v] + (j - (k - 1) / 2) * step
        routes: list[list[Waypoint]] = []
        label_at: list[Point | None] = []
        clear = self.spacing.node * 0.8  # (a waypoint stands this far from a box, or more)
        for i, path in enumerate(chains):
            s, t = path[0], path[-1]
            centres = [(start[i], y[s] + self.tall[s] / 2)]
            centres += [(x[v] + shift[v], y[v]) for v in path[1:-1]]
            centres.append((end[i], y[t] - self.tall[t] / 2))
            points: list[tuple[float, float, bool]] = [(*centres[0], False)]
            for k, v in enumerate(path[1:-1], start=1):
                top, bottom = self.bands[self.level[v]]
                (ax, ay), (px, py), (bx, by) = centres[k - 1], centres[k], centres[k + 1]
                if abs(bx - ax) / (by - ay) * (bottom - top) / 2 <= clear:
                    points.append((px, py, False))  # on its way: passing clear of the boxes
                else:  # a steep turn: straight down the layer beside its boxes, then on
                    points += [(px, top, True), (px, bottom, True)]
            points.append((*centres[-1], False))
            routes.append(_slopes(points))
            if labels[i] is not None and len(path) > 2:
                v = path[1]
                label_at.append((x[v] + shift[v] + 4.0, y[v]))
            else:
                label_at.append(None)
        return routes, label_at


def _slopes(points: list[tuple[float, float, bool]]) -> list[Waypoint]:
    """Each point with the route's slope there (dx / dy), chosen so that the curve through
    them never overshoots (Fritsch-Carlson's monotone cubic, x as a function of y): where
    the route turns (or runs straight down a layer, ``True``) its slope is 0, elsewhere the
    mean of the chords on either side, shortened where it would swing past a point."""
    ys = [py for _, py, _ in points]
    xs = [px for px, _, _ in points]
    n = len(points)
    chords = [(xs[k + 1] - xs[k]) / (ys[k + 1] - ys[k]) if ys[k + 1] > ys[k] else 0.0
              for k in range(n - 1)]
    slopes = [chords[0]] + [
        0.0 if points[k][2] or chords[k - 1] * chords[k] <= 0 else (chords[k - 1] + chords[k]) / 2
        for k in range(1, n - 1)] + [chords[-1]]
    for k, chord in enumerate(chords):
        if chord == 0:
            slopes[k] = slopes[k + 1] = 0.0
            continue
        a, b = slopes[k] / chord, slopes[k + 1] / chord
        if a * a + b * b > 9:
            t = 3 / (a * a + b * b) ** 0.5
            slopes[k], slopes[k + 1] = t * a * chord, t * b * chord
    return [(xs[k], ys[k], slopes[k]) for k in range(n)]
