"""Time travel in the run widget: the :class:`Scrubber` (a slider over the run's events)
and :class:`RunAt`, the read-only run as it was right after one of them.

While the scrubber is moved back, the widget's :attr:`~.host.CardHost.view` is a
:class:`RunAt`: every panel draws from it (the DAG with the same style patch as live status,
the inspector, the approvals, the event log), and every control is read-only. The run
itself (:attr:`~.host.CardHost.run`) is never replaced.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events.status import RunStatus, StepStatus

if TYPE_CHECKING:
    from chainlab.events import Event
    from chainlab.events.fold import StepState
    from chainlab.jupyter.run_widget.event_log import EventLog
    from chainlab.jupyter.run_widget.host import RunHost
    from chainlab.runtime.runtime import Run

__all__ = ["RunAt", "Scrubber"]


class RunAt:
    """A read-only view of a run as it was right after its event ``seq`` (what the scrubber
    shows): what the widget's panels read (:class:`~.host.RunView`), from
    ``run.state_at(seq)``."""

    active = False
    paused = False

    def __init__(self, run: Run, seq: int):
        self.real = run
        self.seq = seq
        self.state = run.state_at(seq)
        self.run_id, self.chain, self.record = run.run_id, run.chain, run.record
        self.runtime, self.toolbox = run.runtime, run.toolbox

    @property
    def steps(self) -> dict[str, StepState]:
        return self.state.steps

    @property
    def status(self) -> RunStatus:
        return self.state.status or RunStatus.RUNNING

    @property
    def outputs(self) -> dict[str, Any]:
        return self.state.outputs

    def ready_steps(self) -> list[str]:
        return []

    def undoable(self) -> list[str]:
        return []

    def waiting(self) -> dict[str, str]:
        return {step_id: str(st.status) for step_id, st in self.steps.items()
                if st.status in (StepStatus.WAITING_CONFIRMATION, StepStatus.IN_DOUBT)}

    def event_list(self) -> list[Event]:
        return [ev for ev in self.real.history() if ev.seq <= self.seq]


class Scrubber(W.HBox):
    """Time travel over a run's events: a slider (as wide as the widget), a box to type any
    event's number, previous/next event, previous/next event of the step selected in the
    Inspector, and **Live**. While scrubbed, the DAG (only the nodes whose look changed are
    sent), the inspector, the approvals and the event log show the state right after the
    chosen event, and every control is read-only.

    ``host``: the widget (its run, a redraw, the error line, the selected step);
    ``event_log``: the log whose events name the scrubbed position."""

    def __init__(self, host: RunHost, event_log: EventLog):
        self.host = host
        self.event_log = event_log
        self.seq: int | None = None  # None: live
        self.last = 0
        self.slider = W.IntSlider(value=0, min=0, max=0, description="history",
                                  continuous_update=True, readout=False,
                                  layout=W.Layout(flex="1 1 18em", min_width="12em"),
                                  style={"description_width": "initial"})
        # any event, typed (the slider of a 10,000-event run moves dozens of events a pixel)
        self.box = W.BoundedIntText(value=0, min=0, max=0, continuous_update=False,
                                    tooltip="type an event's number, then Enter",
                                    layout=W.Layout(width="7.5em"))
        self.prev_button = W.Button(icon="chevron-left", tooltip="previous event",
                                    layout=W.Layout(width="3em"))
        self.next_button = W.Button(icon="chevron-right", tooltip="next event",
                                    layout=W.Layout(width="3em"))
        self.step_prev_button = W.Button(
            icon="angle-double-left", layout=W.Layout(width="3em"),
            tooltip="previous event of the step selected in the Inspector")
        self.step_next_button = W.Button(
            icon="angle-double-right", layout=W.Layout(width="3em"),
            tooltip="next event of the step selected in the Inspector")
        self.live_button = W.Button(description="Live", icon="circle",
                                    tooltip="back to the run's current state",
                                    layout=W.Layout(width="auto"))
        self.label = W.HTML()
        self.prev_button.on_click(host.on_loop(lambda _: self.step(-1)))
        self.next_button.on_click(host.on_loop(lambda _: self.step(+1)))
        self.step_prev_button.on_click(host.on_loop(lambda _: self.step_event(-1)))
        self.step_next_button.on_click(host.on_loop(lambda _: self.step_event(+1)))
        self.live_button.on_click(host.on_loop(lambda _: self.live()))
        self._syncing = False
        self._view: RunAt | None = None
        self.slider.observe(host.on_loop(self._moved), names="value")
        self.box.observe(host.on_loop(self._moved), names="value")
        super().__init__([self.slider, self.box, self.prev_button, self.next_button,
                          self.step_prev_button, self.step_next_button, self.live_button,
                          self.label], layout=W.Layout(flex_flow="row wrap",
                                                       align_items="center"))
        self.add_class("cl-scrubber")

    # -------------------------------------------------------------- public API
    def scrub_to(self, seq: int) -> None:
        """Show the run right after event ``seq`` (0: before anything happened). Raises
        RunStateError for an event the run does not have."""
        view = RunAt(self.host.run, seq)  # raises for a seq out of range
        self._view = view  # folded once per position (from the run's nearest snapshot)
        self.seq = seq
        self.host.refresh()  # (the header and the DAG first, then this bar: host.refresh)

    def step(self, delta: int) -> None:
        """One event back (-1) or forward (+1); forward past the last event goes live."""
        self.sync()
        current = self.last if self.seq is None else self.seq
        target = current + delta
        if target > self.last or (target == self.last and delta > 0 and self.seq is None):
            self.live()
        else:
            self.scrub_to(max(0, target))

    def step_event(self, delta: int) -> None:
        """To the previous (-1) or next (+1) event of the step selected in the Inspector
        (from the scrubbed event, or from the present); nothing when it has none there."""
        step_id = self.host.selected_step
        if step_id is None:
            return
        self.sync()
        current = self.last if self.seq is None else self.seq
        seqs = [ev.seq for ev in self.host.run.history() if ev.step_id == step_id]
        ahead = [s for s in seqs if s > current] if delta > 0 else \
            [s for s in seqs if s < current][::-1]
        if ahead:
            self.scrub_to(ahead[0])

    def live(self) -> None:
        """Back to the run's current state: controls work again."""
        if self.seq is not None:
            self.seq = None
            self._view = None
        self.sync()
        self.host.refresh()

    def view(self) -> RunAt:
        """The run at the scrubbed event (a log prefix never changes: folded once)."""
        assert self.seq is not None
        run = self.host.run
        if self._view is None or self._view.seq != self.seq or self._view.real is not run:
            self._view = RunAt(run, self.seq)
        return self._view

    # -------------------------------------------------------------- drawing
    def follow(self) -> None:
        """Note the run's latest event (the slider's end), drawing nothing yet."""
        self.last = self.host.run.last_seq

    def sync(self) -> None:
        """Follow the run's log: the slider's end is its latest event."""
        self.follow()
        self._show(self.last if self.seq is None else self.seq)

    def _show(self, value: int) -> None:
        self._syncing = True
        try:
            for w in (self.slider, self.box):
                if w.max != self.last:
                    w.max = self.last
                if w.value != value:
                    w.value = value
        finally:
            self._syncing = False
        live = self.seq is None
        self.live_button.disabled = live
        self.live_button.button_style = "" if live else "info"
        self.prev_button.disabled = value <= 0
        self.next_button.disabled = live
        step_id = self.host.selected_step
        for button in (self.step_prev_button, self.step_next_button):
            button.disabled = step_id is None
        if step_id is not None:
            self.step_prev_button.tooltip = f"previous event of step {step_id}"
            self.step_next_button.tooltip = f"next event of step {step_id}"
        text = self._event_text(value) if not live else "live"
        if self.label.value != text:
            self.label.value = text

    def _event_text(self, seq: int) -> str:
        if seq == 0:
            return '<span class="cl-scrub-event">before the first event</span>'
        for ev in self.event_log.events:
            if ev.seq == seq:
                return f'<span class="cl-scrub-event"><code>{html.escape(str(ev))}</code></span>'
        return f'<span class="cl-scrub-event">event {seq}</span>'

    def _moved(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        value = int(change["new"])
        if self.seq is None and value == self.last:
            return
        try:
            self.scrub_to(value)
        except Exception as exc:
            self.host.show_error(exc, action="scrub")
