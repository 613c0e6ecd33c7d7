"""``ChainDesigner``: draft and edit a chain in the notebook without typing YAML.

A tool palette, a form per step generated from the tool's input schema (every argument a
literal or a reference picked from what is in scope), live validation, the DAG drawn as
you go (click a node to edit its step), a YAML tab kept in sync both ways, Run and
"Write cell". Opened by ``%chain design [NAME] [--tools VAR]`` or::

    designer = ChainDesigner(toolbox)            # or ChainDesigner(toolbox, chain)
    display(designer)
    a = designer.add_step("fetch", args={"n": 3})
    designer.add_step("summarize", args={"items": f"{{{{ steps.{a}.output }}}}"})
    designer.problems          # exactly what designer.chain.validate(toolbox) reports
    designer.chain             # the Chain, or None while the draft is invalid
    run = designer.run()       # starts it and shows the run widget in place

One pipeline for every change (Python API, form, palette, YAML tab): the draft's data is
written as YAML text (the text is kept verbatim when it was typed), the text is loaded with
``Chain.from_yaml`` and checked with ``Chain.validate(toolbox, context=...)``. So the
problems are exactly the plan layer's (with YAML lines), YAML that does not parse is a
``bad_syntax`` problem with its line (never a traceback), and :attr:`last_valid` keeps the
last chain that validated. The view (problems, YAML, form) follows at once; the DAG is
laid out again only when its DOT text changes (a literal edit only restyles it), at most
every :data:`DAG_DELAY_S` while someone types.

The parts: ``_design_draft`` (the draft, no widgets), ``_design_form`` (the step form),
``_design_view`` (palette and DAG), ``assets/designer.js`` (the clickable DAG).
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab._text import did_you_mean
from chainlab.errors import PlanError, Problem
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, home_loop
from chainlab.jupyter.designer.draft import (
    STEP_FIELDS,
    DesignerError,
    Draft,
    Reference,
    rename_condition,
    rename_value,
)
from chainlab.jupyter.designer.form import StepForm
from chainlab.jupyter.designer.view import DagPreview, Later, Palette
from chainlab.plan.schema import Chain, RunOptions
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession
    from chainlab.runtime.runtime import Run

__all__ = ["DAG_DELAY_S", "YAML_DELAY_S", "ChainDesigner", "DesignerError", "Reference"]

DAG_DELAY_S = 0.15  # the DAG is laid out at most this often while someone types
YAML_DELAY_S = 0.4  # typing in the YAML tab is applied after this long without a key


# ============================================================================ the designer
class ChainDesigner(W.VBox):
    """Draft and edit a chain without typing YAML; the same Python API for scripts, tests
    and the widget's own controls.

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
        self.title = W.HTML('<span class="cl-dsg-title">chain designer</span>')
        self.name_box = W.Text(description="name", continuous_update=False,
                               layout=W.Layout(width="15em"))
        self.name_box.observe(self._name_changed, names="value")
        self.status = W.HTML()
        self.context_box = W.Text(description="context", continuous_update=False,
                                  placeholder='{"key": "value"}', layout=W.Layout(width="17em"),
                                  tooltip="the run's context as JSON")
        self.context_box.observe(self._context_changed, names="value")
        self.run_button = W.Button(description="Run", icon="play", button_style="success",
                                   tooltip="start the chain and show its run widget below",
                                   layout=W.Layout(width="auto"))
        self._loop = home_loop()  # where runs are driven; clicks may arrive on another thread
        self.run_button.on_click(lambda _: self._press_run())
        self.write_button = W.Button(description="Write cell", icon="file-code-o",
                                     tooltip="insert a %%chain cell with this YAML below",
                                     layout=W.Layout(width="auto"))
        self.write_button.on_click(lambda _: self._press_write())
        head = W.HBox([self.title, self.name_box, self.status, self.context_box,
                       self.run_button, self.write_button])
        head.add_class("cl-dsg-head")
        self.palette = Palette(self)
        self.dag = DagPreview()
        self.dag.canvas.observe(self._node_clicked, names="selected")
        self.dag.canvas.on_msg(self._front_end_msg)
        self._dag_later = Later(DAG_DELAY_S, self._draw_dag)
        self.step_picker = W.Dropdown(description="step", options=[("—", "")], value="",
                                      layout=W.Layout(width="auto", margin="2px 6px 4px 2px"))
        self.step_picker.observe(self._picked, names="value")
        self.form = StepForm(self)
        self.yaml_area = W.Textarea(continuous_update=True,
                                    layout=W.Layout(width="100%", height="22em"))
        self.yaml_area.add_class("cl-dsg-yaml")
        self._yaml_later = Later(YAML_DELAY_S, self._apply_yaml, restart=True)
        self.yaml_area.observe(lambda _: self._yaml_later(), names="value")
        self.tabs = W.Tab(children=[W.VBox([self.step_picker, self.form]),
                                    W.VBox([self.yaml_area])])
        self.tabs.titles = ("Step", "YAML")
        self.tabs.add_class("cl-dsg-editor")
        middle = W.VBox([self.dag])
        middle.add_class("cl-dsg-middle")
        body = W.HBox([self.palette, middle, self.tabs])
        body.add_class("cl-dsg-body")
        self.problems_html = W.HTML()
        self.message = W.HTML()
        self.run_area = W.VBox()
        self.run_area.add_class("cl-dsg-run")
        super().__init__([W.HTML(style_tag()), head, self.message, body, self.problems_html,
                          self.run_area])
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

    def add_step(self, tool: str, step_id: str | None = None, args: Mapping[str, Any] | None
                 = None, depends_on: Iterable[str] | None = None, save_as: str | None = None,
                 when: str | None = None) -> str:
        """Append a step calling ``tool``; returns its id (default: the tool's name, made
        unique). Raises DesignerError for a taken or malformed id. An unknown tool is not
        an error here: it is an ``unknown_tool`` problem, like everything validation finds."""
        draft = self._draft
        step_id = draft.fresh_id(tool) if step_id is None else step_id
        draft.check_new_id(step_id)
        data, steps = draft.edited()
        steps.append({"id": step_id, "tool": tool, "depends_on": list(depends_on or []),
                      "args": copy.deepcopy(dict(args or {})), "save_as": save_as,
                      "when": when})
        draft.write(data, self._origin)
        return step_id

    def update_step(self, step_id: str, **fields: Any) -> None:
        """Set fields of a step (``tool``, ``args`` (replaced whole), ``depends_on``,
        ``save_as``, ``when``, ``retry``, ``timeout_s``, ``rollback``, ``confirm``,
        ``description``); ``None`` resets a field to its default; ``id=`` renames (see
        :meth:`rename_step`). Raises DesignerError for an unknown step or field."""
        if "id" in fields:
            new = fields.pop("id")
            if new != step_id:
                self.rename_step(step_id, new)
                step_id = new
        unknown = [k for k in fields if k not in STEP_FIELDS]
        if unknown:
            raise DesignerError(f"a step has no field {unknown[0]!r}"
                                f"{did_you_mean(unknown[0], STEP_FIELDS)}")
        draft = self._draft
        i = draft.index(step_id)
        data, steps = draft.edited()
        for key, value in fields.items():
            if value is None:
                steps[i].pop(key, None)
            else:
                steps[i][key] = copy.deepcopy(value)
        draft.write(data, self._origin)

    def set_arg(self, step_id: str, name: str, value: Any) -> None:
        """Set one argument (a literal, or a reference such as ``"{{ steps.a.output }}"``).
        Raises DesignerError for an unknown step."""
        draft = self._draft
        i = draft.index(step_id)
        data, steps = draft.edited()
        args = steps[i].get("args")
        steps[i]["args"] = {**(args if isinstance(args, dict) else {}),
                            name: copy.deepcopy(value)}
        draft.write(data, self._origin)

    def unset_arg(self, step_id: str, name: str) -> None:
        """Leave an argument out (a required one becomes an ``invalid_args`` problem)."""
        draft = self._draft
        i = draft.index(step_id)
        data, steps = draft.edited()
        args = steps[i].get("args")
        if isinstance(args, dict) and name in args:
            del args[name]
            draft.write(data, self._origin)

    def remove_step(self, step_id: str) -> None:
        """Remove a step. Other steps' ``depends_on`` entries and breakpoints naming it go
        too; references to its output stay and show as ``unknown_reference`` problems, so
        you see what needs a new source. Raises DesignerError for an unknown step."""
        draft = self._draft
        i = draft.index(step_id)
        ids = [s for s in draft.step_ids if s != step_id]
        after = ids[min(i, len(ids) - 1)] if ids else None
        if self.selected == step_id:
            self.selected = after
        data, steps = draft.edited()
        del steps[i]
        for step in steps:
            deps = step.get("depends_on")
            if isinstance(deps, list) and step_id in deps:
                step["depends_on"] = [d for d in deps if d != step_id]
        options = data.get("options")
        if isinstance(options, dict) and step_id in (options.get("breakpoints") or []):
            options["breakpoints"] = [b for b in options["breakpoints"] if b != step_id]
        draft.write(data, self._origin)

    def rename_step(self, old: str, new: str) -> None:
        """Rename a step; ``depends_on`` entries, references (``{{ steps.OLD.output }}``
        in args, ``when`` and rollback args) and breakpoints follow. Raises DesignerError
        for an unknown step or a taken or malformed new id."""
        draft = self._draft
        i = draft.index(old)
        if new == old:
            return
        draft.check_new_id(new)
        data, steps = draft.edited()
        steps[i]["id"] = new
        for step in steps:
            deps = step.get("depends_on")
            if isinstance(deps, list):
                step["depends_on"] = [new if d == old else d for d in deps]
            if "args" in step:
                step["args"] = rename_value(step["args"], old, new)
            if isinstance(step.get("when"), str):
                step["when"] = rename_condition(step["when"], old, new)
            if isinstance(step.get("rollback"), dict):
                step["rollback"] = rename_value(step["rollback"], old, new)
        options = data.get("options")
        if isinstance(options, dict) and isinstance(options.get("breakpoints"), list):
            options["breakpoints"] = [new if b == old else b for b in options["breakpoints"]]
        draft.write(data, self._origin)
        if self.selected == old:
            self.select(new)

    def set_name(self, name: str) -> None:
        """Rename the chain (``name`` must match ``[A-Za-z0-9_.-]+``; else a problem)."""
        data, _ = self._draft.edited()
        data["name"] = name
        self._draft.write(data, self._origin)

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
        with self._quiet():
            if (step_id or "") in [v for _, v in self.step_picker.options]:
                self.step_picker.value = step_id or ""
        self.form.show(step_id)
        if step_id is not None:
            self.tabs.selected_index = 0
        self._dag_later()

    def flush(self) -> None:
        """Apply what waits for a pause in typing (the YAML tab) and draw the DAG now."""
        self._yaml_later.flush()
        self._dag_later.flush()

    # ------------------------------------------------------------------ run / write cell
    def run(self, context: Mapping[str, Any] | None = None, *, db: str | None = None) -> Run:
        """Start the chain (on the kernel's loop, like ``%chain run``) and show its run
        widget in place, below the designer. Raises PlanError while the draft is invalid
        (or when ``context`` lacks keys the chain refers to)."""
        from chainlab.jupyter.magics.commands import start, widget
        from chainlab.jupyter.session import get_session

        self.flush()
        chain = self.chain
        if chain is None:
            raise PlanError(self.problems, chain_name=str(self._draft.data.get("name")))
        session = self._session if self._session is not None else get_session()
        ctx = dict(context) if context is not None else dict(self.context or {})
        run = start(session, chain, self.toolbox, db or self.db, ctx, RunOptions(),
                    paused=False)
        self.last_run = run
        self.run_area.children = [W.HTML(f'<div class="cl-label">run of {html.escape(chain.name)}'
                                          "</div>"), widget(session, run)]
        return run

    def cell_text(self) -> str:
        """The ``%%chain NAME [--tools VAR]`` cell holding the draft's YAML (what
        "Write cell" inserts)."""
        name = self._bind or _identifier(str(self._draft.data.get("name") or "draft"))
        tools = self._tools_var or self._toolbox_var()
        head = f"%%chain {name}" + (f" --tools {tools}" if tools else "")
        return f"{head}\n{self.yaml.rstrip()}\n"

    def write_cell(self) -> None:
        """Insert :meth:`cell_text` as a new cell below the designer's output (JupyterLab
        and Notebook 7; elsewhere the front end copies it to the clipboard)."""
        self.flush()
        text = self.cell_text()
        if getattr(self.dag.canvas, "clickable", False):
            self.dag.canvas.send({"type": "write_cell", "text": text, "host": self.model_id})
            self._say("Writing a %%chain cell below the designer…")
            return
        try:  # no front-end module: IPython can still put it in the next cell
            from IPython import get_ipython

            ip = get_ipython()
        except ImportError:  # pragma: no cover - IPython is in chainlab[jupyter]
            ip = None
        if ip is not None:
            ip.set_next_input(text, replace=False)
        self._say("The cell text (run <code>designer.write_cell()</code> in a cell to insert "
                  f'it):<pre class="cl-pre">{html.escape(text)}</pre>')

    def _toolbox_var(self) -> str | None:
        from chainlab.tools import default_toolbox

        if self.toolbox is default_toolbox:
            return None
        ns = self._session.user_ns if self._session is not None else {}
        names = sorted(k for k, v in ns.items() if v is self.toolbox and not k.startswith("_"))
        return names[0] if names else None

    # ------------------------------------------------------------------ reacting
    def _edit_from(self, origin: str, fn: Callable[[], Any]) -> Any:
        before, self._origin = self._origin, origin
        try:
            return fn()
        finally:
            self._origin = before

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
        name = str(draft.data.get("name") or "")
        if origin != "name" and self.name_box.value != name:
            self.name_box.value = name
        n, problems = len(draft.step_ids), draft.problems
        if draft.parsed is None:
            badge = ("cl-dsg-bad", "does not load")
        elif problems:
            badge = ("cl-dsg-bad", f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
        else:
            badge = ("cl-dsg-ok", "valid")
        status = (f'<span class="cl-badge {badge[0]}">{"✓" if not problems else "⚠"} '
                  f'{badge[1]}</span> <span class="cl-summary">{n} step'
                  f'{"s" if n != 1 else ""}</span>')
        if self.status.value != status:
            self.status.value = status
        self.run_button.disabled = draft.chain is None
        problems_html = _problems_html(problems)
        if self.problems_html.value != problems_html:
            self.problems_html.value = problems_html
        if origin != "yaml" and self.yaml_area.value != draft.text:
            self._yaml_later.cancel()
            self.yaml_area.value = draft.text
        ids = draft.step_ids
        if self.selected not in ids:  # gone (or nothing yet): the first step, if any
            self.selected = ids[0] if ids else None
        options = [(i, i) for i in ids] or [("—", "")]
        with self._quiet():  # new options reset a Dropdown's value: not a person's choice
            if list(self.step_picker.options) != options:
                self.step_picker.options = options
            self.step_picker.value = self.selected or ""
        self.form.show(self.selected) if self.form.step_id != self.selected else self.form.sync()
        self._dag_later()

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Changes made here are the designer's own, not a person's selection."""
        before, self._quieted = self._quieted, True
        try:
            yield
        finally:
            self._quieted = before

    def _draw_dag(self) -> None:
        try:
            with self._quiet():
                self.dag.update(self._draft, self.selected)
        except Exception as exc:  # never let a drawing failure break editing
            self.last_error = exc
            self._say(f"could not draw the DAG: {type(exc).__name__}: {exc}", error=True)

    def _say(self, text: str, *, error: bool = False) -> None:
        cls = "cl-error" if error else "cl-note"
        self.message.value = f'<div class="{cls}">{text if not error else html.escape(text)}</div>'

    def _add_from_palette(self, tool: str) -> None:
        step_id = self._edit_from("palette", lambda: self.add_step(tool))
        self.select(step_id)

    def _node_clicked(self, change: dict[str, Any]) -> None:
        if self._quieted:
            return
        step_id = change["new"]
        if step_id and step_id != self.selected and step_id in self._draft.step_ids:
            self.select(step_id)

    def _picked(self, change: dict[str, Any]) -> None:
        if self._quieted:
            return
        step_id = change["new"] or None
        if step_id != self.selected and (step_id is None or step_id in self._draft.step_ids):
            self.select(step_id)

    def _apply_yaml(self) -> None:
        text = self.yaml_area.value
        if text != self._draft.text:
            self._edit_from("yaml", lambda: setattr(self, "yaml", text))

    def _name_changed(self, change: dict[str, Any]) -> None:
        if change["new"] != self._draft.data.get("name"):
            self._edit_from("name", lambda: self.set_name(change["new"]))

    def _context_changed(self, change: dict[str, Any]) -> None:
        text = change["new"].strip()
        try:
            value = json.loads(text) if text else None
        except ValueError as exc:
            self._say(f"context: not JSON ({exc})", error=True)
            return
        if value is not None and not isinstance(value, dict):
            self._say("context: a JSON object, e.g. {\"customer\": \"Ada\"}", error=True)
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
        if not isinstance(content, dict) or content.get("type") != "write_cell_done":
            return
        how = content.get("how")
        if how == "inserted":
            self._say("Inserted a <code>%%chain</code> cell below the designer: run it to "
                      "define the chain without the widget.")
        elif how == "clipboard":
            self._say("This front end cannot insert cells: the <code>%%chain</code> cell was "
                      "copied to the clipboard; paste it into a new cell.")
        else:
            self._say(f"could not write the cell: {content.get('detail') or 'unknown reason'}",
                      error=True)

    def __repr__(self) -> str:
        draft = self._draft
        n = len(draft.step_ids)
        verdict = ("does not load" if draft.parsed is None else
                   f"{len(draft.problems)} problem{'s' if len(draft.problems) != 1 else ''}"
                   if draft.problems else "valid")
        return (f"ChainDesigner(chain {draft.data.get('name')!r}, {n} step"
                f"{'s' if n != 1 else ''}, {verdict})")


def _problems_html(problems: list[Problem]) -> str:
    if not problems:
        return ""
    items = "".join(
        f'<li><code>{html.escape(p.code)}</code> {html.escape(_where(p))}'
        f"{html.escape(p.message)}</li>" for p in problems)
    return f'<ul class="cl-problems cl-dsg-problems">{items}</ul>'


def _where(p: Problem) -> str:
    bits = []
    if p.line is not None:
        bits.append(f"line {p.line}")
    if p.step_id:
        bits.append(f"step {p.step_id!r}")
    if p.field:
        bits.append(p.field)
    return f"{', '.join(bits)}: " if bits else ""


def _identifier(name: str) -> str:
    ident = re.sub(r"\W+", "_", name).strip("_") or "draft"
    return f"chain_{ident}" if ident[0].isdigit() else ident


# ============================================================================ magics
def open_designer(session: NotebookSession, name: str | None, tools_var: str | None, *,
                  chain: Chain | None = None) -> tuple[ChainDesigner, str | None]:
    """``%chain design [NAME] [--tools VAR]`` (and ``%chain plan ... --design``): a designer
    for the chain ``NAME`` (a new draft when there is none), bound to ``NAME`` whenever it
    validates; and the note to print about the toolbox choice. Raises SessionError."""
    from chainlab.jupyter.session import SessionError

    toolbox, note = session.toolbox(tools_var)
    if chain is None and name is not None:
        try:
            chain = session.chain(name)
        except SessionError:
            if name in session.user_ns:
                raise
    designer = ChainDesigner(toolbox, chain, name=name or "draft", session=session,
                             tools_var=tools_var, bind=name)
    return designer, note
