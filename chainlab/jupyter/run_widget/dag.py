"""The live DAG of the run widget: laid out once, sent once, then patched node by node.

:class:`DagView` holds the legend line and :class:`RunDag`, an anywidget whose ES module is
``widgets/dagview.js`` + ``widgets/rundag.js``: the SVG (Graphviz, once) fitted to the
output's width, with zoom and pan (a 1,000-step fan-out opens whole, its first and last
steps in view), and a click (or Enter) on a node selects its step. Each redraw sends ONE
small message naming only the steps whose look (status and caption) differs from what the
front end shows (:meth:`DagView.update`): a scrubber jump over a 3,332-step run restyles the
nodes that changed, never the whole picture (issue 40).

An agent step that records a model turn changes the picture's shape (its cluster grows a
turn and the turn's calls, DESIGN §18): :meth:`DagView.regrow` lays the new shape out and
sends it whole, once per turn; status changes stay patches.

Without Graphviz it says why and lists the steps with their statuses instead, so the
widget still works.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.errors import ChainlabError, MissingExtraError
from chainlab.jupyter._assets import dag_js
from chainlab.jupyter.run_widget.legend import BREAK_MARK, BREAK_NOTE, LegendView
from chainlab.plan.schema import Chain
from chainlab.render.live import css_string
from chainlab.render.style import status_line, status_style
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.agent.turns import TurnShape

__all__ = ["DagView", "RunDag"]

Look = tuple[str, str | None]  # (status, badge) of one step, as the front end shows it
_PENDING: Look = ("pending", None)
_CLASSES: list[type[W.DOMWidget]] = []


def RunDag(**traits: Any) -> W.DOMWidget:
    """A new live-DAG front end (an anywidget; ``chainlab[jupyter]`` installs it)."""
    if not _CLASSES:
        try:
            import anywidget
            import traitlets
        except ImportError as exc:
            raise MissingExtraError("anywidget", "jupyter", "the run widget's DAG") from exc

        class _RunDag(anywidget.AnyWidget):  # type: ignore[misc]
            """The SVG (sent once), its steps in order; ``selected``: the clicked step."""

            _esm = dag_js()
            svg = traitlets.Unicode("").tag(sync=True)
            order: Any = traitlets.List().tag(sync=True)  # SVG element ids, in step order
            steps = traitlets.Dict().tag(sync=True)  # SVG element id -> step id
            selected = traitlets.Unicode("").tag(sync=True)

        _CLASSES.append(_RunDag)
    return _CLASSES[0](**traits)


class DagView(W.VBox):
    """A chain's DAG whose step looks follow :meth:`update` (``chainlab.render.LiveDag``).

    The legend is a :class:`~chainlab.jupyter.run_widget.legend.LegendView` above the
    drawing (only the statuses present, collapsed to one line), not part of the SVG.
    ``canvas`` is the front end (None without Graphviz); :attr:`shown` is what it was told
    each step looks like, :attr:`last_patch` the steps the last update sent."""

    def __init__(self, chain: Chain, toolbox: Toolbox | None = None,
                 chains: Mapping[str, Chain] | None = None,
                 agents: Mapping[str, tuple[TurnShape, ...]] | None = None):
        self.chain, self.toolbox, self.chains = chain, toolbox, dict(chains or {}) or None
        self.live: Any = None
        self._unlaid: dict[str, tuple[TurnShape, ...]] | None = None  # a shape that failed
        self.unavailable: str | None = None
        self.legend: LegendView | None = None
        self.canvas: W.DOMWidget | None = None
        self.steps_html = W.HTML()  # the step list drawn instead of a DAG without Graphviz
        try:
            self.live = self._laid_out(agents)
            drawing = self.live.drawing
            self.legend = LegendView(self.live.scope, drawing.kinds, drawing.edge_kinds)
        except (ImportError, ChainlabError) as exc:  # GraphvizUnavailable / GraphvizError
            self.unavailable = str(exc)
        self.step_ids: list[str] = list(self.live.step_ids) if self.live is not None else []
        self.shown: list[Look] = [_PENDING] * len(self.step_ids)
        self.last_patch: dict[str, Look] = {}
        self.patches = 0  # messages sent (a patch, or the whole state for a new view)
        self._statuses: dict[str, str] = {}
        parts: list[W.Widget] = []
        if self.live is not None:
            order = [self.live.element_id(s) for s in self.step_ids]
            self.canvas = RunDag(svg=self.live.status_rules() + self.live.svg, order=order,
                                 steps=dict(zip(order, self.step_ids, strict=True)))
            self.canvas.on_msg(self._front_end_msg)
            parts = [self.legend, self.canvas]
        else:
            parts = [self.steps_html]
        super().__init__(parts)
        self.add_class("cl-dagview")

    def _laid_out(self, agents: Mapping[str, tuple[TurnShape, ...]] | None,
                  scope: str | None = None) -> Any:
        """This chain's ``LiveDag`` in the shape ``agents`` gives (a new ``scope`` unless
        given). No title in the picture: the widget's header names the chain (an exported
        picture printed it twice). Raises ImportError, GraphvizUnavailable, GraphvizError."""
        from chainlab.render import LiveDag

        return LiveDag(self.chain, toolbox=self.toolbox, chains=self.chains, legend=False,
                       title="", agents=agents, scope=scope)

    # kept for the widget: the front end whose ``selected`` follows node clicks
    @property
    def clicks(self) -> W.DOMWidget | None:
        return self.canvas

    @property
    def scope(self) -> str | None:
        """The unique CSS class of this view's SVG (None without Graphviz)."""
        return self.live.scope if self.live is not None else None

    def caption(self, step_id: str) -> str:
        """The status line the front end was told ``step_id`` shows."""
        status, badge = self.shown[self.step_ids.index(step_id)]
        return status_line(status, badge)

    def shown_by_step(self) -> dict[str, Look]:
        """Step id -> (status, badge), as the front end was told to show it."""
        return dict(zip(self.step_ids, self.shown, strict=True))

    def captions(self) -> dict[str, str]:
        """Every step's status line, as the front end was told to show it."""
        return {s: status_line(*look) for s, look in zip(self.step_ids, self.shown, strict=True)}

    def update(self, statuses: Mapping[str, str], badges: Mapping[str, str] | None = None,
               agents: Mapping[str, tuple[TurnShape, ...]] | None = None) -> None:
        """Show these step statuses (and badges such as ``"x2"``): one message naming only
        the steps that look different now; none when nothing changed. With ``agents``, the
        shape they give first (:meth:`regrow`). Raises ValueError for an unknown status."""
        if agents is not None:
            self.regrow(agents)
        badges = badges or {}
        self._statuses = dict(statuses)
        if self.legend is not None:
            ahead = any(BREAK_MARK in b for b in badges.values())
            self.legend.update(statuses.values(), [BREAK_NOTE] if ahead else [])
        if self.live is None:
            self._list(statuses, badges)
            return
        status_of, badge_of = statuses.get, badges.get  # (a scrubber position: O(steps))
        looks: list[Look] = [(status_of(s, "pending"), badge_of(s) or None)
                             for s in self.step_ids]
        shown = self.shown
        changed = [i for i, look in enumerate(looks) if look != shown[i]]
        self.last_patch = {self.step_ids[i]: looks[i] for i in changed}
        if not changed:
            return
        for status in {looks[i][0] for i in changed}:
            status_style(status)  # raises ValueError for an unknown status
        self.shown = looks
        self._send_looks(changed, reset=False)

    def regrow(self, agents: Mapping[str, tuple[TurnShape, ...]]) -> bool:
        """Show the agent steps' turns ``agents`` (``render.display.agent_turns``): when they
        differ from those drawn, the new shape is laid out (a layout is kept per shape) and
        sent whole, every step drawn pending until :meth:`update` (one message: the SVG,
        its steps and their order). True when it was redrawn; a shape Graphviz fails to lay
        out keeps the picture shown (its new calls are then not drawn)."""
        live, wanted = self.live, dict(agents)
        if live is None or wanted in (live.agents, self._unlaid):
            return False
        try:
            live = self._laid_out(agents, live.scope)
        except ChainlabError:  # (GraphvizError: the run goes on, its picture stays; this
            self._unlaid = wanted  # shape is not tried again on every redraw)
            return False
        self.live = live
        self.step_ids = list(live.step_ids)
        self.shown = [_PENDING] * len(self.step_ids)
        if self.legend is not None:
            self.legend.kinds = live.drawing.kinds
        order = [live.element_id(s) for s in self.step_ids]
        assert self.canvas is not None
        with self.canvas.hold_sync():
            self.canvas.order = order
            self.canvas.steps = dict(zip(order, self.step_ids, strict=True))
            self.canvas.svg = live.status_rules() + live.svg
        self.patches += 1
        return True

    def _send_looks(self, indices: list[int], *, reset: bool) -> None:
        by: dict[str, list[int]] = {}
        captions: dict[str, str] = {}
        plain: list[int] = []
        for i in indices:
            status, badge = self.shown[i]
            by.setdefault(status, []).append(i)
            if badge:
                captions[str(i)] = css_string(status_line(status, badge))
            elif not reset:
                plain.append(i)
        assert self.canvas is not None
        self.patches += 1
        self.canvas.send({"type": "states", "reset": reset, "by": by, "captions": captions,
                          "plain": plain})

    def _front_end_msg(self, _: Any, content: Any, buffers: Any = None) -> None:
        # a view was drawn (a cell shown again, a second view): it starts from the SVG's
        # own look (all pending), so it gets the whole state once
        if isinstance(content, dict) and content.get("type") == "ready":
            self._send_looks(list(range(len(self.shown))), reset=True)

    def _list(self, statuses: Mapping[str, str], badges: Mapping[str, str]) -> None:
        rows = "".join(
            f'<li><code>{html.escape(step_id)}</code> '
            f'<span class="cl-badge cl-s-{html.escape(status)}">{html.escape(status)}</span>'
            f"{' ' + html.escape(badges[step_id]) if step_id in badges else ''}</li>"
            for step_id, status in statuses.items())
        value = (f'<div class="cl-note">DAG not drawn: {html.escape(self.unavailable or "")}'
                 f'</div><ul class="cl-steplist">{rows}</ul>')
        if self.steps_html.value != value:
            self.steps_html.value = value

    def static_svg(self, statuses: Mapping[str, str],
                   badges: Mapping[str, str] | None = None,
                   agents: Mapping[str, tuple[TurnShape, ...]] | None = None) -> str:
        """The SVG with the colours baked in (for static exports), in the shape of
        ``agents`` (default: the one shown); "" without Graphviz."""
        live = self.live
        if live is None:
            return ""
        if agents is not None and dict(agents) != live.agents:  # (the widget is scrubbed)
            live = self._laid_out(agents, live.scope)
        return str(live.patched_svg(dict(statuses), dict(badges or {}) or None))
