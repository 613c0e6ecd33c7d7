"""The chain designer's step form: one row per input field of the tool (:mod:`.args`: a
literal by JSON type, or a reference picked from what is in scope), then depends_on,
save_as, when and an "advanced" part (retry, timeout, confirm, rollback). It draws the
:class:`~.draft.Draft` it is given, and every change goes through the designer's Python API
(its :class:`~.host.DesignerHost`), as a script's would."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.jupyter.designer.args import ArgRow, Param, from_text, params_of
from chainlab.jupyter.designer.draft import UNSET, DesignerError, Draft, Reference, whole_ref
from chainlab.jupyter.designer.view import first_line, signature
from chainlab.plan.graph import edges
from chainlab.plan.reftypes import schema_fits

if TYPE_CHECKING:
    from chainlab.jupyter.designer.host import DesignerHost

__all__ = ["StepForm"]


_ONE_CALL = "no: one call"  # the for_each dropdown's first choice
_CONFIRM = [("tool's default", UNSET), ("always ask", "true"), ("never ask", "false")]
_BACKOFF = [("default (fixed)", UNSET), ("fixed", "fixed"), ("exponential", "exponential")]


class StepForm(W.VBox):
    """The selected step: id, tool, arguments, depends_on, save_as, when, advanced."""

    def __init__(self, designer: DesignerHost, draft: Draft):
        self.designer = designer
        self.draft = draft  # what the form shows (read only: edits go through `designer`)
        self.step_id: str | None = None
        self.tool: str | None = None
        self.rows: dict[str, ArgRow] = {}
        self.syncing = False
        self.empty = W.HTML('<div class="cl-note">No step selected: click a tool on the left '
                            "to add one, or a node of the DAG to edit it.</div>")
        # issue 29: wide enough for ids and tool names ("fetch_orders" was cut to "fetch_or")
        narrow = {"description_width": "2.5em"}
        self.step_id_box = W.Text(description="id", continuous_update=False, style=narrow,
                                  layout=W.Layout(width="auto", flex="1 1 45%", min_width="9em"))
        self.step_id_box.observe(self._renamed, names="value")
        self.tool_box = W.Dropdown(description="tool", style=narrow,
                                   layout=W.Layout(width="auto", flex="1 1 55%", min_width="11em"))
        self.tool_box.observe(self._tool_changed, names="value")
        self.remove = W.Button(description="Delete step", icon="trash",
                               tooltip="remove this step (its references become problems)",
                               layout=W.Layout(width="auto", align_self="flex-end"))
        self.remove.add_class("cl-dsg-remove")
        self.remove.on_click(lambda _: self._remove())
        self.error = W.HTML()
        self.doc = W.HTML()
        self.args_box = W.VBox()
        self.args_box.add_class("cl-dsg-args")
        self.depends = W.SelectMultiple(description="depends on", rows=2,
                                        layout=W.Layout(width="auto"),
                                        tooltip="run after these steps too (ctrl/shift-click "
                                                "for several)")
        self.derived = W.HTML()
        self.depends.observe(self._field("depends_on", lambda v: list(v)), names="value")
        self.save_as = W.Text(description="save as", placeholder="memory key (optional)",
                              continuous_update=True)
        self.save_as.observe(self._field("save_as"), names="value")
        self.when = W.Text(description="when", placeholder="e.g. steps.check.output.ok == true",
                           continuous_update=True)
        self.when.observe(self._field("when"), names="value")
        # fan out: one call per item of a list (its args then take {{ item }}, {{ index }})
        self.for_each = W.Dropdown(description="for each", options=[(_ONE_CALL, UNSET)],
                                   value=UNSET, tooltip="call the tool once per item of a list "
                                   "found at run time (the list-typed references first)")
        self.for_each.observe(self._field("for_each", lambda v: None if v == UNSET
                                          else "{{ " + v + " }}"), names="value")
        self.other_problems = W.HTML()
        self.advanced = self._advanced()
        head = W.HBox([self.step_id_box, self.tool_box],
                      layout=W.Layout(width="100%", flex_flow="row wrap"))
        self.body = W.VBox([head, self.doc, self.error, self.args_box, self.depends,
                            self.derived, self.for_each, self.save_as, self.when,
                            self.advanced,
                            self.other_problems, self.remove])
        super().__init__([self.empty])
        self.add_class("cl-dsg-form")

    def _advanced(self) -> W.Accordion:
        self.description = W.Text(description="description", continuous_update=True)
        self.description.observe(self._field("description"), names="value")
        self.timeout = W.Text(description="timeout_s", placeholder="seconds per attempt")
        self.timeout.observe(self._field("timeout_s", _number), names="value")
        self.confirm = W.Dropdown(description="confirm", options=_CONFIRM, value=UNSET)
        self.confirm.observe(self._field("confirm", lambda v: None if v == UNSET
                                         else v == "true"), names="value")
        self.attempts = W.Text(description="attempts", placeholder="max_attempts (default 2)")
        self.backoff = W.Dropdown(description="backoff", options=_BACKOFF, value=UNSET)
        self.delay = W.Text(description="delay_s", placeholder="default 0.5")
        for w in (self.attempts, self.backoff, self.delay):
            w.observe(lambda _: self._retry_changed(), names="value")
        self.rollback = W.Dropdown(description="rollback")
        self.rollback_args = W.Textarea(description="undo args",
                                        placeholder='{"id": "{{ output.id }}"}',
                                        layout=W.Layout(height="3em"))
        self.rollback.observe(lambda _: self._rollback_changed(), names="value")
        self.rollback_args.observe(lambda _: self._rollback_changed(), names="value")
        box = W.VBox([self.description, self.timeout, self.confirm, self.attempts, self.backoff,
                      self.delay, self.rollback, self.rollback_args])
        acc = W.Accordion(children=[box], selected_index=None)
        acc.set_title(0, "Advanced: retry, timeout, rollback")
        return acc

    # ------------------------------------------------------------------ draft -> form
    def show(self, step_id: str | None) -> None:
        """Edit ``step_id`` (None: nothing selected)."""
        self.step_id = step_id
        self.error.value = ""
        self.sync()

    def sync(self) -> None:
        draft = self.draft
        if self.step_id is None or self.step_id not in draft.step_ids:
            self.step_id = None
            self.children = [self.empty]
            return
        step = draft.step(self.step_id)
        self.syncing = True
        try:
            self._sync_head(step)
            self._sync_args(step)
            self._sync_fields(step)
        finally:
            self.syncing = False
        if tuple(self.children) != (self.body,):
            self.children = [self.body]
        if draft.parsed is None and draft.typed and not self.error.value:
            self.error.value = ('<div class="cl-note cl-dsg-readonly">The YAML tab does not '
                                "load: this form shows the last draft that did and is read-"
                                "only until the YAML is fixed (an edit here would replace "
                                "the text you typed).</div>")

    def _sync_head(self, step: dict[str, Any]) -> None:
        toolbox = self.designer.toolbox
        tool = str(step.get("tool", ""))
        names = toolbox.names()
        options = [(n, n) for n in names]
        if tool not in names:
            options.append((f"{tool} (not in the toolbox)", tool))
        if list(self.tool_box.options) != options:
            self.tool_box.options = options
        self.tool_box.value = tool
        self.step_id_box.value = str(step.get("id", ""))
        doc = ""
        if tool in toolbox:
            t = toolbox.get(tool)
            doc = (f'<div class="cl-dsg-sig"><code>{html.escape(signature(t))}</code></div>'
                   f'<div class="cl-note">{html.escape(first_line(t.description))}</div>')
        if self.doc.value != doc:
            self.doc.value = doc

    def _sync_args(self, step: dict[str, Any]) -> None:
        draft = self.draft
        tool = str(step.get("tool", ""))
        params = params_of(draft.toolbox.get(tool) if tool in draft.toolbox else None)
        args = step.get("args") or {}
        known = {p.name for p in params}
        params += [Param(k, "json", False, None, False, "not a parameter of this tool")
                   for k in args if k not in known]
        if tool != self.tool or [p.name for p in params] != list(self.rows) or \
                any(self.rows[p.name].param != p for p in params):
            self.tool = tool
            self.rows = {p.name: ArgRow(p, self.set_arg) for p in params}
            self.args_box.children = list(self.rows.values()) or [
                W.HTML('<div class="cl-note">This tool takes no arguments.</div>')]
        refs = draft.references(self.step_id or "")
        mine = [p for p in draft.problems if p.step_id == self.step_id]
        for name, row in self.rows.items():
            row.sync(args.get(name, UNSET), refs,
                     [p for p in mine if p.field == f"args.{name}"])

    def _sync_fields(self, step: dict[str, Any]) -> None:
        draft = self.draft
        # only steps that do not depend on this one (choosing a dependant makes a cycle)
        later = draft.downstream(self.step_id or "")
        others = [i for i in draft.step_ids if i != self.step_id and i not in later]
        deps = [d for d in step.get("depends_on") or [] if isinstance(d, str)]
        options = others + [d for d in deps if d not in others]
        # one message for the new options and the selection: between two, the front end
        # applied the old selection to the new options ("Error setting state: Cannot set
        # properties of undefined (setting 'selected')" in the browser's console, issue 40)
        with self.depends.hold_sync():
            if list(self.depends.options) != options:
                self.depends.options = options
            self.depends.value = tuple(deps)
        data_deps = sorted({r.step_id for r in _step_refs(draft, self.step_id or "")
                            if r.step_id and r.step_id not in deps})
        derived = ('<div class="cl-note cl-dsg-derived">also after (its references): '
                   + ", ".join(f"<code>{html.escape(d)}</code>" for d in data_deps) + "</div>"
                   if data_deps else "")
        if self.derived.value != derived:
            self.derived.value = derived
        self._sync_for_each(step)
        _set_text(self.save_as, step.get("save_as"))
        _set_text(self.when, step.get("when"))
        _set_text(self.description, step.get("description"))
        _set_text(self.timeout, step.get("timeout_s"), _number)
        confirm = step.get("confirm")
        self.confirm.value = UNSET if confirm is None else ("true" if confirm else "false")
        raw = step.get("retry")
        retry: dict[str, Any] = raw if isinstance(raw, dict) else {}
        _set_text(self.attempts, retry.get("max_attempts"), _number)
        self.backoff.value = retry.get("backoff", UNSET) if retry.get("backoff") in (
            "fixed", "exponential") else UNSET
        _set_text(self.delay, retry.get("delay_s"), _number)
        self._sync_rollback(step.get("rollback"))
        args_fields = {f"args.{n}" for n in self.rows}
        rest = [p for p in draft.problems
                if p.step_id == self.step_id and p.field not in args_fields]
        text = "".join(f'<div class="cl-dsg-fieldproblem"><code>{html.escape(p.code)}</code> '
                       f"{html.escape(p.field or '')}: {html.escape(p.message)}</div>"
                       for p in rest)
        if self.other_problems.value != text:
            self.other_problems.value = text

    def _sync_for_each(self, step: dict[str, Any]) -> None:
        """The lists this step could go over: references typed as a list first, then those
        of an unknown type (a context key); the current one kept even when it does not fit
        (the problems say why)."""
        refs = [r for r in self.draft.references(self.step_id or "") if "." in r.source]
        lists = [(f"{r.label}", r.source) for r in refs
                 if r.schema and schema_fits(r.schema, {"type": "array"})]
        unknown = [(f"{r.label} · type unknown", r.source) for r in refs if not r.schema]
        current = whole_ref(step.get("for_each"))
        options = [(_ONE_CALL, UNSET), *lists, *unknown]
        if current is not None and current not in {v for _, v in options}:
            options.append((f"{current} · not a list", current))
        value = current if current is not None else UNSET
        with self.for_each.hold_sync():
            if list(self.for_each.options) != options:
                self.for_each.options = options
            if self.for_each.value != value:
                self.for_each.value = value

    def _sync_rollback(self, rollback: Any) -> None:
        names = self.designer.toolbox.names()
        options = [("tool's default", UNSET), ("none (never undo)", "none")]
        options += [(f"call {n}", n) for n in names]
        current = UNSET
        if rollback == "none":
            current = "none"
        elif isinstance(rollback, dict):
            current = str(rollback.get("tool", ""))
            if current not in names:
                options.append((f"call {current} (not in the toolbox)", current))
        if list(self.rollback.options) != options:
            self.rollback.options = options
        self.rollback.value = current
        args = rollback.get("args") if isinstance(rollback, dict) else None
        shown = from_text(self.rollback_args.value, "json")
        if (shown if shown is not UNSET else None) != (args or None):
            self.rollback_args.value = json.dumps(args) if args else ""
        self.rollback_args.layout.display = "" if isinstance(rollback, dict) else "none"

    # ------------------------------------------------------------------ form -> draft
    def _apply(self, fn: Callable[[], Any]) -> None:
        if self.syncing or self.step_id is None:
            return
        self.error.value = ""
        try:
            fn()
        except DesignerError as exc:
            self.error.value = f'<div class="cl-error">{html.escape(str(exc))}</div>'

    def set_arg(self, name: str, value: Any) -> None:
        step_id = self.step_id
        if value is UNSET:
            self._apply(lambda: self.designer.unset_arg(step_id or "", name))
        else:
            self._apply(lambda: self.designer.set_arg(step_id or "", name, value))

    def _field(self, name: str, convert: Callable[[Any], Any] = lambda v: v or None
               ) -> Callable[[dict[str, Any]], None]:
        def changed(change: dict[str, Any]) -> None:
            value = convert(change["new"])
            self._apply(lambda: self.designer.update_step(self.step_id or "", **{name: value}))

        return changed

    def _retry_changed(self) -> None:
        retry = {"max_attempts": _number(self.attempts.value),
                 "backoff": None if self.backoff.value == UNSET else self.backoff.value,
                 "delay_s": _number(self.delay.value)}
        value = {k: v for k, v in retry.items() if v is not None} or None
        self._apply(lambda: self.designer.update_step(self.step_id or "", retry=value))

    def _rollback_changed(self) -> None:
        choice = self.rollback.value
        value: Any = None
        if choice == "none":
            value = "none"
        elif choice not in (UNSET, None):
            args = from_text(self.rollback_args.value, "json")
            value = {"tool": choice, "args": {} if args is UNSET else args}
        self._apply(lambda: self.designer.update_step(self.step_id or "", rollback=value))

    def _renamed(self, change: dict[str, Any]) -> None:
        if self.syncing or self.step_id is None or change["new"] == self.step_id:
            return
        old, new = self.step_id, change["new"]
        try:
            self.designer.rename_step(old, new)
        except DesignerError as exc:
            self.error.value = f'<div class="cl-error">{html.escape(str(exc))}</div>'
            self.syncing = True
            self.step_id_box.value = old
            self.syncing = False
            return
        self.designer.select(new)

    def _tool_changed(self, change: dict[str, Any]) -> None:
        if self.syncing or self.step_id is None or change["new"] is None:
            return
        tool = change["new"]
        step = self.draft.step(self.step_id)
        keep = {p.name for p in params_of(self.designer.toolbox.get(tool))} \
            if tool in self.designer.toolbox else set()
        args = {k: v for k, v in (step.get("args") or {}).items() if k in keep}
        self._apply(lambda: self.designer.update_step(self.step_id or "", tool=tool,
                                                      args=args or None))

    def _remove(self) -> None:
        if self.step_id is not None:
            step_id = self.step_id
            self.designer.remove_step(step_id)


def _step_refs(draft: Draft, step_id: str) -> list[Reference]:
    """The steps ``step_id`` refers to (by its args and condition), as the DAG draws them."""
    if draft.parsed is None:
        return []
    return [Reference(e.label or "", e.label or "", e.source) for e in edges(draft.parsed)
            if e.target == step_id and e.kind == "data"]


def _number(text: Any) -> Any:
    """A number typed in a box (int or float), None when empty, the text when it is not one."""
    if text is None or isinstance(text, int | float):
        return text
    text = str(text).strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float) and not isinstance(value, bool) else text


def _set_text(box: W.Text, value: Any, parse: Callable[[Any], Any] = lambda v: v or None
              ) -> None:
    """Show ``value`` in ``box`` unless the box already says the same (someone typing)."""
    if parse(box.value) != value:
        box.value = "" if value is None else str(value)
