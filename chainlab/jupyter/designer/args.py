"""One row of the designer's step form per tool argument: the tool's input schema read as
form fields (:class:`Param`), and :class:`ArgRow`, a literal input by JSON type or a
reference picked from what is in scope. A row reports a change through the ``set_arg``
callback it is given (the form's)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from chainlab.errors import Problem
from chainlab.jupyter.designer.draft import UNSET, Reference, type_name, whole_ref
from chainlab.plan import yamltext
from chainlab.plan.reftypes import schema_fits
from chainlab.tools import Tool

__all__ = ["ArgRow", "Param", "from_text", "params_of", "to_text", "whole_ref"]


@dataclass(frozen=True, slots=True)
class Param:
    """One input field of a tool, as the form shows it."""

    name: str
    kind: str  # string | integer | number | boolean | enum | json
    required: bool
    default: Any
    has_default: bool
    type_text: str
    choices: tuple[Any, ...] = ()
    description: str = ""
    schema: dict[str, Any] | None = None  # the input's JSON Schema (with the tool's $defs)


def params_of(tool: Tool | None) -> list[Param]:
    if tool is None:
        return []
    schema = tool.input_schema()
    required = set(schema.get("required", []))
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        if "$ref" in prop and "$defs" in schema:
            prop = {**schema["$defs"].get(prop["$ref"].rsplit("/", 1)[-1], {}), **prop}
        main = prop
        options = [s for s in prop.get("anyOf", []) if s.get("type") != "null"]
        if len(options) == 1:
            main = {**options[0], **{k: v for k, v in prop.items() if k != "anyOf"}}
        kind = main.get("type")
        if "enum" in main:
            form_kind = "enum"
        elif kind == "boolean":
            form_kind = "boolean"
        elif kind in ("string", "integer", "number"):
            form_kind = kind
        else:
            form_kind = "json"
        defs = {"$defs": schema["$defs"]} if "$defs" in schema else {}
        out.append(Param(name, form_kind, name in required, prop.get("default"),
                          "default" in prop, type_name(prop) or "any",
                          tuple(main.get("enum", ())), prop.get("description", ""),
                          {**prop, **defs}))
    return out


def to_text(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and kind in ("string", "integer", "number", "json"):
        return value
    return json.dumps(value, ensure_ascii=False)


def from_text(text: str, kind: str) -> Any:
    """The arg value typed in a text box: "" means unset; numbers and JSON are parsed; what
    does not parse stays text (and validation says why it does not fit)."""
    if text == "":
        return UNSET
    if kind == "string":
        return text
    try:
        return json.loads(text)
    except ValueError:
        if kind == "json":
            try:
                value, _ = yamltext.parse(text)  # the plan's loader: aliases refused
                return json.loads(json.dumps(value))
            except Exception:
                return text
        return text


_TYPED = "a value typed here"  # the reference dropdown's first choice: no reference


class ArgRow(W.VBox):
    """One argument: a literal input (by JSON type) or a reference from a dropdown."""

    def __init__(self, param: Param, set_arg: Callable[[str, Any], None]):
        self.set_arg = set_arg  # (name, value); UNSET leaves the argument out
        self.param = param
        self.syncing = False
        req = '<span class="cl-dsg-req" title="required">*</span>' if param.required else ""
        shown = json.dumps(param.default, ensure_ascii=False)
        default = (f' <span class="cl-dsg-default">default {html.escape(shown)}</span>'
                   if param.has_default else "")
        tip = f' title="{html.escape(param.description)}"' if param.description else ""
        self.label = W.HTML(f'<span class="cl-dsg-argname"{tip}>{html.escape(param.name)}</span>'
                            f'{req} <span class="cl-dsg-type">{html.escape(param.type_text)}</span>'
                            f"{default}")
        self.literal = self._literal_widget()
        self.ref = W.Dropdown(options=[(_TYPED, "")], value="", layout=W.Layout(width="12.5em"),
                              description="from",
                              tooltip=f"use a value from another step or the context for "
                                      f"{param.name}")
        self.ref.add_class("cl-dsg-refpick")
        self.ref.observe(self._ref_changed, names="value")
        self.problem = W.HTML()
        row = W.HBox([self.literal, self.ref], layout=W.Layout(width="100%"))
        row.add_class("cl-dsg-argrow")
        super().__init__([self.label, row, self.problem])
        self.add_class("cl-dsg-arg")
        self.add_class(f"cl-dsg-arg-{param.name}")

    def _literal_widget(self) -> W.DOMWidget:
        p = self.param
        if p.kind in ("enum", "boolean"):
            values = list(p.choices) if p.kind == "enum" else [True, False]
            first = "— default —" if p.has_default else "— choose —"
            options = [(first, UNSET)] + [(json.dumps(v), json.dumps(v)) for v in values]
            w: W.DOMWidget = W.Dropdown(options=options, value=UNSET,
                                        layout=W.Layout(flex="1 1 auto", width="auto"))
        else:
            placeholder = ("required" if p.required else
                           f"default {json.dumps(p.default, ensure_ascii=False)}")
            cls = W.Textarea if p.kind == "json" else W.Text
            w = cls(placeholder=placeholder, continuous_update=True,
                    layout=W.Layout(flex="1 1 auto", width="auto"))
            if p.kind == "json":
                w.layout.height = "2.4em"
        w.add_class("cl-dsg-literal")
        w.observe(self._literal_changed, names="value")
        return w

    # ------------------------------------------------------------------ draft -> row
    def sync(self, value: Any, refs: list[Reference], problems: list[Problem]) -> None:
        self.syncing = True
        try:
            source = whole_ref(value)
            # what fits the parameter's type first, then the rest, marked (issue 40: a
            # string parameter was offered an array and a number first)
            fit = [schema_fits(r.schema, self.param.schema) for r in refs]
            options: list[tuple[str, str]] = [(_TYPED, "")]
            options += [(r.label, r.source) for r, ok in zip(refs, fit, strict=True) if ok]
            options += [(f"{r.label} (not a {self.param.type_text})", r.source)
                        for r, ok in zip(refs, fit, strict=True) if not ok]
            if source is not None and source not in {r.source for r in refs}:
                options.append((f"{source} (not in scope)", source))
            if list(self.ref.options) != options:
                self.ref.options = options
            self.ref.value = source or ""
            self.literal.layout.display = "none" if source else ""
            self.ref.layout.width = "100%" if source else "12.5em"
            if not source:
                self._show_literal(value)
            text = "".join(f'<div class="cl-dsg-fieldproblem"><code>{html.escape(p.code)}</code> '
                           f"{html.escape(p.message)}</div>" for p in problems)
            if self.problem.value != text:
                self.problem.value = text
        finally:
            self.syncing = False

    def _show_literal(self, value: Any) -> None:
        p = self.param
        if isinstance(self.literal, W.Dropdown):
            want = UNSET if value is UNSET else json.dumps(value)
            if want not in [v for _, v in self.literal.options]:
                self.literal.options = [*self.literal.options, (f"{want} (not allowed)", want)]
            self.literal.value = want
            return
        current = from_text(self.literal.value, p.kind)
        if current != value or (current is UNSET) != (value is UNSET):
            self.literal.value = "" if value is UNSET else to_text(value, p.kind)

    # ------------------------------------------------------------------ row -> draft
    def _literal_changed(self, change: dict[str, Any]) -> None:
        if self.syncing:
            return
        if isinstance(self.literal, W.Dropdown):
            value = UNSET if change["new"] == UNSET else json.loads(change["new"])
        else:
            value = from_text(change["new"], self.param.kind)
        self.set_arg(self.param.name, value)

    def _ref_changed(self, change: dict[str, Any]) -> None:
        if self.syncing:
            return
        source = change["new"]
        if source:
            self.set_arg(self.param.name, f"{{{{ {source} }}}}")
        else:  # back to a literal: what the box holds (nothing, at first)
            self.literal.layout.display = ""
            self._literal_changed({"new": self.literal.value})
