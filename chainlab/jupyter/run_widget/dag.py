"""The live DAG: the SVG is laid out and sent once; status changes only re-send a small,
scoped ``<style>`` block (a few KB instead of the whole SVG on every update)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as W

from chainlab.errors import ChainlabError
from chainlab.jupyter.run_widget.legend import BREAK_MARK, BREAK_NOTE, LegendView
from chainlab.plan.schema import Chain
from chainlab.tools import Toolbox

__all__ = ["DagView", "NodeClicks"]

# The run widget's DAG is an HTML widget (the SVG, sent once) plus a style patch; this tiny
# ES module sits next to them and turns a click (or Enter) on a step's node into
# ``selected`` (issue 29: selection follows the DAG, as in the designer).
_CLICKS_ESM = """
function render({ model, el }) {
  el.style.display = "none";
  let detach = null;
  let tries = 0;
  const attach = () => {
    // the view is rendered before it is put in the page: wait until it is in the DAG's box
    const root = el.closest(".cl-dagview");
    if (!root) {
      if (tries++ < 300) setTimeout(attach, 100);
      return;
    }
    const stepOf = (target) => {
      const steps = model.get("steps") || {};
      for (let node = target; node && node !== root; node = node.parentElement) {
        if (node.id && steps[node.id]) return steps[node.id];
      }
      return null;
    };
    const mark = () => {
      const steps = model.get("steps") || {};
      for (const [id, step] of Object.entries(steps)) {
        const node = root.querySelector(`[id="${CSS.escape(id)}"]`);
        if (!node || node.classList.contains("cl-clickable")) continue;
        node.setAttribute("tabindex", "0");
        node.setAttribute("role", "button");
        node.setAttribute("aria-label", `inspect step ${step}`);
        node.classList.add("cl-clickable");
      }
    };
    const pick = (step) => {
      model.set("selected", "");
      model.set("selected", step);
      model.save_changes();
    };
    const onClick = (event) => { const step = stepOf(event.target); if (step) pick(step); };
    const onKey = (event) => {
      const step = stepOf(event.target);
      if (step && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        pick(step);
      }
    };
    root.addEventListener("click", onClick);
    root.addEventListener("keydown", onKey);
    const observer = new MutationObserver(mark);
    observer.observe(root, { childList: true, subtree: true });
    mark();
    detach = () => {
      observer.disconnect();
      root.removeEventListener("click", onClick);
      root.removeEventListener("keydown", onKey);
    };
  };
  attach();
  return () => { tries = 1000; if (detach) detach(); };
}
export default { render };
"""


def _clicks_class() -> type[W.DOMWidget] | None:
    try:
        import anywidget
        import traitlets
    except ImportError:
        return None

    class NodeClicks(anywidget.AnyWidget):  # type: ignore[misc]
        """A click on a node of the DAG next to it sets ``selected`` (a step id)."""

        _esm = _CLICKS_ESM
        steps = traitlets.Dict().tag(sync=True)  # SVG element id -> step id
        selected = traitlets.Unicode("").tag(sync=True)

    return NodeClicks


_NODE_CLICKS: list[type[W.DOMWidget] | None] = []


def NodeClicks() -> W.DOMWidget | None:
    """A new node-click widget (None without anywidget: pick steps in the Inspector)."""
    if not _NODE_CLICKS:
        _NODE_CLICKS.append(_clicks_class())
    cls = _NODE_CLICKS[0]
    return cls() if cls is not None else None


class DagView(W.VBox):
    """A chain's DAG whose step colours follow :meth:`update` (``chainlab.render.LiveDag``).

    The legend is a :class:`~chainlab.jupyter.run_widget.legend.LegendView` above the
    drawing (only the statuses present, collapsed to one line), not part of the SVG; the
    drawing scrolls in its box (``.cl-dagbox``) instead of being clipped.

    Without Graphviz it says why and lists the steps with their statuses instead, so the
    widget still works.
    """

    def __init__(self, chain: Chain, toolbox: Toolbox | None = None,
                 chains: Mapping[str, Chain] | None = None):
        self.chain = chain
        self.live: Any = None
        self.unavailable: str | None = None
        self.legend: LegendView | None = None
        self.svg_html = W.HTML(layout=W.Layout(overflow="auto"))
        self.css_html = W.HTML(layout=W.Layout(height="0px", margin="0"))
        try:
            from chainlab.render import LiveDag

            self.live = LiveDag(chain, toolbox=toolbox, chains=dict(chains or {}) or None,
                                legend=False)
            self.svg_html.value = f'<div class="cl-dagbox">{self.live.svg}</div>'
            drawing = self.live.drawing
            self.legend = LegendView(self.live.scope, drawing.kinds, drawing.edge_kinds)
        except (ImportError, ChainlabError) as exc:  # GraphvizUnavailable / GraphvizError
            self.unavailable = str(exc)
        self._last: tuple[Any, ...] | None = None
        top = [self.legend] if self.legend is not None else []
        self.clicks = NodeClicks() if self.live is not None else None
        if self.clicks is not None:
            self.clicks.steps = {eid: step for step, eid in self.live.drawing.steps.items()}
        extra = [self.clicks] if self.clicks is not None else []
        super().__init__([self.css_html, *top, self.svg_html, *extra])
        self.add_class("cl-dagview")

    @property
    def scope(self) -> str | None:
        """The unique CSS class of this view's SVG (None without Graphviz)."""
        return self.live.scope if self.live is not None else None

    def update(self, statuses: Mapping[str, str], badges: Mapping[str, str] | None = None) -> None:
        """Show these step statuses (and badges such as ``"x2"``); a no-op when unchanged."""
        key = (dict(statuses), dict(badges or {}))  # compared as dicts: no sort per redraw
        if key == self._last:
            return
        self._last = key
        if self.legend is not None:
            ahead = any(BREAK_MARK in b for b in (badges or {}).values())
            self.legend.update(statuses.values(), [BREAK_NOTE] if ahead else [])
        if self.live is not None:
            self.css_html.value = self.live.css(dict(statuses), dict(badges or {}) or None)
            return
        rows = "".join(
            f'<li><code>{html.escape(step_id)}</code> '
            f'<span class="cl-badge cl-s-{html.escape(status)}">{html.escape(status)}</span>'
            f"{' ' + html.escape(badges[step_id]) if badges and step_id in badges else ''}</li>"
            for step_id, status in statuses.items())
        self.svg_html.value = (
            f'<div class="cl-note">DAG not drawn: {html.escape(self.unavailable or "")}</div>'
            f'<ul class="cl-steplist">{rows}</ul>')

    def static_svg(self, statuses: Mapping[str, str],
                   badges: Mapping[str, str] | None = None) -> str:
        """The SVG with the colours baked in (for static exports); "" without Graphviz."""
        if self.live is None:
            return ""
        return str(self.live.patched_svg(dict(statuses), dict(badges or {}) or None))
