"""DOT text for a chain, optionally with step statuses: pure, deterministic, no Graphviz needed.

What the drawing encodes (the legend, :mod:`chainlab.render.legend`, repeats it):

* shape by kind: rounded box = no side effects; square box with ``⚡`` = side effects
  (``⚡=`` when idempotent); octagon with ``☐`` = needs a person's approval; ``◇`` = has a
  ``when`` condition; a sub-chain (``tool: chain:NAME``) is a cluster holding its steps when
  its chain is known, else a folder node marked ``⇢``; an agent step (``✦``) whose model
  has asked for calls is a cluster of its model turns (ellipses) with each turn's calls side
  by side under it (:data:`TURNS_DRAWN` turns and :data:`CALLS_DRAWN` calls a turn at most,
  the rest counted), and it grows as the run records turns;
* status (when given) by fill, border colour, border pattern and a text line
  ``"✓ succeeded · <badges>"`` (symbol + word + badges such as the attempt count), see
  :data:`~chainlab.render.STATUS_STYLE`;
* ``depends_on`` edges solid, data edges (derived from references) dashed and labelled with
  the reference;
* plan problems: a dashed vermillion border and a ``⚠ code`` line on the faulty step; a
  step id used by several steps draws one node per step, each marked.

Ids are stable (:mod:`chainlab.render.ids`): the Graphviz node of a step is named by its id
(``parent/child`` inside sub-chains) and its SVG element id is the view's scope + the escaped
step id, so the same input always gives the same text, and a view can address a step's SVG
element. A step's kind and markers come from :func:`chainlab.render.style.step_kind`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from chainlab.plan.graph import Edge, edges
from chainlab.render.grid import Grid, plan_grids
from chainlab.render.ids import element_id, occurrence

# the step names of a drawing, importable from here as before chainlab.render.ids existed
from chainlab.render.ids import escape_id as escape_id
from chainlab.render.ids import step_of as step_of
from chainlab.render.scene import Link, Scene, Shape
from chainlab.render.style import (
    CLUSTER_FILL,
    CLUSTER_STROKE,
    EDGE_COLOR,
    FONT_NAME,
    KIND_MARK,
    MUTED_TEXT,
    NEUTRAL,
    PROBLEM,
    RESERVED_COUNTS_LINE,
    RESERVED_LINE,
    StatusStyle,
    status_line,
    status_style,
    step_kind,
)

if TYPE_CHECKING:
    from chainlab.agent.turns import TurnShape
    from chainlab.plan.schema import Chain, Step
    from chainlab.tools import Toolbox

__all__ = ["CALLS_DRAWN", "TURNS_DRAWN", "Drawing", "chain_dot", "draw_chain", "quote",
           "quote_multiline"]

#: an agent step's turns drawn at most (the last ones; the earlier are one counted node)
TURNS_DRAWN = 8
#: calls of one turn drawn at most (the rest counted on one node)
CALLS_DRAWN = 6

_SCOPE_TOKEN = "\x00scope\x00"
_MAX_TEXT = 34


def quote(text: str) -> str:
    """A DOT double-quoted string (backslashes and quotes escaped; no escape sequences)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _lines(*lines: str) -> str:
    """A multi-line DOT label: each line escaped, joined by DOT's centred line break."""
    body = "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
                      for line in lines)
    return f'"{body}"'


def _left_lines(*lines: str) -> str:
    """A multi-line DOT label whose lines all start at its left edge (a cluster's title: a
    centred second line under a left-justified first one read as misplaced)."""
    body = "".join(line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + "\\l"
                   for line in lines)
    return f'"{body}"'


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class _Anchor:
    """Where edges attach to a step: a node, or (for a cluster) an inner node + the cluster."""

    head: str
    tail: str
    cluster: str | None = None


