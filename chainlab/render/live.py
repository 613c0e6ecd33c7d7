"""Live status on a DAG without re-layout: lay out once, then only recolour.

Graphviz takes ~33 ms per layout of a 200-node chain; recolouring takes well under a
millisecond. :class:`LiveDag` renders the chain once with a status line reserved in every
node, then offers two ways to show new statuses:

* :meth:`LiveDag.css` returns a small ``<style>`` block (one rule per status listing the nodes
  in it, plus one per node with a badge) that sets CSS custom properties on the nodes of
  :attr:`LiveDag.svg`; that SVG's own rules turn them into fill, border and text, and its
  status lines are HTML ``<div>``\\s in ``<foreignObject>``\\s whose text comes from CSS
  ``content``. Send :attr:`svg` once and the style block per update (an ipywidgets ``HTML``
  widget inserts both verbatim): ~3 ms in the browser for 200 nodes, against ~25 ms to
  resend the whole SVG.
* :meth:`LiveDag.patched_svg` returns a plain static SVG (attributes, real ``<text>``; no CSS),
  for nbconvert, GitHub and files. It is built from a template split once at every value
  that changes, so a patch is one ``"".join``.

Both give each step exactly the paint, text colour and status text that a fresh
``chain_svg(chain, statuses=...)`` would (a test checks it).

In a notebook (the widget layer does this; shown here with plain ipywidgets)::

    live = LiveDag.for_run(run)
    style = W.HTML(live.css(run_statuses(run), run_badges(run)))
    display(W.VBox([style, W.HTML(live.svg)]))
    redraw = Throttle(lambda _event: setattr(
        style, "value", live.css(run_statuses(run), run_badges(run))), rate=10)
    run.subscribe(redraw)       # at most 10 style updates per second, the last one always
    ...                         # when the run ends: redraw.flush(); and for nbconvert/GitHub
    display(SVG(live.patched_svg(run_statuses(run), run_badges(run))))
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from chainlab.render.dot import Drawing, draw_chain
from chainlab.render.markup import TEXT, add_legend, attrs, step_groups
from chainlab.render.style import FONT, STATUS_STYLE, dasharray, status_line, status_style

if TYPE_CHECKING:
    from chainlab.agent.turns import TurnShape
    from chainlab.plan.schema import Chain
    from chainlab.runtime.runtime import Run
    from chainlab.tools import Toolbox

__all__ = ["LiveDag", "css_string"]

_PAINT = re.compile(r' (?:fill|stroke|stroke-width|stroke-dasharray|fill-opacity|'
                    r'stroke-opacity)="[^"]*"')
_FILL = re.compile(r' fill="[^"]*"')
_Slot = tuple[int, str]  # (step index, "paint" | "tfill" | "status")
_PENDING = STATUS_STYLE["pending"]


def css_string(text: str) -> str:
    """A CSS string literal that is also safe inside an HTML ``<style>`` element."""
    body = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\a ")
            .replace("<", "\\3c "))
    return f'"{body}"'


def _num(x: float) -> str:
    return f"{x:g}"


class LiveDag:
    """A chain's DAG laid out ONCE, then recoloured by status as often as needed.

    ``LiveDag(chain, toolbox, chains)`` (or :meth:`for_run`) runs Graphviz once. Then:
    :attr:`svg` is the markup to display once (root classes ``cl-dag`` and :attr:`scope`,
    element ids :meth:`element_id` per step); :meth:`css` gives the ``<style>`` block for a set
    of statuses; :meth:`patched_svg` gives a static SVG with those statuses applied.

    ``scope`` defaults to ``cl-dag-<random>`` so two views on one page never share element
    ids or rules. A large chain is laid out by chainlab rather than Graphviz
    (:mod:`chainlab.render.layout`). Raises GraphvizUnavailable / GraphvizError (from
    :func:`to_svg`, for a chain Graphviz lays out).
    """

    def __init__(self, chain: Chain, toolbox: Toolbox | None = None,
                 chains: Mapping[str, Chain] | None = None, *, scope: str | None = None,
                 legend: bool = True, rankdir: Literal["TB", "LR"] = "TB",
                 title: str | None = None, backend: str = "auto",
                 agents: Mapping[str, tuple[TurnShape, ...]] | None = None):
        self.scope = scope or f"cl-dag-{secrets.token_hex(4)}"
        #: the turns of the agent steps drawn as clusters (a run that records a turn has a
        #: new shape: a new LiveDag lays it out, :func:`chainlab.render.display.agent_turns`)
        self.agents: dict[str, tuple[TurnShape, ...]] = dict(agents or {})
        # drawn with a placeholder scope: the same chain gives the same DOT text, so its
        # layout and its template are made once per shape (_template) and shared
        drawn = _drawn(chain, toolbox, chains, title, rankdir, self.agents)
        template = _template(drawn, legend, backend)
        self.drawing: Drawing = replace(
            drawn, dot=drawn.dot.replace(_PLACEHOLDER, self.scope), scope=self.scope,
            steps={s: e.replace(_PLACEHOLDER, self.scope) for s, e in drawn.steps.items()})
        self.step_ids: list[str] = list(self.drawing.steps)
        self._index = template.index
        self._parts = template.parts
        self.svg: str = template.svg.replace(_PLACEHOLDER, self.scope)
        self._values: dict[tuple[str, str | None], tuple[str, str, str]] = {}

    @classmethod
    def for_run(cls, run: Run, **options: Any) -> LiveDag:
        """A live view of a run's chain (its runtime's toolbox and sub-chains, its agent steps'
        turns as they are now)."""
        from chainlab.render.display import _run_chains, agent_turns

        return cls(run.chain, run.toolbox, _run_chains(run), agents=agent_turns(run),
                   **options)

    def element_id(self, step_id: str) -> str:
        """The SVG element id of a step's node or cluster. Raises KeyError for a step that is
        not drawn."""
        return self.drawing.steps[step_id]

    # ------------------------------------------------------------------ updating
    def _statuses(self, statuses: Mapping[str, Any]) -> list[str]:
        out = [str(statuses.get(step_id, "pending")) for step_id in self.step_ids]
        for status in set(out):
            status_style(status)  # raises ValueError for an unknown status
        return out

    def css(self, statuses: Mapping[str, Any], badges: Mapping[str, str] | None = None) -> str:
        """A ``<style>`` block that shows ``statuses`` (``{step_id: status}``; steps not in it
        are ``pending``, ids not drawn are ignored) and ``badges`` on :attr:`svg`. Every
        selector is an element id that contains this view's unique scope, so the block can
        only affect this view. Raises ValueError for an unknown status."""
        by_status: dict[str, list[str]] = {}
        current = self._statuses(statuses)
        for step_id, status in zip(self.step_ids, current, strict=True):
            by_status.setdefault(status, []).append(self.drawing.steps[step_id])
        rules = []
        for status in STATUS_STYLE:
            if status not in by_status:
                continue
            selector = ",".join(f"#{eid}" for eid in by_status[status])
            rules.append(f"{selector}{{{_look(status)}}}")
        for step_id, status in zip(self.step_ids, current, strict=True):
            badge = (badges or {}).get(step_id)
            if badge:
                line = css_string(status_line(status, badge))
                rules.append(f"#{self.drawing.steps[step_id]}{{--cl-c:{line}}}")
        return f'<style class="{self.scope}-status">\n' + "\n".join(rules) + "\n</style>"

    def status_rules(self) -> str:
        """A ``<style>`` block with one rule per status that styles a node of :attr:`svg`
        whose ``data-st`` attribute names it (a badge caption goes in the node's own
        ``--cl-c`` property): what a front end that patches single nodes sends once
        (``widgets/rundag.js``)."""
        rules = "\n".join(f'.{self.scope} [data-st="{status}"]{{{_look(status)}}}'
                          for status in STATUS_STYLE)
        return f'<style class="{self.scope}-looks">\n{rules}\n</style>'

    def _value(self, status: str, badge: str | None) -> tuple[str, str, str]:
        key = (status, badge)
        hit = self._values.get(key)
        if hit is None:
            from xml.sax.saxutils import escape

            st = status_style(status)
            paint = (f'fill="{st.fill}" stroke="{st.stroke}" stroke-width="{_num(st.width)}" '
                     f'stroke-dasharray="{dasharray(st.line)}"')
            hit = self._values[key] = (paint, f'fill="{st.text}"',
                                       escape(status_line(status, badge)))
        return hit

    def patched_svg(self, statuses: Mapping[str, Any],
                    badges: Mapping[str, str] | None = None) -> str:
        """A static SVG of this layout showing ``statuses`` and ``badges`` (no CSS: works in
        nbconvert HTML, on GitHub and as a file). Raises ValueError for an unknown status."""
        current = self._statuses(statuses)
        badges = badges or {}
        values = [self._value(status, badges.get(step_id))
                  for step_id, status in zip(self.step_ids, current, strict=True)]
        key = {"paint": 0, "tfill": 1, "status": 2}
        return "".join(p if isinstance(p, str) else values[p[0]][key[p[1]]]
                       for p in self._parts).replace(_PLACEHOLDER, self.scope)

    def html(self, statuses: Mapping[str, Any], badges: Mapping[str, str] | None = None) -> str:
        """:meth:`css` followed by :attr:`svg`: one HTML fragment showing ``statuses``."""
        return self.css(statuses, badges) + "\n" + self.svg


def _look(status: str) -> str:
    """The custom properties a node shows ``status`` with (fill, border, text, caption)."""
    st = STATUS_STYLE[status]
    return (f"--cl-f:{st.fill};--cl-s:{st.stroke};--cl-w:{_num(st.width)}px;"
            f"--cl-d:{dasharray(st.line)};--cl-t:{st.text};--cl-c:{css_string(st.caption)}")


_POINT = re.compile(r"(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)")
_INSET = 5.0  # points kept clear of the node's border on each side


def _x_span(shape_tag: str) -> tuple[float, float] | None:
    """The horizontal extent of a Graphviz shape (``points`` of a polygon, ``d`` of a path;
    never other attributes: ``stroke-dasharray="5,2"`` is not a point)."""
    found = attrs(shape_tag)
    xs = [float(x) for x, _ in _POINT.findall(found.get("points") or found.get("d") or "")]
    return (min(xs), max(xs)) if xs else None


def _status_box(text_attrs: dict[str, str], span: tuple[float, float] | None = None) -> str:
    """An HTML box replacing a status ``<text>``: same place and font, text from CSS, as wide
    as the step's shape (``span``) so that a long status line (``⇥ skipped · upstream
    failed``) ends in an ellipsis inside the node instead of running over its border."""
    size = float(text_attrs.get("font-size", "10"))
    x, y = float(text_attrs.get("x", "0")), float(text_attrs.get("y", "0"))
    anchor = text_attrs.get("text-anchor", "middle")
    width = 320.0
    left = {"middle": x - width / 2, "end": x - width}.get(anchor, x)
    if span is not None and span[1] - span[0] > 4 * _INSET:
        left, width = span[0] + _INSET, span[1] - span[0] - 2 * _INSET
    align = {"middle": "center", "end": "right"}.get(anchor, "left")
    height = size * 1.35
    font = text_attrs.get("font-family", FONT)
    return (f'<foreignObject class="cl-fo" x="{left:.2f}" y="{y - size * 1.02:.2f}" '
            f'width="{width:.2f}" height="{height:.2f}" style="overflow:visible">'
            f'<div xmlns="http://www.w3.org/1999/xhtml" class="cl-st" style="font-size:{size:g}px;'
            f"line-height:{height:.2f}px;text-align:{align};font-family:{font}\"></div>"
            "</foreignObject>")


# ---------------------------------------------------------------------- one template per shape
_PLACEHOLDER = "cl-dag-0scope0"  # stands for a view's scope in a shared template
_TEMPLATES: OrderedDict[tuple[str, bool, str], _Template] = OrderedDict()
_TEMPLATES_KEPT = 16
_templates_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Template:
    """A laid-out DAG ready for views, with :data:`_PLACEHOLDER` for their scope: the live
    markup (``svg``), the static template split at every value a status changes
    (``parts``) and each step's index."""

    svg: str
    parts: list[str | _Slot]
    index: dict[str, int]


