"""The run widget's failure line (issue 29): the first failure, named (the line itself is
:func:`~.controls.failure_html`), one click from the inspector, which opens on the failed
step until a person picks another one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as W

from chainlab.jupyter.run_widget.controls import failure_html, first_failure

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost, RunView
    from chainlab.jupyter.run_widget.tabs import RunTabs

__all__ = ["FailureLine"]


class FailureLine(W.HBox):
    """:attr:`text` names the first failed step and its error; :attr:`button` ("Show
    'step'", hidden while none failed) opens it in the Inspector tab."""

    def __init__(self, widget: RunHost, tabs: RunTabs):
        self.widget = widget
        self.tabs = tabs
        self.text = W.HTML()
        self.button = W.Button(description="Show in inspector", icon="search",
                             tooltip="open this step in the Inspector",
                             layout=W.Layout(width="auto", display="none"))
        self.button.on_click(widget.on_loop(lambda _: self._show_failed()))
        super().__init__([self.text, self.button])
        self.add_class("cl-failure-line")

    def sync(self, view: RunView) -> None:
        """Name ``view``'s first failure; preselect it in the inspector (not over a
        person's pick)."""
        found = first_failure(view)  # (once: it walks every step)
        shown = failure_html(view, found) if found is not None else ""
        if self.text.value != shown:
            self.text.value = shown
        self.button.layout.display = "" if found else "none"
        if found is not None:
            self.button.description = f"Show {found[0]!r}"
            inspector = self.tabs.inspector
            if not inspector.picked and inspector.picker.value != found[0]:
                inspector.select_quietly(found[0])  # the inspector opens on it

    def _show_failed(self) -> None:
        found = first_failure(self.widget.view)
        if found is not None:
            self.tabs.inspect(found[0])
