"""The designer's context form: one box per context key the draft refers to, typed from
where it is used (the parameter a ``{{ context.KEY }}`` feeds), so that "valid" means a run
could start (issue 29). It edits the same context as the head bar's JSON box."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as W

from chainlab.jupyter.designer.args import from_text, to_text
from chainlab.jupyter.designer.draft import UNSET, Draft
from chainlab.plan.refs import TemplateSyntaxError, parse_template
from chainlab.plan.reftypes import type_text

__all__ = ["ContextForm", "context_types"]

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
        for name, value in (args.items() if isinstance(args, dict) else ()):
            if not isinstance(value, str) or "{{" not in value or name not in props:
                continue
            try:
                ref = parse_template(value).whole
            except TemplateSyntaxError:
                continue
            if ref is None or ref.root != "context" or len(ref.path) != 1:
                continue
            key = ref.path[0]
            if isinstance(key, str) and key in out and not out[key]:
                out[key] = type_text(props[name], defs)
    return out


class ContextForm(W.VBox):
    """``needs context`` rows: one Text per key, its type as the placeholder."""

    def __init__(self, set_key: Callable[[str, Any], None]):
        self.set_key = set_key  # (key, value); UNSET removes the key
        self.rows: dict[str, W.Text] = {}
        self.kinds: dict[str, str] = {}
        self.title = W.HTML()
        self._syncing = False
        super().__init__([])
        self.add_class("cl-dsg-context")

    def sync(self, draft: Draft) -> None:
        types = context_types(draft)
        if list(types) != list(self.rows) or any(
                self.rows[k].placeholder != (t or "any JSON value") for k, t in types.items()):
            self.rows, self.kinds = {}, {}
            for key, kind in types.items():
                box = W.Text(description=key, placeholder=kind or "any JSON value",
                             continuous_update=False, layout=W.Layout(width="22em"),
                             style={"description_width": "initial"})
                box.add_class(f"cl-dsg-ctx-{key}")
                box.observe(lambda change, key=key: self._typed(key, change["new"]),
                            names="value")
                self.rows[key] = box
                self.kinds[key] = _KINDS.get(kind, "json")
            self.children = [self.title, *self.rows.values()] if self.rows else []
        missing = draft.missing_context()
        title = ('<span class="cl-dsg-ctxtitle">context</span> <span class="cl-note">'
                 + (f"a run needs {html.escape(', '.join(missing))}" if missing
                    else "every key the chain refers to is given") + "</span>")
        if self.title.value != title:
            self.title.value = title
        have = draft.context or {}
        self._syncing = True
        try:
            for key, box in self.rows.items():
                shown = to_text(have[key], self.kinds[key]) if key in have else ""
                if from_text(box.value, self.kinds[key]) != have.get(key, UNSET):
                    box.value = shown
        finally:
            self._syncing = False

    def _typed(self, key: str, text: str) -> None:
        if self._syncing:
            return
        if not text.strip():
            self.set_key(key, UNSET)
            return
        # a number that does not parse stays text, and validation says why it does not fit
        self.set_key(key, from_text(text.strip(), self.kinds[key]))