_DRAWN: OrderedDict[tuple[Any, ...], Drawing] = OrderedDict()


def _drawn(chain: Chain, toolbox: Toolbox | None, chains: Mapping[str, Chain] | None,
           title: str | None, rankdir: Literal["TB", "LR"],
           agents: Mapping[str, tuple[TurnShape, ...]]) -> Drawing:
    """``draw_chain`` with the placeholder scope, once per drawing's inputs: the chain's
    content, what the drawing reads of its tools (which tool object, its side effects,
    idempotency, confirmation) and of its sub-chains. A widget opened again on a stored
    run (a new Chain object of the same content) skips the walk over its steps (a quarter
    of a second for 3,332 steps). The calls of the agents drawn (``agents``, part of the
    key: a run that records a turn is a new shape) are looked up as the chain's tools are."""
    known = dict(chains if chains is not None else getattr(toolbox, "chains", {}) or {})
    reached: dict[str, Chain] = {}
    tools: set[str] = {tool for turns in agents.values() for t in turns for _, tool in t.calls}
    pending = [chain]
    while pending:  # the chain and every sub-chain it reaches
        for step in pending.pop().steps:
            if step.is_subchain:
                name = step.subchain_name or ""
                if name in known and name not in reached:
                    reached[name] = known[name]
                    pending.append(known[name])
            else:
                tools.add(step.tool)
    looks = []
    for name in sorted(tools):
        tool = toolbox.get(name) if toolbox is not None and name in toolbox else None
        looks.append((name, None) if tool is None else (
            name, id(tool), tool.side_effects, tool.idempotent,
            tool.requires_confirmation if isinstance(tool.requires_confirmation, bool)
            else "callable"))
    key = (chain.model_dump_json(exclude_defaults=True), tuple(looks),
           tuple((n, c.model_dump_json(exclude_defaults=True)) for n, c in sorted(reached.items())),
           title, rankdir, tuple(sorted(agents.items())))
    with _templates_lock:
        hit = _DRAWN.get(key)
        if hit is not None:
            _DRAWN.move_to_end(key)
            return hit
    made = draw_chain(chain, toolbox, None, None, chains, reserve_status=True,
                      scope=_PLACEHOLDER, title=title, rankdir=rankdir, agents=agents)
    with _templates_lock:
        _DRAWN[key] = made
        if len(_DRAWN) > _TEMPLATES_KEPT:
            _DRAWN.popitem(last=False)
    return made