@dataclass(slots=True)
class _Writer:
    scope: str
    toolbox: Toolbox | None
    chains: Mapping[str, Chain]
    statuses: Mapping[str, str] | None
    badges: Mapping[str, str]
    notes: Mapping[str, str]
    problems: Mapping[str, list[Any]]
    reserve: bool
    agents: Mapping[str, Sequence[TurnShape]] = field(default_factory=dict)
    out: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    edge_kinds: set[str] = field(default_factory=set)
    drawn: list[str] = field(default_factory=list)
    n_edges: int = 0
    scene: Scene = field(default_factory=Scene)  # the same picture as data

    # -------------------------------------------------------------- styling
    def _status_style(self, step_id: str) -> StatusStyle | None:
        if self.statuses is None:
            return None
        if self.reserve:
            return status_style("pending")
        return status_style(str(self.statuses.get(step_id, "pending")))

    def _status_text(self, step_id: str, *, counts: bool = False) -> str | None:
        if self.statuses is None:
            return None
        if self.reserve:  # (a for_each step's line counts its instances: reserved wider)
            return RESERVED_COUNTS_LINE if counts else RESERVED_LINE
        return status_line(str(self.statuses.get(step_id, "pending")), self.badges.get(step_id))

    def _problem_text(self, step_id: str) -> str | None:
        found = self.problems.get(step_id)
        if not found:
            return None
        code = getattr(found[0], "code", "problem")
        more = f" (+{len(found) - 1})" if len(found) > 1 else ""
        return f"⚠ {code}{more}"

    def _tooltip(self, step: Step, full_id: str, extra: Iterable[str] = ()) -> str:
        parts = [f"{full_id}: {step.tool}"]
        if step.description:
            parts.append(step.description)
        if step.when:
            parts.append(f"when: {step.when}")
        for p in self.problems.get(full_id, ()):
            parts.append(f"⚠ [{getattr(p, 'code', '?')}] {getattr(p, 'message', p)}")
        parts.extend(extra)
        if full_id in self.notes:
            parts.append(self.notes[full_id])
        text = "\n".join(parts)
        return text if len(text) <= 600 else text[:599] + "…"

    # -------------------------------------------------------------- steps
    def chain_level(self, chain: Chain, prefix: str, indent: str,
                    stack: tuple[str, ...]) -> dict[str, _Anchor]:
        """Emit the steps of one chain level (recursing into sub-chains) and its edges."""
        anchors: dict[str, _Anchor] = {}
        counts = Counter(step.id for step in chain.steps)
        seen: Counter[str] = Counter()
        level_edges = edges(chain)
        # interchangeable steps (a wide fan-out) are drawn as a grid (chainlab.render.grid)
        grids = plan_grids([s.id for s in chain.steps], level_edges, prefix=prefix, eligible={
            s.id for s in chain.steps if counts[s.id] == 1 and prefix + s.id not in self.agents
            and not (s.is_subchain and self.chains.get(s.subchain_name or ""))})
        in_grid = {m: g for g in grids for m in g.members}
        by_id = {prefix + s.id: s for s in chain.steps}
        for step in chain.steps:
            full = prefix + step.id
            grid = in_grid.get(full)
            if grid is not None:
                if full == grid.members[0]:
                    self.grid(grid, by_id, indent, anchors)
                continue
            seen[step.id] += 1
            if counts[step.id] > 1:  # an invalid plan: draw every step, each marked
                name = full if seen[step.id] == 1 else occurrence(full, seen[step.id])
                self.drawn.append(name)
                self.node(step, full, indent, name=name, duplicated=True)
                anchors.setdefault(full, _Anchor(name, name))  # edges meet the first
                continue
            self.drawn.append(full)
            sub = self.chains.get(step.subchain_name or "") if step.is_subchain else None
            if sub is not None and sub.steps and sub.name not in stack \
                    and step.for_each is None:  # (one node for all its instances)
                anchors[full] = self.cluster(step, sub, full, indent, stack)
            elif full in self.agents and step.for_each is None:
                anchors[full] = self.agent(step, full, indent)
            else:
                self.node(step, full, indent)
                anchors[full] = _Anchor(full, full)
        grouped: dict[tuple[str, str, str], Edge] = {}
        for e in level_edges:
            src, dst = in_grid.get(prefix + e.source), in_grid.get(prefix + e.target)
            if src is None and dst is None:
                self.edge(e, prefix, anchors, indent)
                continue
            # one edge stands for a grid's edges to (from) the same step or grid
            key = (src.name if src else e.source, dst.name if dst else e.target, e.kind)
            first = grouped.setdefault(key, e)
            if first.label != e.label and first.label and not first.label.endswith(" …"):
                grouped[key] = Edge(first.source, first.target, first.kind, f"{first.label} …")
        for (_, _, _), e in grouped.items():
            self.grid_edge(e, prefix, anchors, in_grid, indent)
        return anchors

    def grid(self, grid: Grid, steps: Mapping[str, Step], indent: str,
             anchors: dict[str, _Anchor]) -> None:
        """A group of interchangeable steps as a cluster of rows, stacked by invisible
        edges (:mod:`chainlab.render.grid`)."""
        inner = indent + "  "
        self.out.append(f"{indent}subgraph {quote(grid.name)} {{")
        self.out += [f"{inner}id={quote(f'{self.scope}-{grid.name}')};",
                     f"{inner}label={quote(grid.label())}; labeljust=l; fontsize=10;",
                     f"{inner}style=\"rounded,dashed\"; color={quote(CLUSTER_STROKE)};"]
        self.scene.grids.append(grid)
        for full in grid.members:
            self.drawn.append(full)
            self.node(steps[full], full, inner, grid=grid.name)
            anchors[full] = _Anchor(full, full)
        self.out += [f"{inner}{quote(a)} -> {quote(b)} [style=invis];"
                     for a, b in grid.columns()]
        self.out += [f"{inner}{{rank=same; {' -> '.join(quote(m) for m in row)} [style=invis]}}"
                     for row in grid.rows() if len(row) > 1]
        self.out.append(f"{indent}}}")

    def grid_edge(self, e: Edge, prefix: str, anchors: Mapping[str, _Anchor],
                  in_grid: Mapping[str, Grid], indent: str) -> None:
        """The one edge that stands for a grid's edges (from or to one step, or another
        grid), plus the invisible edges that keep every row of the grid in its place."""
        src_grid, dst_grid = in_grid.get(prefix + e.source), in_grid.get(prefix + e.target)
        src = _Anchor(src_grid.tail, src_grid.tail, src_grid.name) if src_grid \
            else anchors[prefix + e.source]
        dst = _Anchor(dst_grid.head, dst_grid.head, dst_grid.name) if dst_grid \
            else anchors[prefix + e.target]
        self.edge(e, prefix, {prefix + e.source: src, prefix + e.target: dst}, indent)
        if dst_grid is not None:  # the first row sits below the source
            self.out += [f"{indent}{quote(src.tail)} -> {quote(m)} [style=invis];"
                         for m in dst_grid.top]
        if src_grid is not None:  # the target sits below every column
            self.out += [f"{indent}{quote(m)} -> {quote(dst.head)} [style=invis];"
                         for m in src_grid.bottom]

    def node(self, step: Step, full: str, indent: str, *, name: str | None = None,
             duplicated: bool = False, title: str | None = None,
             grid: str | None = None) -> None:
        """One step's node; ``name`` (default ``full``) is its Graphviz name, distinct for
        each step that repeats an id (``duplicated``: marked as a problem even when the
        problems were not given); ``title``: its first line (default the step's id);
        ``grid``: the grid it is a cell of."""
        name = name or full
        kind, marks = step_kind(step, self.toolbox)
        self.kinds.add(kind)
        if KIND_MARK["idempotent"] in marks:  # markers beyond the shape go in the legend too
            self.kinds.add("idempotent")
        elif KIND_MARK["effect"] in marks:
            self.kinds.add("effect")
        if step.when:
            self.kinds.add("conditional")
        tool = step.tool if not step.is_subchain else f"chain:{step.subchain_name}"
        lines = [_clip(title or step.id), _clip(f"{marks} {tool}".strip())]
        mapped = step.for_each is not None
        if mapped:  # ONE node for every instance, whatever their number
            self.kinds.add("for_each")
            source = step.for_each.strip("{} ") if step.for_each else ""
            lines.append(_clip(f"for each {source}"))
        problem = self._problem_text(full) or (
            "⚠ duplicate_step" if duplicated and not self.reserve else None)
        if problem:
            lines.append(problem)
            self.kinds.add("problem")
        status = self._status_text(full, counts=mapped)
        if status is not None:
            lines.append(status)
        style = self._status_style(full) or (PROBLEM if problem else NEUTRAL)
        shape = {"confirm": "octagon", "subchain": "folder"}.get(
            kind, "box")
        styles = ["rounded"] if kind == "plain" else []
        styles.append("filled")
        if style.line != "solid":
            styles.append(style.line)
        tooltip = self._tooltip(step, full)
        self.scene.shapes.append(Shape(
            name, shape, kind == "plain", style.fill, style.stroke, style.width, style.line,
            style.text, tuple(lines), tooltip, grid))
        # (one f-string: element ids, styles and colours hold nothing DOT must escape; this
        # runs once per step, 3,332 times for a large run)
        self.out.append(
            f'{indent}{quote(name)} [id="{element_id(self.scope, name)}", class="cl-step", '
            f'shape={shape}, style="{",".join(styles)}", fillcolor="{style.fill}", '
            f'color="{style.stroke}", penwidth={_num(style.width)}, '
            f'fontcolor="{style.text}", label={_lines(*lines)}, '
            f"tooltip={quote_multiline(tooltip)}];")

    def open_cluster(self, name: str, full: str, lines: list[str], tooltip: str,
                     indent: str) -> None:
        """The head of a step drawn as a cluster (a sub-chain, an agent): its look follows
        the step's status as a node's does (the status is its label's last line)."""
        style = self._status_style(full)
        if style is None:
            problem = full in self.problems
            fill, stroke, text, width, line = (CLUSTER_FILL, PROBLEM.stroke if problem else
                                               CLUSTER_STROKE, MUTED_TEXT, 1.2, "dashed")
        else:
            fill, stroke, text, width, line = (style.fill, style.stroke, style.text,
                                               style.width, style.line)
        styles = ["rounded", "filled"] + ([line] if line != "solid" else [])
        inner = indent + "  "
        self.scene.clusters += 1
        self.out.append(f"{indent}subgraph {quote(name)} {{")
        for key, value in [
            ("id", quote(element_id(self.scope, full))),
            ("class", '"cl-step"'),
            ("label", _left_lines(*lines)),
            ("labeljust", "l"),
            ("fontsize", "10"),
            ("style", quote(",".join(styles))),
            ("fillcolor", quote(fill)),
            ("color", quote(stroke)),
            ("penwidth", _num(width)),
            ("fontcolor", quote(text)),
            ("tooltip", quote_multiline(tooltip)),
        ]:
            self.out.append(f"{inner}{key}={value};")

    def cluster(self, step: Step, sub: Chain, full: str, indent: str,
                stack: tuple[str, ...]) -> _Anchor:
        self.kinds.add("subchain")
        name = f"cluster_{full}"
        status = self._status_text(full)
        problem = self._problem_text(full)
        head = f"{KIND_MARK['subchain']} {_clip(step.id)} · chain:{_clip(sub.name)}"
        lines = [head] + ([problem] if problem else []) + ([status] if status else [])
        self.open_cluster(name, full, lines, self._tooltip(step, full, [
            f"sub-chain {sub.name!r}"]), indent)
        anchors = self.chain_level(sub, full + "/", indent + "  ", (*stack, sub.name))
        self.out.append(f"{indent}}}")
        sub_edges = edges(sub)
        has_in = {e.target for e in sub_edges}
        has_out = {e.source for e in sub_edges}
        ids = [full + "/" + s.id for s in sub.steps]
        first = next((i for i in ids if i[len(full) + 1:] not in has_in), ids[0])
        last = next((i for i in reversed(ids) if i[len(full) + 1:] not in has_out), ids[-1])
        return _Anchor(anchors[first].head, anchors[last].tail, name)

    def agent(self, step: Step, full: str, indent: str, title: str | None = None) -> _Anchor:
        """An agent step that has grown: a cluster holding its model turns, each an ellipse
        with the turn's calls side by side under it (a call that is itself an agent step
        with turns is a cluster of its own); the turns before the last :data:`TURNS_DRAWN`
        are one counted ellipse, a turn's calls past :data:`CALLS_DRAWN` one counted node."""
        from chainlab.agent.turns import call_plan_step

        self.kinds.add("agent")
        _, marks = step_kind(step, self.toolbox)
        name = f"cluster_{full}"
        status = self._status_text(full, counts=True)
        problem = self._problem_text(full)
        lines = [_clip(f"{marks} {title or step.id} · {step.tool}".strip(), 48)]
        lines += ([problem] if problem else []) + ([status] if status else [])
        turns = self.agents[full]
        self.open_cluster(name, full, lines, self._tooltip(step, full, [
            f"{len(turns)} model turn(s) drawn"]), indent)
        inner = indent + "  "
        folded, shown = turns[:-TURNS_DRAWN], turns[-TURNS_DRAWN:]
        heads: list[str] = []  # the first node, and the nodes the next turn follows
        tails: list[str] = []
        if folded:
            first = f"{full}#turns"
            n_calls = sum(len(t.calls) for t in folded)
            self.turn_node(first, [f"{KIND_MARK['agent']} turns {folded[0].turn} to "
                                   f"{folded[-1].turn}", f"{n_calls:,} calls"], inner)
            heads, tails = [first], [first]
        for t in shown:
            node = f"{full}#t{t.turn}"
            self.turn_node(node, _turn_lines(t), inner, pending=t.next)
            heads = heads or [node]
            self.out += [f"{inner}{quote(tail)} -> {quote(node)} [arrowsize=0.5];"
                         for tail in tails]
            row: list[_Anchor] = []
            for call_id, tool in t.calls[:CALLS_DRAWN]:
                self.drawn.append(call_id)
                call = call_plan_step(tool)  # (its kind and marks)
                if call_id in self.agents:
                    row.append(self.agent(call, call_id, inner, title=call_id))
                else:
                    self.node(call, call_id, inner, title=call_id)
                    row.append(_Anchor(call_id, call_id))
            if len(t.calls) > CALLS_DRAWN:
                more = f"{node}+"
                self.turn_node(more, [f"+{len(t.calls) - CALLS_DRAWN:,} more calls"], inner,
                               pending=True)
                row.append(_Anchor(more, more))
            if len(row) > 1:
                self.out.append(f"{inner}{{rank=same; "
                                + "; ".join(quote(a.head) for a in row) + "}")
            for a in row:
                lhead = f", lhead={quote(a.cluster)}" if a.cluster else ""
                self.out.append(f"{inner}{quote(node)} -> {quote(a.head)} "
                                f"[arrowsize=0.5{lhead}];")
            tails = [a.tail for a in row] or [node]
        self.out.append(f"{indent}}}")
        return _Anchor(heads[0], tails[0], name)

    def turn_node(self, name: str, lines: list[str], indent: str, *,
                  pending: bool = False) -> None:
        """A model turn (not a step: no status of its own, never selected)."""
        attrs = [("id", quote(element_id(self.scope, name))), ("class", '"cl-turn"'),
                 ("shape", "ellipse"), ("style", quote("filled,dashed" if pending else "filled")),
                 ("fillcolor", quote(CLUSTER_FILL)), ("color", quote(CLUSTER_STROKE)),
                 ("fontcolor", quote(MUTED_TEXT)), ("fontsize", "9"),
                 ("margin", '"0.06,0.02"'), ("label", _lines(*lines))]
        self.out.append(f"{indent}{quote(name)} [{_attrs(attrs)}];")

    def edge(self, e: Edge, prefix: str, anchors: Mapping[str, _Anchor], indent: str) -> None:
        src, dst = anchors[prefix + e.source], anchors[prefix + e.target]
        self.edge_kinds.add(e.kind)
        label = _clip(e.label or "", 36) if e.kind == "data" else ""
        self.scene.links.append(Link(src.tail, dst.head, e.kind, label, self.n_edges,
                                     src.cluster, dst.cluster))
        attrs = f'id="{self.scope}-e{self.n_edges}"'  # (nothing in an id to escape)
        self.n_edges += 1
        # no edge tooltips: Graphviz's <title>a->b</title> already is one (and the SVG of a
        # 200-step chain is ~40 KB smaller without the <a> wrappers)
        if e.kind == "data":
            attrs += f", style=dashed, label={quote(label)}"
        if src.cluster:
            attrs += f", ltail={quote(src.cluster)}"
        if dst.cluster:
            attrs += f", lhead={quote(dst.cluster)}"
        self.out.append(f"{indent}{quote(src.tail)} -> {quote(dst.head)} [{attrs}];")


