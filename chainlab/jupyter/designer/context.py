"""The designer's context form: one box per context key the draft takes, so that "valid"
means a run could start (issue 29). A chain that declares ``inputs:`` gets one box per
declared input, typed and defaulted by its declaration (an ``enum`` is a dropdown), its
description written beside it; otherwise one box per key the draft refers to, typed from
where it is used (the parameter a ``{{ context.KEY }}`` feeds). It edits the same context
as the head bar's JSON box."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from chainlab.jupyter.designer.args import from_text, to_text
from chainlab.jupyter.designer.draft import UNSET, Draft
from chainlab.plan.reftypes import type_text, whole_arg_refs

__all__ = ["ContextField", "ContextForm", "context_fields", "context_types"]

_KINDS = {"string": "string", "integer": "integer", "number": "number"}


def context_types(draft: Draft) -> dict[str, str]:
    """Context key -> the type of the first parameter it feeds whole (``"string"``,
    ``"array of object"``), or ``""`` when it is used inside text or a condition only."""
    out: dict[str, str] = {k: "" for k in draft.context_keys()}
    for step in draft.steps:
        tool = str(step.get("tool", ""))
        if tool not in draft.toolbox:
            continue
        try:
            schema = draft.toolbox.get(tool).input_schema()
        except Exception:  # pragma: no cover - pydantic describes the models it built
            continue
        props, defs = schema.get("properties", {}), schema.get("$defs", {})
        args = step.get("args")
        for name, ref in whole_arg_refs(args if isinstance(args, dict) else {}, props):
            if ref.root != "context" or len(ref.path) != 1:
                continue
            key = ref.path[0]
            if isinstance(key, str) and key in out and not out[key]:
                out[key] = type_text(props[name], defs)
    return out


@dataclass(frozen=True, slots=True)
class ContextField:
    """One box of the form: the key, the type its value is parsed as, the box's placeholder,
    the declared description (shown beside the box) and the values a dropdown offers (a
    declared ``enum``)."""

    key: str
    kind: str  # string | integer | number | json
    placeholder: str
    description: str = ""
    choices: tuple[Any, ...] = ()


def context_fields(draft: Draft) -> list[ContextField]:
    """The form's boxes: the draft's declared inputs (when it declares them), else the keys
    it refers to, typed from where they are used (:func:`context_types`)."""
    chain = draft.parsed
    if chain is not None and chain.inputs is not None:
        out = []
        for key, spec in chain.inputs.items():
            types = spec.types or ()
            kind = _KINDS.get(types[0], "json") if len(types) == 1 else "json"
            hint = spec.summary().split(": ", 1)[0] if spec.description else spec.summary()
            out.append(ContextField(key, kind, hint, spec.description,
                                    tuple(spec.enum) if spec.enum is not None else ()))
        return out
    return [ContextField(k, _KINDS.get(t, "json"), t or "any JSON value")
            for k, t in context_types(draft).items()]


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class ContextForm(W.VBox):
    """``needs context`` rows: one Text per key (a Dropdown for a declared ``enum``), its
    type as the placeholder."""

    def __init__(self, set_key: Callable[[str, Any], None]):
        self.set_key = set_key  # (key, value); UNSET removes the key
        self.rows: dict[str, W.Text | W.Dropdown] = {}
        self.kinds: dict[str, str] = {}
        self.fields: list[ContextField] = []
        self.title = W.HTML()
        self._syncing = False
        super().__init__([])
        self.add_class("cl-dsg-context")

    def _box(self, f: ContextField) -> W.Text | W.Dropdown:
        common: dict[str, Any] = {"description": f.key, "layout": W.Layout(width="22em"),
                                  "style": {"description_width": "initial"}}
        if f.choices:
            options = [(f"({f.placeholder})", UNSET),
                       *((_label(v), i) for i, v in enumerate(f.choices))]
            box: W.Text | W.Dropdown = W.Dropdown(options=options, value=UNSET, **common)
            box.observe(lambda change, f=f: self._chosen(f, change["new"]), names="value")
        else:
            box = W.Text(placeholder=f.placeholder, continuous_update=False, **common)
            box.observe(lambda change, key=f.key: self._typed(key, change["new"]),
                        names="value")
        box.add_class(f"cl-dsg-ctx-{f.key}")
        return box

    def _row(self, f: ContextField) -> W.Widget:
        """The box, and its declared description beside it (written out: ipywidgets draws
        no tooltip for a box that has a label)."""
        box = self.rows[f.key]
        if not f.description:
            return box
        note = W.HTML(f'<span class="cl-note cl-dsg-ctxdesc">{html.escape(f.description)}'
                      "</span>")
        row = W.HBox([box, note])
        row.add_class("cl-dsg-ctxrow")
        return row

    def sync(self, draft: Draft) -> None:
        fields = context_fields(draft)
        if fields != self.fields:
            self.fields = fields
            self.rows = {f.key: self._box(f) for f in fields}
            self.kinds = {f.key: f.kind for f in fields}
            self.children = [self.title, *map(self._row, fields)] if self.rows else []
        missing = draft.missing_context()
        title = ('<span class="cl-dsg-ctxtitle">context</span> <span class="cl-note">'
                 + (f"a run needs {html.escape(', '.join(missing))}" if missing
                    else "every key the chain refers to is given") + "</span>")
        if self.title.value != title:
            self.title.value = title
        have = draft.context or {}
        self._syncing = True
        try:
            for f in self.fields:
                box = self.rows[f.key]
                if isinstance(box, W.Dropdown):
                    index = next((i for i, v in enumerate(f.choices)
                                  if f.key in have and v == have[f.key]), UNSET)
                    if box.value != index:
                        box.value = index
                    continue
                shown = to_text(have[f.key], f.kind) if f.key in have else ""
                if from_text(box.value, f.kind) != have.get(f.key, UNSET):
                    box.value = shown
        finally:
            self._syncing = False

    def _chosen(self, f: ContextField, index: Any) -> None:
        if not self._syncing:
            self.set_key(f.key, UNSET if index == UNSET else f.choices[index])

    def _typed(self, key: str, text: str) -> None:
        if self._syncing:
            return
        if not text.strip():
            self.set_key(key, UNSET)
            return
        # a number that does not parse stays text, and validation says why it does not fit
        self.set_key(key, from_text(text.strip(), self.kinds[key]))


