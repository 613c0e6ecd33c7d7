"""Forks in the run widget: "Fork from here" on the inspected step (:class:`ForkPanel`,
part of the step inspector) and the note a fork's approval cards carry, what the parent run
already did with the step (:func:`fork_notes`). The panel takes its widget as a
:class:`~.host.RunHost`."""

from __future__ import annotations

import html
import json
from collections.abc import Reversible
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events import Event
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.jupyter.views import error_html

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost, RunView
    from chainlab.jupyter.run_widget.inbox import Inbox

__all__ = ["ForkPanel", "fork_notes"]

esc = html.escape


class ForkPanel(W.VBox):
    """"Fork from here" on the inspected step: a new run that runs this step (with the args
    typed here) and what depends on it again, and reuses everything else that did not
    change. **Preview** shows the fork plan (nothing runs); **Fork** starts it and shows
    its widget below."""

    def __init__(self, widget: RunHost, picker: W.Dropdown):
        self.widget = widget
        self.picker = picker  # the step inspector's: the inspected step is the one forked
        self.open_button = W.Button(description="Fork from here", icon="code-branch",
                                    tooltip="start a new run from this step (runtime.fork)")
        self.args = W.Textarea(description="args", layout=W.Layout(width="95%", height="6em"),
                               style={"description_width": "initial"})
        self.preview_button = W.Button(description="Preview", icon="list",
                                       tooltip="the fork plan: what is reused, what runs")
        self.fork_button = W.Button(description="Fork", icon="play", button_style="warning",
                                    tooltip="start the fork")
        self.plan = W.HTML()
        self.out = W.Output()
        self.forked: Any = None  # the last Run this panel started
        self.editor = W.VBox([self.args, W.HBox([self.preview_button, self.fork_button]),
                              self.plan])
        self.editor.layout.display = "none"
        self.open_button.on_click(widget.on_loop(lambda _: self.toggle()))
        self.preview_button.on_click(widget.on_loop(lambda _: self.preview()))
        self.fork_button.on_click(widget.on_loop(lambda _: self.start()))
        self._step: str | None = None
        super().__init__([self.open_button, self.editor, self.out])
        self.add_class("cl-fork")

    def refresh(self) -> None:
        real = self.widget.run  # while scrubbing too: the run itself, not its past
        step_id = self.picker.value
        ended = real.status in RUN_TERMINAL or real.status == RunStatus.SUSPENDED
        top = step_id is not None and "/" not in step_id
        self.open_button.disabled = not (ended and top)
        if step_id != self._step:
            self._step = step_id
            st = real.steps.get(step_id) if step_id is not None else None
            self.args.value = json.dumps((st.args if st is not None else None) or
                                         self._declared_args(step_id), indent=1)
            self.plan.value = ""

    def _declared_args(self, step_id: str | None) -> dict[str, Any]:
        for step in self.widget.run.chain.steps:
            if step.id == step_id:
                return dict(step.args)
        return {}

    def toggle(self) -> None:
        shown = self.editor.layout.display != "none"
        self.editor.layout.display = "none" if shown else ""
        if not shown:
            self.preview()

    def edits(self) -> dict[str, Any]:
        """``runtime.fork`` arguments: rerun the step, with the args typed here when they
        differ from what it ran with. Raises ValueError for text that is not a JSON object."""
        step_id = self.picker.value
        try:
            args = json.loads(self.args.value or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"args are not JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(args, dict):
            raise ValueError(f"args must be a JSON object, got {type(args).__name__}")
        st = self.widget.run.steps.get(step_id)
        edits: dict[str, Any] = {"rerun": [step_id]}
        declared = self._declared_args(step_id)
        if args != ((st.args if st is not None else None) or declared):
            edits["args"] = {step_id: args}
        return edits

    def _runtime(self) -> Any:
        widget = self.widget
        if widget.session is not None:
            try:
                toolbox, _ = widget.session.toolbox(None)
            except Exception:
                return widget.run.runtime
            if toolbox is not widget.run.runtime.toolbox:
                return widget.session.runtime(
                    toolbox, widget.session.run_stores.get(widget.run.run_id))
        return widget.run.runtime

    def preview(self) -> None:
        """Show the fork plan as a table (nothing runs, nothing is written)."""
        try:
            plan = self._runtime().fork_plan_sync(self.widget.run.run_id, **self.edits())
        except Exception as exc:
            self.plan.value = error_html(exc)
            return
        head = "".join(f"<th>{esc(c)}</th>" for c in ("step", "parent", "decision", "reason"))
        rows = "".join(
            f"<tr><td>{esc(r['step'])}</td><td>{esc(r['parent'])}</td>"
            f"<td><b>{esc(r['decision'])}</b></td><td>{esc(r['reason'])}</td></tr>"
            for r in plan.table())
        self.plan.value = (f'<div class="cl-label">fork plan</div><table class="cl-table">'
                           f"<tr>{head}</tr>{rows}</table>")

    def start(self) -> None:
        """Start the fork and show its widget under the panel."""
        try:
            edits = self.edits()
        except ValueError as exc:
            self.widget.show_error(exc, action="fork")
            return
        runtime = self._runtime()

        def shown(run: Any) -> None:
            self.forked = run
            session = self.widget.session
            if session is not None:
                session.remember(run, session.run_stores.get(self.widget.run.run_id))
            view = self.widget.widget_for(run)
            if session is not None:
                session.widgets[run.run_id] = view
            self.out.clear_output()
            with self.out:
                from IPython.display import display

                display(view)

        async def go() -> None:
            shown(await runtime.fork(self.widget.run.run_id, **edits))

        self.widget.act("fork", go)


def fork_notes(run: RunView, inbox: Inbox, events: Reversible[Event]) -> None:
    """On a fork's approval cards: what the parent run already did with the step (read from
    the fork's ``step_waiting_confirmation`` events); each card gets its note once."""
    if "forked_from" not in run.record.meta:
        return
    for step_id, card in inbox.cards.items():
        if getattr(card, "_fork_note", False):
            continue
        note = _fork_note(events, step_id)
        if note:
            card._fork_note = True  # type: ignore[attr-defined]
            card.children = (*card.children, W.HTML(
                f'<div class="cl-note cl-fork-note">↳ fork: {html.escape(note)}</div>'))


def _fork_note(events: Reversible[Event], step_id: str) -> str | None:
    for ev in reversed(events):
        if ev.kind == "step_waiting_confirmation" and ev.step_id == step_id:
            fork = ev.payload.get("fork")
            return fork.get("note") if isinstance(fork, dict) else None
    return None