def _turn_lines(t: TurnShape) -> list[str]:
    """What a model turn's ellipse says: the turn, what it asked for, its tokens."""
    mark = KIND_MARK["agent"]
    if t.final:
        head = f"{mark} turn {t.turn} · final answer"
    elif t.next:
        head = f"{mark} turn {t.turn} · next"
    else:
        n = len(t.calls)
        parts = [f"{mark} turn {t.turn}", f"{n} call{'s' if n != 1 else ''}" if n else ""]
        parts += [f"{t.refused} refused" if t.refused else "",
                  "answer sent back" if t.feedback else ""]
        head = " · ".join(p for p in parts if p)
    return [head] + ([f"{t.tokens:,} tokens"] if t.tokens else [])


def quote_multiline(text: str) -> str:
    """A DOT string whose newlines become line breaks (for tooltips)."""
    return _lines(*text.split("\n"))


def _attrs(attrs: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in attrs)


def _num(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True, slots=True)
class Drawing:
    """DOT text plus what a view needs to know about it.

    ``steps`` maps every drawn step id (clusters included) to its SVG element id;
    ``kinds``/``edge_kinds`` say which step and edge kinds occur (the legend shows those);
    ``scene`` is the same picture as data (for chainlab's own layout,
    :mod:`chainlab.render.layout`).
    """

    dot: str
    scope: str
    steps: dict[str, str]
    kinds: frozenset[str]
    edge_kinds: frozenset[str]
    statuses: bool
    scene: Scene = field(default_factory=Scene, compare=False, repr=False)