def _template(drawing: Drawing, legend: bool, backend: str) -> _Template:
    """The template of ``drawing`` (drawn with the placeholder scope): laid out once per
    DOT text (:func:`~chainlab.render.layout.layout_svg`: chainlab's layout or Graphviz, whose
    slow layouts :func:`~chainlab.render.svg.render_svg` also keeps on disk); the split is
    made once per shape too."""
    from chainlab.render.layout import layout_svg

    key = (drawing.dot, legend, backend)
    with _templates_lock:
        hit = _TEMPLATES.get(key)
        if hit is not None:
            _TEMPLATES.move_to_end(key)
            return hit
    base = layout_svg(drawing, backend=backend)
    if legend:
        base = add_legend(base, _PLACEHOLDER, statuses=True, kinds=drawing.kinds,
                          edge_kinds=drawing.edge_kinds)
    index = {step_id: i for i, step_id in enumerate(drawing.steps)}
    parts, svg = _split(base, drawing, index)
    made = _Template(svg, parts, index)
    with _templates_lock:
        _TEMPLATES[key] = made
        if len(_TEMPLATES) > _TEMPLATES_KEPT:
            _TEMPLATES.popitem(last=False)
    return made


def _split(base: str, drawing: Drawing, index: dict[str, int]) -> tuple[list[str | _Slot], str]:
    """The static template (split at every value that changes) and the live markup."""
    ids = {eid: step_id for step_id, eid in drawing.steps.items()}
    parts: list[str | _Slot] = []
    live: list[str] = []
    pos = 0
    for g in step_groups(base):
        step = ids.get(g.element_id)
        if step is None:
            continue
        i = index[step]
        span = _x_span(base[g.shape[0]:g.shape[1]]) if g.shape is not None else None
        if g.shape is not None:
            a, b = g.shape
            tag = _PAINT.sub("", base[a:b])
            head, rest = tag.split(" ", 1)
            parts += [base[pos:a], f"{head} ", (i, "paint"), f" {rest}"]
            live += [base[pos:a], f'{head} class="cl-shape" {rest}']
            pos = b
        for n, (a, b) in enumerate(g.texts):
            m = TEXT.match(base, a, b)
            assert m is not None
            tag_attrs = _FILL.sub("", m[1])
            last = n == len(g.texts) - 1
            parts += [base[pos:a], f"<text{tag_attrs} ", (i, "tfill"), ">",
                      (i, "status") if last else m[2], "</text>"]
            live += [base[pos:a], _status_box(attrs(m[1]), span) if last else base[a:b]]
            pos = b
    parts.append(base[pos:])
    live.append(base[pos:])
    markup = "".join(live)
    root_end = markup.index(">", markup.index("<svg")) + 1
    return parts, markup[:root_end] + "\n" + _base_style(_PLACEHOLDER) + markup[root_end:]


def _base_style(scope: str) -> str:
    s = f".{scope}"
    p = _PENDING
    return (
        f"<style>{s} .cl-shape{{fill:var(--cl-f,{p.fill});stroke:var(--cl-s,{p.stroke});"
        f"stroke-width:var(--cl-w,{_num(p.width)}px);"
        f"stroke-dasharray:var(--cl-d,{dasharray(p.line)})}}"
        f"{s} .cl-step text{{fill:var(--cl-t,{p.text})}}"
        f"{s} .cl-st{{margin:0;padding:0;white-space:nowrap;overflow:hidden;"
        f"text-overflow:ellipsis;color:var(--cl-t,{p.text})}}"
        f"{s} .cl-st::after{{content:var(--cl-c,{css_string(p.caption)})}}</style>\n")
