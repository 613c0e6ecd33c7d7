"""``ChainDesigner``: the widget that drafts and edits a chain (what it is and its parts:
:mod:`chainlab.jupyter.designer`). It composes the panels (head bar, palette, DAG, step form,
YAML tab), holds the Python API that scripts, tests and the panels call (the form and the
palette take it as a :class:`~.host.DesignerHost`; the step edits are :mod:`.editing`), and
redraws after every change of the draft."""

from __future__ import annotations

import contextlib
import html
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as W

import chainlab.jupyter.designer.cell as cell
import chainlab.jupyter.launch as launch
from chainlab.errors import PlanError, Problem
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, home_loop
from chainlab.jupyter.designer.context import ContextForm
from chainlab.jupyter.designer.draft import UNSET, DesignerError, Draft, Reference
from chainlab.jupyter.designer.editing import StepEdits
from chainlab.jupyter.designer.editor import Editor
from chainlab.jupyter.designer.head import HeadBar
from chainlab.jupyter.designer.view import DagPreview, Later, Palette
from chainlab.jupyter.session import get_session
from chainlab.jupyter.views import problems_html
from chainlab.plan.schema import Chain, RunOptions
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession
    from chainlab.runtime.runtime import Run

__all__ = ["DAG_DELAY_S", "ChainDesigner"]

DAG_DELAY_S = 0.15  # the DAG is laid out at most this often while someone types