def draw_chain(
    chain: Chain,
    toolbox: Toolbox | None = None,
    statuses: Mapping[str, str] | None = None,
    problems: Iterable[Any] | None = None,
    chains: Mapping[str, Chain] | None = None,
    *,
    badges: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    title: str | None = None,
    rankdir: Literal["TB", "LR"] = "TB",
    scope: str | None = None,
    reserve_status: bool = False,
    agents: Mapping[str, Sequence[TurnShape]] | None = None,
) -> Drawing:
    """:func:`chain_dot` plus the facts a view needs (see :class:`Drawing`)."""
    if chains is None:
        chains = dict(getattr(toolbox, "chains", {}) or {})
    if reserve_status and statuses is None:
        statuses = {}
    by_step: dict[str, list[Any]] = {}
    chain_problems: list[Any] = []
    for p in problems or ():
        step_id = getattr(p, "step_id", None)
        (by_step.setdefault(step_id, []) if step_id else chain_problems).append(p)
    w = _Writer(scope=scope or _SCOPE_TOKEN, toolbox=toolbox, chains=chains,
                statuses=statuses, badges=badges or {}, notes=notes or {}, problems=by_step,
                reserve=reserve_status, agents=agents or {})
    head_lines = [title if title is not None else chain.name]
    head_lines += [_clip(f"⚠ [{getattr(p, 'code', '?')}] {getattr(p, 'message', p)}", 100)
                   for p in chain_problems]
    w.out += [
        f"digraph {quote(chain.name)} {{",
        f"  graph [id={quote(w.scope)}, rankdir={rankdir}, bgcolor=\"transparent\", "
        "compound=true, outputorder=\"edgesfirst\", nodesep=0.3, ranksep=0.45, pad=0.12, "
        f"fontname={quote(FONT_NAME)}, fontsize=11, fontcolor={quote(MUTED_TEXT)}, "
        f"label={_lines(*head_lines)}, labelloc=t, labeljust=l];",
        f"  node [fontname={quote(FONT_NAME)}, fontsize=10, margin=\"0.12,0.05\", height=0.3];",
        f"  edge [color={quote(EDGE_COLOR)}, fontname={quote(FONT_NAME)}, fontsize=8, "
        f"fontcolor={quote(MUTED_TEXT)}, arrowsize=0.7];",
    ]
    w.scene.name = chain.name
    w.scene.title = tuple(line for line in head_lines if line)
    w.scene.rankdir = rankdir
    w.chain_level(chain, "", "  ", (chain.name,))
    w.out.append("}")
    text = "\n".join(w.out) + "\n"
    final_scope = w.scope
    if scope is None:
        final_scope = "cl-" + hashlib.sha1(text.encode()).hexdigest()[:10]
        text = text.replace(_SCOPE_TOKEN, final_scope)
    steps = {step_id: element_id(final_scope, step_id) for step_id in w.drawn}
    return Drawing(text, final_scope, steps, frozenset(w.kinds), frozenset(w.edge_kinds),
                   statuses is not None, w.scene)


