"""The designer's head bar: its title, the chain's name, the draft's verdict and step
count, the run's context (JSON), **Run** and **Write cell**. It draws the draft; the
designer wires what its boxes and buttons do."""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as W

from chainlab.jupyter.designer.draft import Draft

__all__ = ["HeadBar", "status_html"]


def status_html(draft: Draft) -> str:
    """The verdict badge (valid, N problems, does not load) and the step count."""
    n, problems = len(draft.step_ids), draft.problems
    ok = draft.parsed is not None and not problems
    needs = ok and bool(draft.missing_context())
    cls = "cl-dsg-needs" if needs else "cl-dsg-ok" if ok else "cl-dsg-bad"
    mark = "✓" if ok and not needs else "⚠"
    return (f'<span class="cl-badge {cls}">{mark} {html.escape(draft.verdict)}</span> '
            f'<span class="cl-summary">{n} step{"s" if n != 1 else ""}</span>')


class HeadBar(W.HBox):
    """Title, name box, status, context box, Run, Write cell."""

    def __init__(self) -> None:
        self.title = W.HTML('<span class="cl-dsg-title">chain designer</span>')
        self.name_box = W.Text(description="name", continuous_update=False,
                               layout=W.Layout(width="15em"))
        self.status = W.HTML()
        self.context_box = W.Text(description="context", continuous_update=False,
                                  placeholder='{"key": "value"}', layout=W.Layout(width="17em"),
                                  tooltip="the run's context as JSON")
        self.run_button = W.Button(description="Run", icon="play", button_style="success",
                                   tooltip="start the chain and show its run widget below",
                                   layout=W.Layout(width="auto"))
        self.write_button = W.Button(description="Write cell", icon="file-code-o",
                                     tooltip="insert a %%chain cell with this YAML below",
                                     layout=W.Layout(width="auto"))
        super().__init__([self.title, self.name_box, self.status, self.context_box,
                          self.run_button, self.write_button])
        self.add_class("cl-dsg-head")

    def show(self, draft: Draft, *, name: bool = True) -> None:
        """Draw ``draft`` (its name too unless ``name`` is False: someone typed it)."""
        shown = str(draft.data.get("name") or "")
        if name and self.name_box.value != shown:
            self.name_box.value = shown
        status = status_html(draft)
        if self.status.value != status:
            self.status.value = status
        self.run_button.disabled = not draft.runnable
        why = ("start the chain and show its run widget below" if draft.runnable else
               "add a step first" if draft.chain is not None and not draft.step_ids else
               "fill in the context first: " + ", ".join(draft.missing_context())
               if draft.chain is not None else "fix the problems first")
        if self.run_button.tooltip != why:
            self.run_button.tooltip = why

    def context_value(self) -> dict[str, Any] | None:
        """The context typed in the box (None when empty). Raises ValueError saying what is
        wrong with it."""
        text = self.context_box.value.strip()
        try:
            value = json.loads(text) if text else None
        except ValueError as exc:
            raise ValueError(f"context: not JSON ({exc})") from None
        if value is not None and not isinstance(value, dict):
            raise ValueError("context: a JSON object, e.g. {\"customer\": \"Ada\"}")
        return value
