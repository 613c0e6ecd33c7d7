"""The run widget's toolbar: Run/Pause/Step/Resume/Cancel/Rollback and the step that Step
releases next, and what a press of each does. Which buttons work in a run's state is a pure
rule of :mod:`.controls` (:data:`~.controls.BUTTONS`, :func:`~.controls.enabled`); the
buttons call the run's public coroutines through the host's ``act`` (the same controller a
script uses), and Rollback first asks (:class:`~.confirm.RollbackConfirm`). It takes its
widget as a :class:`~.host.RunHost`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as W

from chainlab.jupyter.run_widget.choices import set_choices
from chainlab.jupyter.run_widget.controls import BUTTONS, enabled

if TYPE_CHECKING:
    from chainlab.events.status import RunStatus
    from chainlab.jupyter.run_widget.confirm import RollbackConfirm
    from chainlab.jupyter.run_widget.host import RunHost, RunView

__all__ = ["Toolbar"]


class Toolbar(W.HBox):
    """The buttons (:attr:`buttons`, by name) and the ``next`` dropdown (:attr:`next_step`,
    shown while Step works)."""

    def __init__(self, widget: RunHost, rollback_confirm: RollbackConfirm):
        self.widget = widget
        self.rollback_confirm = rollback_confirm
        self.buttons: dict[str, W.Button] = {}
        for name, label, icon, tip in BUTTONS:
            b = W.Button(description=label, icon=icon, tooltip=tip,
                         layout=W.Layout(width="auto"))
            b.on_click(widget.on_loop(lambda _, name=name: self.press(name)))
            self.buttons[name] = b
        self.next_step = W.Dropdown(description="next", options=[], layout=W.Layout(width="16em"))
        super().__init__([*self.buttons.values(), self.next_step])
        self.add_class("cl-toolbar")

    def sync(self, view: RunView, status: RunStatus, ready: list[str]) -> None:
        """Offer the ready steps (release order; the first is preselected) and enable the
        buttons that work in ``view``'s state."""
        set_choices(self.next_step, ready)
        can = enabled(view, status, ready)
        for name, button in self.buttons.items():
            if button.disabled == can[name]:
                button.disabled = not can[name]
        self.next_step.layout.display = "" if can["step"] else "none"

    def press(self, name: str) -> None:
        """What each toolbar button does (``buttons[name].click()`` calls this)."""
        widget = self.widget
        run = widget.run
        if name == "continue":
            widget.act("continue", run.unpause)
        elif name == "pause":
            widget.act("pause", run.pause)
        elif name == "step":
            chosen = self.next_step.value
            widget.act("step", lambda: run.step(chosen))
        elif name == "resume":
            widget.act("resume", widget.live)
        elif name == "cancel":
            widget.act("cancel", run.cancel)
        elif name == "rollback":
            self.rollback_confirm.ask()  # says what will be compensated; Roll back acts
        else:
            raise ValueError(f"no button {name!r}; buttons: {', '.join(self.buttons)}")