# ============================================================================ the designer
class ChainDesigner(StepEdits, W.VBox):
    """Draft and edit a chain without typing YAML; the same Python API for scripts, tests
    and the widget's own controls (its step edits: :class:`~.editing.StepEdits`).

    ``ChainDesigner(toolbox, chain=None, *, name="draft", context=None, db=None)``;
    display it to get the palette, the step form, the DAG, the YAML tab, Run and Write cell.
    ``context`` (a dict) is the run's context: its keys are offered as references and
    validation checks against them (as ``chain.validate(toolbox, context=...)`` does).
    """

    def __init__(self, toolbox: Toolbox, chain: Chain | None = None, *, name: str = "draft",
                 context: Mapping[str, Any] | None = None, db: str | None = None,
                 session: NotebookSession | None = None, tools_var: str | None = None,
                 bind: str | None = None):
        if not isinstance(toolbox, Toolbox):
            raise TypeError(f"ChainDesigner needs a chainlab.Toolbox, got "
                            f"{type(toolbox).__name__}")
        self._draft = Draft(toolbox, chain, name, context)
        self._origin = "api"
        self._quieted = False
        self._callbacks: list[Callable[[ChainDesigner], None]] = []
        self._session = session
        self._tools_var = tools_var
        self._bind = bind
        self.db = db
        self.selected: str | None = None
        self.last_run: Run | None = None
        self.last_error: BaseException | None = None
        self._build()
        self._draft.listeners.append(self._changed)
        ids = self._draft.step_ids
        self.select(ids[0] if ids else None)
        self._changed("init")

    # ------------------------------------------------------------------ widgets
    def _build(self) -> None:
        self.head = head = HeadBar()
        self.name_box, self.status, self.context_box = head.name_box, head.status, \
            head.context_box
        self.run_button, self.write_button = head.run_button, head.write_button
        self.name_box.observe(self._name_changed, names="value")
        self.context_box.observe(self._context_changed, names="value")
        self._loop = home_loop()  # where runs are driven; clicks may arrive on another thread
        self.run_button.on_click(lambda _: self._press_run())
        self.write_button.on_click(lambda _: self._press_write())
        self.palette = Palette(self)
        self.dag = DagPreview()
        self.dag.canvas.observe(self._node_clicked, names="selected")
        self.dag.canvas.on_msg(self._front_end_msg)
        self._dag_later = Later(DAG_DELAY_S, self._draw_dag)
        self.tabs = Editor(self, self._draft, self._apply_yaml)
        self.step_picker, self.form = self.tabs.step_picker, self.tabs.form
        self.yaml_area = self.tabs.yaml_area
        middle = W.VBox([self.dag])
        middle.add_class("cl-dsg-middle")
        body = W.HBox([self.palette, middle, self.tabs])
        body.add_class("cl-dsg-body")
        self.problems_html = W.HTML()
        self.message = W.HTML()
        self.context_form = ContextForm(self._set_context_key)
        self.run_area = W.VBox()
        self.run_area.add_class("cl-dsg-run")
        super().__init__([W.HTML(style_tag()), head, self.context_form, self.message, body,
                          self.problems_html, self.run_area])
        self.add_class("cl-designer")

    # ------------------------------------------------------------------ Python API
    @property
    def toolbox(self) -> Toolbox:
        """The tools steps can call. Setting it re-checks the draft and rebuilds the palette
        (a tool that is gone becomes an ``unknown_tool`` problem)."""
        return self._draft.toolbox

    @toolbox.setter
    def toolbox(self, toolbox: Toolbox) -> None:
        self._draft.toolbox = toolbox
        self.palette.build(toolbox)
        self._draft.revalidate()

    @property
    def context(self) -> dict[str, Any] | None:
        """The run's context (None: references to it are not checked)."""
        return self._draft.context

    @context.setter
    def context(self, context: Mapping[str, Any] | None) -> None:
        self._draft.context = dict(context) if context is not None else None
        shown = json.dumps(self._draft.context) if context is not None else ""
        if self.context_box.value != shown:
            self.context_box.value = shown
        self._draft.revalidate()

    @property
    def chain(self) -> Chain | None:
        """The draft as a Chain when it validates, else None (see :attr:`last_valid`)."""
        return self._draft.chain

    @property
    def last_valid(self) -> Chain | None:
        """The last chain that validated (stays while the draft is invalid)."""
        return self._draft.last_valid

    @property
    def problems(self) -> list[Problem]:
        """The draft's problems: exactly ``chain.validate(toolbox, context=...)``'s, or the
        loading problems (``bad_syntax`` with its line, ``invalid_field``)."""
        return list(self._draft.problems)

    @property
    def yaml(self) -> str:
        """The draft as YAML text; setting it replaces the draft (kept verbatim)."""
        return self._draft.text

    @yaml.setter
    def yaml(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"yaml must be text, got {type(text).__name__}")
        self._draft.load(text, self._origin)

    @property
    def step_ids(self) -> list[str]:
        """The draft's step ids, in declaration order."""
        return self._draft.step_ids

    def step(self, step_id: str) -> dict[str, Any]:
        """A copy of a step's data (fields left at their defaults are absent). Raises
        DesignerError for an unknown step."""
        return self._draft.step(step_id)

    def references(self, step_id: str) -> list[Reference]:
        """What the arguments of ``step_id`` can refer to (the form's dropdown): context
        keys, outputs and output fields of steps that do not depend on it, save_as keys."""
        return self._draft.references(step_id)

    def revalidate(self) -> None:
        """Check the draft again (after tools were added to or removed from the toolbox)."""
        self.palette.build(self.toolbox)
        self._draft.revalidate(self._origin)

    def on_change(self, callback: Callable[[ChainDesigner], None]) -> Callable[[], None]:
        """Call ``callback(designer)`` after every change of the draft; returns a function
        that unsubscribes. An error in a callback is shown in the widget (``last_error``)."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks \
            else None

    def select(self, step_id: str | None) -> None:
        """Show ``step_id``'s form (and outline it in the DAG); None shows none. Raises
        DesignerError for an unknown step."""
        if step_id is not None:
            self._draft.index(step_id)
        self.selected = step_id
        self.tabs.pick(step_id)
        self._dag_later()

    def flush(self) -> None:
        """Apply what waits for a pause in typing (the YAML tab) and draw the DAG now."""
        self.tabs.yaml_later.flush()
        self._dag_later.flush()

    # ------------------------------------------------------------------ run / write cell
    def run(self, context: Mapping[str, Any] | None = None, *, db: str | None = None) -> Run:
        """Start the chain (on the kernel's loop, like ``%chain run``) and show its run
        widget in place, below the designer. Raises PlanError while the draft is invalid
        (or when ``context`` lacks keys the chain refers to)."""
        self.flush()
        chain = self.chain
        if chain is None:
            raise PlanError(self.problems, chain_name=str(self._draft.data.get("name")))
        if not chain.steps:
            raise DesignerError("nothing to run: the chain has no steps; add one from the "
                                "palette")
        session = self._session if self._session is not None else get_session()
        ctx = dict(context) if context is not None else dict(self.context or {})
        label = W.HTML(f'<div class="cl-label">run of {html.escape(chain.name)}</div>')

        def show(widget: W.Widget) -> None:  # in place, before the run starts
            self.run_area.children = [label, widget]

        run = launch.start(session, chain, self.toolbox, db or self.db, ctx, RunOptions(),
                           paused=False, show=show)
        self.last_run = run
        return run

    def cell_text(self) -> str:
        """The ``%%chain NAME [--tools VAR]`` cell holding the draft's YAML (what
        "Write cell" inserts)."""
        name = self._bind or cell.identifier(str(self._draft.data.get("name") or "draft"))
        ns = self._session.user_ns if self._session is not None else {}
        return cell.cell_text(self.yaml, name, self._tools_var or cell.toolbox_var(
            self.toolbox, ns))

    def write_cell(self) -> None:
        """Insert :meth:`cell_text` as a new cell below the designer's output (JupyterLab
        and Notebook 7; elsewhere the front end copies it to the clipboard)."""
        self.flush()
        self._say(cell.write(self.cell_text(), self.dag.canvas, self.model_id))

    # ------------------------------------------------------------------ reacting

    def _changed(self, origin: str) -> None:
        self._refresh(origin)
        chain = self._draft.chain
        if chain is not None and self._bind and self._session is not None:
            self._session.chains[self._bind] = chain
            ns = self._session.user_ns
            if isinstance(ns, dict):
                ns[self._bind] = chain
        for callback in list(self._callbacks):
            try:
                callback(self)
            except Exception as exc:
                self.last_error = exc
                self._say(f"on_change callback failed: {type(exc).__name__}: {exc}", error=True)

    def _refresh(self, origin: str) -> None:
        draft = self._draft
        self.head.show(draft, name=origin != "name")
        self.context_form.sync(draft)
        shown = problems_html(draft.problems, "cl-problems cl-dsg-problems")
        if self.problems_html.value != shown:
            self.problems_html.value = shown
        ids = draft.step_ids
        if self.selected not in ids:  # gone (or nothing yet): the first step, if any
            self.selected = ids[0] if ids else None
        self.tabs.show(self.selected, text=origin != "yaml")
        self._dag_later()

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Changes made here (the DAG's selection) are the designer's own, not a person's."""
        before, self._quieted = self._quieted, True
        try:
            yield
        finally:
            self._quieted = before

    def _set_context_key(self, key: str, value: Any) -> None:
        context = dict(self.context or {})
        if value is UNSET:
            context.pop(key, None)
        else:
            context[key] = value
        self.message.value = ""
        self.context = context

    def _draw_dag(self) -> None:
        try:
            with self._quiet():
                self.dag.update(self._draft, self.selected)
        except Exception as exc:  # never let a drawing failure break editing
            self.last_error = exc
            self._say(f"could not draw the DAG: {type(exc).__name__}: {exc}", error=True)

    def say(self, text: str, *, error: bool = False) -> None:
        """Show a line (an error: escaped, in red) above the designer's body."""
        self._say(text, error=error)

    def _say(self, text: str, *, error: bool = False) -> None:
        cls = "cl-error" if error else "cl-note"
        self.message.value = f'<div class="{cls}">{text if not error else html.escape(text)}</div>'

    def _node_clicked(self, change: dict[str, Any]) -> None:
        if self._quieted:
            return
        step_id = change["new"]
        if step_id and step_id != self.selected and step_id in self._draft.step_ids:
            self.select(step_id)

    def _apply_yaml(self, text: str) -> None:
        self._edit_from("yaml", lambda: setattr(self, "yaml", text))

    def _name_changed(self, change: dict[str, Any]) -> None:
        if change["new"] != self._draft.data.get("name"):
            self._edit_from("name", lambda: self.set_name(change["new"]))

    def _context_changed(self, change: dict[str, Any]) -> None:
        try:
            value = self.head.context_value()
        except ValueError as exc:
            self._say(str(exc), error=True)
            return
        self.message.value = ""
        self.context = value

    def _press_run(self) -> None:
        # JupyterLab's comm subshell calls this on its own thread: start the run on the loop
        # runs are driven on (on that thread, starting a run found no usable loop)
        if call_on(self._loop, self._press_run):
            return
        self.message.value = ""
        try:
            self.run()
        except Exception as exc:
            self.last_error = exc
            self._say(f"could not start: {exc}", error=True)

    def _press_write(self) -> None:
        try:
            self.write_cell()
        except Exception as exc:
            self.last_error = exc
            self._say(f"could not write the cell: {exc}", error=True)

    def _front_end_msg(self, _: Any, content: Any, buffers: Any = None) -> None:
        note = cell.reply_note(content)
        if note is not None:
            self._say(note[0], error=note[1])

    def __repr__(self) -> str:
        draft = self._draft
        n = len(draft.step_ids)
        return (f"ChainDesigner(chain {draft.data.get('name')!r}, {n} step"
                f"{'s' if n != 1 else ''}, {draft.verdict})")
