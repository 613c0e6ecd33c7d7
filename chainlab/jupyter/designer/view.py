"""The chain designer's palette (the toolbox's tools with their signature and contract, a
filter) and its DAG preview: laid out by Graphviz only when the draft's DOT text changes;
problems, the selection and the captions are a small scoped ``<style>`` (as in
:class:`chainlab.render.LiveDag`). The clickable canvas is an anywidget whose ES module is
``widgets/designer.js`` (:mod:`chainlab.jupyter._assets` finds it)."""

from __future__ import annotations

import asyncio
import html
import inspect
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as W
import traitlets

from chainlab.errors import ChainlabError
from chainlab.jupyter._assets import designer_js
from chainlab.jupyter.designer.draft import DesignerError, Draft, Problem
from chainlab.plan.schema import Chain
from chainlab.tools import SchemaTool, Tool, Toolbox

if TYPE_CHECKING:
    from chainlab.jupyter.designer.host import DesignerHost

__all__ = ["DagPreview", "Later", "Palette", "badges", "first_line", "signature"]


# ============================================================================ the DAG
class Later:
    """Call ``fn`` once, ``delay`` seconds after the first (or, with ``restart``, the last)
    request; at once when no event loop runs (plain Python, tests without a loop)."""

    def __init__(self, delay: float, fn: Callable[[], None], *, restart: bool = False):
        self.delay = delay
        self.fn = fn
        self.restart = restart
        self.handle: asyncio.TimerHandle | None = None

    def __call__(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.fn()
            return
        if self.handle is not None:
            if not self.restart:
                return
            self.handle.cancel()
        self.handle = loop.call_later(self.delay, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.fn()

    def flush(self) -> None:
        """Run a pending call now."""
        if self.handle is not None:
            self.handle.cancel()
            self._fire()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _StaticCanvas(W.HTML):
    """The DAG without anywidget: drawn, not clickable (the step list selects instead)."""

    svg = traitlets.Unicode("")
    css = traitlets.Unicode("")
    steps = traitlets.Dict()
    selected = traitlets.Unicode("")
    host = traitlets.Unicode("")
    clickable = False

    @traitlets.observe("svg", "css")
    def _draw(self, _: Any) -> None:
        self.value = f"{self.css}<div class=\"cl-dsg-svg\">{self.svg}</div>"


_CANVAS: list[type[W.DOMWidget]] = []


def _canvas_class() -> type[W.DOMWidget]:
    """The clickable DAG (an anywidget whose ES module is ``widgets/designer.js``),
    or :class:`_StaticCanvas` when anywidget is not installed."""
    if _CANVAS:
        return _CANVAS[0]
    try:
        import anywidget
    except ImportError:
        _CANVAS.append(_StaticCanvas)
        return _StaticCanvas

    class DagCanvas(anywidget.AnyWidget):  # type: ignore[misc]
        """SVG + scoped style; a click (or Enter) on a node sets ``selected``."""

        _esm = designer_js()
        svg = traitlets.Unicode("").tag(sync=True)
        css = traitlets.Unicode("").tag(sync=True)
        steps = traitlets.Dict().tag(sync=True)  # SVG element id -> step id
        selected = traitlets.Unicode("").tag(sync=True)
        host = traitlets.Unicode("").tag(sync=True)  # model id of the designer's output
        clickable = True

    _CANVAS.append(DagCanvas)
    return DagCanvas


class DagPreview(W.VBox):
    """The draft's DAG: laid out again only when its DOT text changes; problems, the
    selection and the captions are a small scoped ``<style>`` (as in LiveDag)."""

    def __init__(self) -> None:
        self.scope = f"cl-dsg-{secrets.token_hex(4)}"
        self.canvas = _canvas_class()()
        self.canvas.add_class("cl-dsg-canvas")
        self.note = W.HTML()
        self.dot: str | None = None
        self.layouts = 0  # how many times Graphviz laid the DAG out
        self.element_ids: dict[str, str] = {}
        self.unavailable: str | None = None
        super().__init__([self.note, self.canvas])
        self.add_class("cl-dsg-dag")

    def update(self, draft: Draft, selected: str | None) -> None:
        chain = draft.parsed
        note = ""
        if chain is None:
            note = ("The YAML does not load (see the problems): the DAG shows the last draft "
                    "that did." if self.dot is not None else "")
        else:
            self._layout(chain, draft.toolbox)
        if self.note.value != (html_note := (f'<div class="cl-note">{html.escape(note)}</div>'
                                             if note else "")):
            self.note.value = html_note
        css = self._css(draft.problems, selected)
        if self.canvas.css != css:
            self.canvas.css = css
        if self.canvas.selected != (selected or ""):
            self.canvas.selected = selected or ""

    def _layout(self, chain: Chain, toolbox: Toolbox) -> None:
        if not chain.steps:
            self.dot, self.element_ids = "", {}
            self.canvas.steps = {}
            self.canvas.svg = ('<div class="cl-dsg-emptydag">No steps yet: click a tool in the '
                               "palette to add the first one.</div>")
            return
        from chainlab.render.dot import draw_chain, step_of

        chains = dict(toolbox.chains) or None
        dot = draw_chain(chain, toolbox, None, None, chains, reserve_status=True,
                         scope=self.scope).dot
        if dot == self.dot:
            return
        self.dot = dot
        self.layouts += 1
        try:
            from chainlab.render import LiveDag

            # no legend: the palette's badges say what the shapes would, and a legend
            # beside the graph would make the browser scale the whole picture down
            live = LiveDag(chain, toolbox, chains, scope=self.scope, legend=False)
            svg = live.svg
        except (ImportError, ChainlabError) as exc:  # GraphvizUnavailable / GraphvizError
            self.unavailable = str(exc)
            self.element_ids = {}
            self.canvas.steps = {}
            items = "".join(f"<li><code>{html.escape(s.id)}</code> {html.escape(s.tool)}</li>"
                            for s in chain.steps)
            self.canvas.svg = (f'<div class="cl-note">DAG not drawn: {html.escape(str(exc))}'
                               f'</div><ul class="cl-steplist">{items}</ul>')
            return
        self.unavailable = None
        self.element_ids = {s: live.element_id(s) for s in live.step_ids}
        self.canvas.steps = {eid: step_of(s) for s, eid in self.element_ids.items()}
        self.canvas.svg = svg

    def _css(self, problems: list[Problem], selected: str | None) -> str:
        from chainlab.render.dot import step_of
        from chainlab.render.live import css_string
        from chainlab.render.style import NEUTRAL, PROBLEM, dasharray

        s = f".{self.scope}"
        rules = [f"{s} g.cl-step{{--cl-f:{NEUTRAL.fill};--cl-s:{NEUTRAL.stroke};"
                 f"--cl-w:{NEUTRAL.width:g}px;--cl-d:none;--cl-c:\"\";cursor:pointer}}"]
        by_step: dict[str, list[Problem]] = {}
        for p in problems:
            if p.step_id:
                by_step.setdefault(p.step_id.split("/")[0], []).append(p)
        for name, eid in self.element_ids.items():  # a repeated id: one node per step
            found = by_step.get(step_of(name), [])
            if not found:
                continue
            more = f" (+{len(found) - 1})" if len(found) > 1 else ""
            rules.append(f"#{eid}{{--cl-s:{PROBLEM.stroke};--cl-w:{PROBLEM.width:g}px;"
                         f"--cl-d:{dasharray(PROBLEM.line)};"
                         f"--cl-c:{css_string(f'⚠ {found[0].code}{more}')}}}")
        chosen = self.element_ids.get(selected or "")
        if chosen is not None:
            border = "" if selected in by_step else "--cl-s:#0072b2;--cl-w:2.5px;"
            rules.append(f"#{chosen}{{--cl-f:#e3f1fb;{border}}}")
        return f'<style class="{self.scope}-design">' + "\n".join(rules) + "</style>"


# ============================================================================ the palette
def signature(tool: Tool) -> str:
    """``name(a: int, b: str = 'x') -> list`` as written in the function (context hidden);
    ``name(a, b?)`` from the input schema for a tool described by JSON Schema (MCP)."""
    try:
        if isinstance(tool, SchemaTool):
            raise TypeError("no Python signature")
        try:  # string annotations (``from __future__ import annotations``) evaluated
            sig = inspect.signature(tool.fn, eval_str=True)
        except NameError:
            sig = inspect.signature(tool.fn)
    except (TypeError, ValueError):
        schema = tool.input_schema()
        required = set(schema.get("required", []))
        names = ", ".join(p if p in required else f"{p}?" for p in schema.get("properties", {}))
        return f"{tool.name}({names})"
    params = [p for name, p in sig.parameters.items() if name != tool.context_param]
    shown = sig.replace(parameters=params)
    text = str(shown).replace("typing.", "").replace("__main__.", "")
    return tool.name + re.sub(r"<class '(\w+)'>", r"\1", text)


def badges(tool: Tool) -> list[tuple[str, str]]:
    """(css class, text) of the tool's side-effect contract."""
    out = []
    if tool.side_effects:
        out.append(("cl-tb-effect", "side effects"))
        if tool.idempotent:
            out.append(("cl-tb-idem", "idempotent"))
    else:
        out.append(("cl-tb-ro", "read-only"))
    if tool.requires_confirmation:
        out.append(("cl-tb-confirm", "needs confirmation"
                    if tool.requires_confirmation is True else "confirmation by args"))
    if isinstance(tool, SchemaTool) and tool.origin:  # an MCP server's tool, and its hints
        out.append(("cl-tb-mcp", tool.origin))
        out += [("cl-tb-hint", f"{hint}: {str(value).lower()}")
                for hint, value in tool.hints.items()]
    return out


def first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0] if text else ""


class Palette(W.VBox):
    """Every tool of the toolbox: signature, first docstring line, badges; a filter box.
    Clicking a tool (``palette.buttons[name].click()``) adds a step calling it (and selects
    it)."""

    def __init__(self, designer: DesignerHost):
        self.designer = designer
        self.filter = W.Text(placeholder="filter tools", continuous_update=True,
                             layout=W.Layout(width="100%"))
        self.filter.add_class("cl-dsg-filter")
        self.filter.observe(lambda _: self.apply_filter(), names="value")
        self.buttons: dict[str, W.Button] = {}
        self.items: dict[str, W.VBox] = {}
        self.texts: dict[str, str] = {}
        self.list = W.VBox()
        self.list.add_class("cl-dsg-tools")
        super().__init__([W.HTML('<div class="cl-label">tools</div>'), self.filter, self.list])
        self.add_class("cl-dsg-palette")
        self.build(designer.toolbox)

    def build(self, toolbox: Toolbox) -> None:
        self.buttons, self.items, self.texts = {}, {}, {}
        for tool in toolbox:
            button = W.Button(description=tool.name, icon="plus",
                              tooltip=f"add a step that calls {tool.name}",
                              layout=W.Layout(width="100%"))
            button.add_class("cl-dsg-add")
            button.on_click(lambda _, name=tool.name: self.add(name))
            chips = "".join(f'<span class="cl-tb {cls}">{html.escape(text)}</span>'
                            for cls, text in badges(tool))
            doc = first_line(tool.description)
            info = W.HTML(f'<div class="cl-dsg-sig"><code>{html.escape(signature(tool))}'
                          f'</code></div><div class="cl-dsg-doc">{html.escape(doc)}</div>'
                          f'<div class="cl-dsg-badges">{chips}</div>')
            item = W.VBox([button, info])
            item.add_class("cl-dsg-tool")
            self.buttons[tool.name] = button
            self.items[tool.name] = item
            self.texts[tool.name] = f"{tool.name} {doc}".lower()
        self.list.children = list(self.items.values()) or [
            W.HTML('<div class="cl-note">The toolbox has no tools.</div>')]
        self.apply_filter()

    def apply_filter(self) -> None:
        words = self.filter.value.lower().split()
        for name, item in self.items.items():
            shown = all(w in self.texts[name] for w in words)
            item.layout.display = "" if shown else "none"

    def add(self, tool: str) -> None:
        """What a tool's button does: a new step calling ``tool``, selected (or why not, in
        the designer's message line)."""
        try:
            self.designer.select(self.designer.add_step(tool))
        except DesignerError as exc:
            self.designer.say(str(exc), error=True)

    @property
    def shown(self) -> list[str]:
        """The tools the filter lets through."""
        return [n for n, item in self.items.items() if item.layout.display != "none"]