def chain_dot(
    chain: Chain,
    toolbox: Toolbox | None = None,
    statuses: Mapping[str, str] | None = None,
    problems: Iterable[Any] | None = None,
    chains: Mapping[str, Chain] | None = None,
    *,
    badges: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    title: str | None = None,
    rankdir: Literal["TB", "LR"] = "TB",
    scope: str | None = None,
    reserve_status: bool = False,
    agents: Mapping[str, Sequence[TurnShape]] | None = None,
) -> str:
    """DOT text drawing ``chain`` (pure: no Graphviz needed; same input -> same text).

    ``toolbox`` tells step kinds (side effects, confirmation); without it every tool step is
    drawn plain (the display path, :func:`chainlab.render.chain_mimebundle`, falls back to the
    default toolbox; this function stays pure). ``chains`` (else the toolbox's chains) lets
    sub-chains be drawn as clusters. ``statuses`` (``{step_id: status}``, sub-chain steps as
    ``parent/child``) adds a status line and status colours to every step (missing steps are
    ``pending``); ``badges`` adds a short text to a step's status line (the attempt count),
    ``notes`` a text to its tooltip. ``problems`` (``chain.problems(toolbox)``) marks the
    faulty steps; problems without a step are listed under the title. ``scope`` prefixes
    every SVG element id (default: a hash of the input, so equal inputs give equal ids).
    ``reserve_status`` lays out a status line wide enough for any status and the usual
    badges (``RESERVED_LINE``; live views patch it later). ``agents`` (a run's
    :func:`~chainlab.agent.turns.turn_shapes`) draws each agent step
    that has grown as the cluster of its turns and calls.
    The legend is not part of the DOT: :func:`chainlab.render.chain_svg` adds it to the SVG.

    Raises ValueError for an unknown status value.
    """
    return draw_chain(chain, toolbox, statuses, problems, chains, badges=badges, notes=notes,
                      title=title, rankdir=rankdir, scope=scope,
                      reserve_status=reserve_status, agents=agents).dot
