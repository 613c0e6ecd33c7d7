"""The designer's editor, right of the DAG: the **Step** tab (a step picker and the
selected step's :class:`~.form.StepForm`) and the **YAML** tab (the draft's text, applied
after a pause in typing). It draws the draft; a person's choices go to the designer (its
:class:`~.host.DesignerHost`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.jupyter.designer.draft import Draft
from chainlab.jupyter.designer.form import StepForm
from chainlab.jupyter.designer.view import Later

if TYPE_CHECKING:
    from chainlab.jupyter.designer.host import DesignerHost

__all__ = ["YAML_DELAY_S", "Editor"]

YAML_DELAY_S = 0.4  # typing in the YAML tab is applied after this long without a key


class Editor(W.Tab):
    """The Step and YAML tabs. ``on_text(text)`` applies text typed in the YAML tab."""

    def __init__(self, designer: DesignerHost, draft: Draft, on_text: Callable[[str], None]):
        self.designer = designer
        self.draft = draft
        self.on_text = on_text
        self._quieted = False
        self.step_picker = W.Dropdown(description="step", options=[("—", "")], value="",
                                      layout=W.Layout(width="auto", margin="2px 6px 4px 2px"))
        self.step_picker.observe(self._picked, names="value")
        self.form = StepForm(designer, draft)
        self.yaml_area = W.Textarea(continuous_update=True,
                                    layout=W.Layout(width="100%", height="22em"))
        self.yaml_area.add_class("cl-dsg-yaml")
        self.yaml_later = Later(YAML_DELAY_S, self._apply_yaml, restart=True)
        self.yaml_area.observe(lambda _: self.yaml_later(), names="value")
        super().__init__(children=[W.VBox([self.step_picker, self.form]),
                                   W.VBox([self.yaml_area])])
        self.titles = ("Step", "YAML")
        self.add_class("cl-dsg-editor")

    def show(self, selected: str | None, *, text: bool = True) -> None:
        """Draw the draft with ``selected`` picked (and its text, unless ``text`` is False:
        it was typed here)."""
        draft = self.draft
        if text and self.yaml_area.value != draft.text:
            self.yaml_later.cancel()
            self.yaml_area.value = draft.text
        options = [(i, i) for i in draft.step_ids] or [("—", "")]
        with self._quiet():  # new options reset a Dropdown's value: not a person's choice
            if list(self.step_picker.options) != options:
                self.step_picker.options = options
            self.step_picker.value = selected or ""
        self.form.show(selected) if self.form.step_id != selected else self.form.sync()

    def pick(self, step_id: str | None) -> None:
        """Show ``step_id``'s form (None: none) in the Step tab."""
        with self._quiet():
            if (step_id or "") in [v for _, v in self.step_picker.options]:
                self.step_picker.value = step_id or ""
        self.form.show(step_id)
        if step_id is not None:
            self.selected_index = 0

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Changes made here are the editor's own, not a person's selection."""
        before, self._quieted = self._quieted, True
        try:
            yield
        finally:
            self._quieted = before

    def _picked(self, change: dict[str, Any]) -> None:
        if self._quieted:
            return
        step_id = change["new"] or None
        if step_id != self.designer.selected and (step_id is None
                                                  or step_id in self.draft.step_ids):
            self.designer.select(step_id)

    def _apply_yaml(self) -> None:
        text = self.yaml_area.value
        if text != self.draft.text:
            self.on_text(text)
