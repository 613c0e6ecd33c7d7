"""The confirmation a person sees before Rollback (issue 18): what will be compensated, in
which order (``run.undoable()``, the runtime's own rollback plan), and what waits for a
decision and will then not run."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import ipywidgets as W

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost

__all__ = ["RollbackConfirm"]


class RollbackConfirm(W.VBox):
    """Hidden until :meth:`ask`; **Roll back** runs ``run.rollback()``, **Keep** closes it."""

    def __init__(self, widget: RunHost):
        self.widget = widget
        self.message = W.HTML()
        self.yes = W.Button(description="Roll back", button_style="danger", icon="undo")
        self.no = W.Button(description="Keep")
        self.yes.on_click(widget.on_loop(lambda _: self.confirm()))
        self.no.on_click(widget.on_loop(lambda _: self.close_box()))
        super().__init__([self.message, W.HBox([self.yes, self.no])],
                         layout=W.Layout(display="none"))
        self.add_class("cl-confirm")

    @property
    def is_open(self) -> bool:
        return self.layout.display != "none"

    def ask(self) -> None:
        """Show what a rollback would compensate now and ask for a confirmation."""
        run = self.widget.run
        plan = run.undoable()
        steps = ", ".join(f"<code>{html.escape(s)}</code>" for s in plan) or "nothing"
        text = (f"<b>Roll back run <code>{html.escape(run.run_id)}</code>?</b> "
                f"This compensates, most recent first: {steps}.")
        waiting = run.waiting()
        if waiting:
            names = ", ".join(f"<code>{html.escape(s)}</code>" for s in waiting)
            text += (f" <b>{len(waiting)} step{'s' if len(waiting) != 1 else ''} still "
                     f"wait{'s' if len(waiting) == 1 else ''} for a decision</b> ({names}) "
                     "and will not run.")
        self.message.value = f'<div class="cl-confirm-text">{text}</div>'
        self.layout.display = ""

    def confirm(self) -> None:
        """What **Roll back** does: resume the run here when nobody drives it, then roll
        it back (an error shows in the widget)."""
        self.close_box()
        host = self.widget

        async def rollback() -> None:
            live = await host.live()
            await live.rollback()

        host.act("rollback", rollback)

    def close_box(self) -> None:
        self.layout.display = "none"
