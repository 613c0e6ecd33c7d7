"""``RunWidget``: the live view and the control panel of one run.

The DAG, Run/Pause/Step/Resume/Cancel/Rollback, the breakpoints and the ready queue, the
approvals inbox, a step inspector, the event log tail and the timeline. Buttons call the
run's public coroutines (the same controller a script uses) through
:func:`chainlab.jupyter._loop.eager`; every error is shown in the widget.

It subscribes to the run's events (a cheap callback that records the event and asks for a
redraw) and redraws at most about ten times a second, so it keeps working after the cell
that made it returned, and while a cell awaits ``run.wait()``.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events import Event, EventKind
from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, eager, home_loop
from chainlab.jupyter.run_widget.choices import set_choices
from chainlab.jupyter.run_widget.confirm import RollbackConfirm
from chainlab.jupyter.run_widget.dag import DagView
from chainlab.jupyter.run_widget.faults import FaultsPanel
from chainlab.jupyter.run_widget.inbox import Inbox
from chainlab.jupyter.run_widget.inspector import EventLog, StepInspector, TimelineTab
from chainlab.jupyter.run_widget.legend import BREAK_MARK
from chainlab.jupyter.views import error_html
from chainlab.render.throttle import Throttle
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.runtime.runtime import Run

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession

__all__ = ["RunAt", "RunWidget", "Scrubber"]

REDRAW_RATE = 10.0  # redraws per second, at most
QUEUE_SHOWN = 8  # ready steps named in the queue line (a 30-step fan-out took three lines)
_SETTLING = frozenset({EventKind.RUN_SUCCEEDED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED,
                       EventKind.RUN_ROLLED_BACK, EventKind.RUN_ROLLBACK_FAILED,
                       EventKind.RUN_SUSPENDED})
_ACTIVE = (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.SUSPENDED, RunStatus.COMPENSATING)
_BUTTONS = [  # name, label, icon, tooltip
    ("continue", "Continue", "play",
     "leave step-through mode and run to the end (run.unpause())"),
    ("pause", "Pause", "pause", "start nothing new; running steps finish (run.pause())"),
    ("step", "Step", "step-forward", "release exactly one ready step (run.step())"),
    ("resume", "Resume", "repeat", "drive this stored run from this kernel (runtime.resume)"),
    ("cancel", "Cancel", "stop", "cancel running calls, then compensate (run.cancel())"),
    ("rollback", "Rollback", "undo",
     "compensate completed steps in reverse completion order (run.rollback())"),
]


class RunWidget(W.VBox):
    """The live widget of ``run`` (``display(RunWidget(run))``; ``%chain run`` shows one)."""

    def __init__(self, run: Run, *, session: NotebookSession | None = None,
                 log_lines: int = 14, dag: DagView | None = None):
        self.run = run
        self.session = session
        self.last_error: BaseException | None = None
        self._loop = home_loop()  # where runs are driven; clicks may arrive on another thread
        self._was_waiting = 0  # cards in the inbox at the last refresh
        self._unsubscribe: Callable[[], None] | None = None
        self._soon = False
        self._throttle: Throttle[None] = Throttle(self._redraw_now, rate=REDRAW_RATE)
        self.header = W.HTML()
        self.error = W.HTML()
        self.buttons: dict[str, W.Button] = {}
        for name, label, icon, tip in _BUTTONS:
            b = W.Button(description=label, icon=icon, tooltip=tip,
                         layout=W.Layout(width="auto"))
            b.on_click(lambda _, name=name: self.press(name))
            self.buttons[name] = b
        self.next_step = W.Dropdown(description="next", options=[], layout=W.Layout(width="16em"))
        self.queue = W.HTML()
        toolbar = W.HBox([*self.buttons.values(), self.next_step])
        toolbar.add_class("cl-toolbar")
        self.scrubber = Scrubber(self)
        self.rollback_confirm = RollbackConfirm(self)  # asks before Rollback (issue 18)
        # ``dag``: laid out before the run started (so Graphviz does not delay its first step)
        self.dag = dag if dag is not None else DagView(run.chain, run.runtime.toolbox,
                                                       run.runtime.chains)
        self.inbox = Inbox(self)
        self.inspector = StepInspector(self)
        self.event_log = EventLog(log_lines)
        self.timeline = TimelineTab(self)
        self.tabs = W.Tab(children=[self.inbox, self.inspector, self.event_log, self.timeline])
        self.tabs.titles = ("Approvals", "Inspector", "Events", "Timeline")
        self.tabs.observe(self._tab_selected, names="selected_index")
        self.faults = FaultsPanel(self)  # issue 19: demo fault injection, collapsed, off
        super().__init__([W.HTML(style_tag()), self.header, toolbar, self.rollback_confirm,
                          self.scrubber, self.queue, self.error, self.dag, self.tabs,
                          self.faults])
        self.add_class("cl-run")
        self.attach(run)

    # ------------------------------------------------------------------ binding
    def attach(self, run: Run) -> None:
        """Show ``run`` (e.g. the live handle after a resume): stored history first, then
        live events when this kernel drives it."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.run = run
        self.event_log.reset(())
        if run.active or isinstance(run, WatchedRun):  # driven here, or followed (§13)
            self._unsubscribe = run.subscribe(self._on_event)
        self._read_stored_events()
        self.refresh()

    def _read_stored_events(self) -> None:
        # events emitted before we subscribed come from the store (once committed)
        try:
            self.event_log.fill(self.run.event_list())
        except Exception as exc:
            self.show_error(exc, action="read the stored events")

    def close(self) -> None:
        self._throttle.cancel()
        if isinstance(self.run, WatchedRun):
            self.run.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        super().close()

    def _on_event(self, ev: Event) -> None:
        # called synchronously by the scheduler for every event, in the middle of its
        # bookkeeping: record the event and redraw later, from a consistent state
        self.event_log.add(ev)
        self.schedule_refresh()
        if ev.kind in _SETTLING:
            # the run's last event (or it waits for a person): replace the static output NOW,
            # before `await run.wait()` returns and the cell that awaits it ends (nbclient
            # keeps only the outputs of the cell it executes)
            try:
                self._sync_static()
            except Exception as exc:
                self.show_error(exc, action="draw the static picture of the run")

    def schedule_refresh(self) -> None:
        """Redraw soon: on the next loop iteration, at most ~10 times a second (bursts of
        events are coalesced; the last state is always drawn). Without a running loop
        (plain Python), redraw now."""
        if self._soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.refresh()
            return
        self._soon = True
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._soon = False
        self._throttle(None)

    def _redraw_now(self, _: object = None) -> None:
        try:
            self.refresh()
        except Exception as exc:
            self.show_error(exc, action="redraw")

    def _tab_selected(self, change: dict[str, Any]) -> None:
        if change["new"] == 3:
            self.timeline.shown()

    # ------------------------------------------------------------------ drawing
    def statuses(self) -> dict[str, str]:
        return {step_id: str(st.status) for step_id, st in self.run.steps.items()}

    def badges(self) -> dict[str, str]:
        """The DAG's badges: attempts, reasons, approvals (``chainlab.render``) and the
        breakpoints a paused run has not passed yet."""
        from chainlab.render import run_badges

        out = run_badges(self.run)
        for step_id in self._pending_breakpoints():  # none once the run ended
            out[step_id] = " · ".join(b for b in (BREAK_MARK, out.get(step_id)) if b)
        return out

    def refresh(self) -> None:
        """Redraw everything from the run's state (cheap; unchanged parts are not re-sent);
        while scrubbing, from its state at the scrubbed event (read-only)."""
        self.scrubber.sync()
        at = self.scrubber.seq
        if at is None:
            self._draw()
            self._sync_static()
            return
        real = self.run
        self.run = self.scrubber.view()  # type: ignore[assignment]  # every view reads .run
        try:
            self._draw()
        finally:
            self.run = real

    @property
    def view(self) -> Run | RunAt:
        """What the views show: the run, or (while scrubbing) the run at the scrubbed event."""
        if self.scrubber.seq is None or isinstance(self.run, RunAt):
            return self.run
        return self.scrubber.view()

    def _draw(self) -> None:
        run = self.run
        status = run.status
        self.dag.update(self.statuses(), self.badges())
        self._set(self.header, self._header_html(status))
        ready = run.ready_steps()
        set_choices(self.next_step, ready)  # release order; the first is preselected
        self._set(self.queue, self._queue_html(ready))
        self._enable(status, ready)
        self.inbox.sync()
        waiting = len(self.inbox.cards)
        titles = (f"Approvals ({waiting})" if waiting else "Approvals", "Inspector", "Events",
                  "Timeline")
        if tuple(self.tabs.titles) != titles:
            self.tabs.titles = titles
        if waiting and self.tabs.selected_index != 0 and self._was_waiting == 0:
            self.tabs.selected_index = 0  # a new decision is due: show the inbox
        self._was_waiting = waiting
        self.inspector.refresh()
        self.faults.refresh()
        if self.event_log.gap:
            self._read_stored_events()
        self.event_log.upto = self.scrubber.seq
        self.event_log.refresh()
        if self.scrubber.seq is not None:
            for card in self.inbox.cards.values():  # history is read-only
                _disable(card)
        self._fork_notes()

    def _fork_notes(self) -> None:
        """On a fork's approval cards: what the parent run already did with the step."""
        if "forked_from" not in self.run.record.meta:
            return
        for step_id, card in self.inbox.cards.items():
            if getattr(card, "_fork_note", False):
                continue
            note = self._fork_note(step_id)
            if note:
                card._fork_note = True  # type: ignore[attr-defined]
                card.children = (*card.children, W.HTML(
                    f'<div class="cl-note cl-fork-note">⑂ {html.escape(note)}</div>'))

    def _fork_note(self, step_id: str) -> str | None:
        for ev in reversed(self.event_log.events):
            if ev.kind == "step_waiting_confirmation" and ev.step_id == step_id:
                fork = ev.payload.get("fork")
                return fork.get("note") if isinstance(fork, dict) else None
        return None

    @staticmethod
    def _set(widget: W.HTML, value: str) -> None:
        if widget.value != value:
            widget.value = value

    def _header_html(self, status: RunStatus) -> str:
        run = self.run
        counts: dict[str, int] = {}
        for st in run.steps.values():
            counts[str(st.status)] = counts.get(str(st.status), 0) + 1
        summary = " · ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items()))
        where = "" if run.active else (
            " · <i>stored run, not driven by this kernel</i>" if status not in RUN_TERMINAL
            else " · <i>from the store</i>")
        if isinstance(run, WatchedRun):  # its driver is elsewhere: only decisions work here
            where = f" · <i>watching: driven by {html.escape(run.driven_by())}</i>"
        if isinstance(run, RunAt):
            where = (f' · <span class="cl-scrub-mark" style="font-weight:600">◀ history: '
                     f"after event {run.seq} of {self.scrubber.last} (read-only)</span>")
        paused = ""
        at = run.state.paused_at
        if run.paused and at and at in self._pending_breakpoints():  # not once Step passed it
            paused = f" at breakpoint <code>{html.escape(at)}</code>"
        return (f'<div class="cl-head"><b>{html.escape(run.chain.name)}</b> '
                f'<span class="cl-runid">{html.escape(run.run_id)}</span> '
                f'<span class="cl-badge cl-r-{status}">{status}</span>{paused} '
                f'<span class="cl-summary">{html.escape(summary)}</span>{where}</div>')

    def _queue_html(self, ready: list[str]) -> str:
        bps = self._pending_breakpoints()
        parts = []
        if ready and (self.run.paused or self.run.status == RunStatus.PAUSED):
            more = len(ready) - QUEUE_SHOWN  # the `next` dropdown lists them all
            parts.append("ready queue: " + ", ".join(f"<code>{html.escape(s)}</code>"
                                                     for s in ready[:QUEUE_SHOWN])
                         + (f" and {more} more" if more > 0 else ""))
        if bps:
            parts.append("breakpoints: " + ", ".join(f"<code>{html.escape(b)}</code>"
                                                     for b in bps))
        return f'<div class="cl-queue">{" · ".join(parts)}</div>' if parts else ""

    def _pending_breakpoints(self) -> list[str]:
        """Breakpoints still ahead: their step has not started, and the run goes on."""
        run = self.run
        if run.status in RUN_TERMINAL:
            return []
        return [b for b in run.record.options.get("breakpoints", [])
                if b in run.steps and run.steps[b].status in (StepStatus.PENDING,
                                                              StepStatus.READY)]

    def _enable(self, status: RunStatus, ready: list[str]) -> None:
        run = self.run
        live, ended = run.active, status in RUN_TERMINAL
        can = {
            "continue": live and run.paused,
            "pause": live and not run.paused and status in (RunStatus.RUNNING,
                                                            RunStatus.SUSPENDED),
            "step": live and bool(ready) and not ended,
            "resume": not live and status in _ACTIVE,
            "cancel": live and status in (RunStatus.RUNNING, RunStatus.PAUSED,
                                          RunStatus.SUSPENDED),
            "rollback": status not in (RunStatus.ROLLED_BACK, RunStatus.COMPENSATING)
            and self._undoable(),
        }
        if isinstance(run, RunAt | WatchedRun):  # history, or a run driven elsewhere
            can = dict.fromkeys(can, False)
        for name, button in self.buttons.items():
            if button.disabled == can[name]:
                button.disabled = not can[name]
        self.next_step.layout.display = "" if can["step"] else "none"

    def _undoable(self) -> bool:
        """True when a rollback has something to undo (the saga's own plan)."""
        return bool(self.run.undoable())

    # ------------------------------------------------------------------ actions
    def press(self, name: str) -> None:
        """What each toolbar button does (``widget.buttons[name].click()`` calls this)."""
        run = self.run
        if name == "continue":
            self.act("continue", run.unpause)
        elif name == "pause":
            self.act("pause", run.pause)
        elif name == "step":
            chosen = self.next_step.value
            self.act("step", lambda: run.step(chosen))
        elif name == "resume":
            self.act("resume", self._resume)
        elif name == "cancel":
            self.act("cancel", run.cancel)
        elif name == "rollback":
            self.rollback_confirm.ask()  # says what will be compensated; Roll back acts
        else:
            raise ValueError(f"no button {name!r}; buttons: {', '.join(self.buttons)}")

    async def _live(self) -> Run:
        run = self.run
        if run.active:
            return run
        if self.session is not None:
            live = await self.session.live(run)
        else:
            live = await run.runtime.resume(run.run_id)
        if live is not self.run:
            self.attach(live)
        return live

    async def _resume(self) -> None:
        await self._live()

    async def _rollback(self) -> None:
        live = await self._live()
        await live.rollback()

    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], *,
            on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run a control coroutine now (see :func:`eager`); show any error it raises.

        A click handled on another thread (a JupyterLab comm subshell) is handed over to the
        run's loop first: the run's state and events belong to it (issue 18, stuck run)."""
        if call_on(self._loop, self.act, what, make, on_error=on_error):
            return
        self._set(self.error, "")

        def failed(exc: BaseException) -> None:
            self.show_error(exc, action=what)
            if on_error is not None:
                on_error(exc)

        try:
            eager(make(), on_error=failed)
        except Exception as exc:
            failed(exc)
        self.schedule_refresh()

    def show_error(self, exc: BaseException, action: str | None = None) -> None:
        """Show ``exc`` above the DAG (and keep it in ``last_error``)."""
        self.last_error = exc
        self.error.value = error_html(exc, action)

    # ------------------------------------------------------------------ static fallback
    def static_bundle(self) -> dict[str, Any]:
        """The widget view plus a static picture of the run (``text/html``: DAG with
        statuses and a status table) for nbconvert, GitHub and a reopened notebook."""
        from chainlab.render.display import run_html

        bundle = dict(super()._repr_mimebundle_() or {})
        bundle["text/html"] = run_html(self.run)
        return bundle

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self.static_bundle()

    def _ipython_display_(self) -> None:
        """Shown with a display id, so the static picture is replaced when the run settles."""
        from IPython import get_ipython
        from IPython.display import display

        self._static_status = self.run.status
        shell = get_ipython()
        self.shown_in_cell = getattr(shell, "execution_count", None)
        display(self.static_bundle(), raw=True, display_id=self.display_id)

    @property
    def display_id(self) -> str:
        """The display id of this widget's outputs (every place it is shown)."""
        return f"chainlab-run-{self.model_id}"

    def _sync_static(self) -> None:
        shown = getattr(self, "_static_status", None)
        status = self.run.status
        if shown is None or status == shown or not (status in RUN_TERMINAL
                                                    or status == RunStatus.SUSPENDED):
            return
        from chainlab.jupyter.run_widget.static import publish_update

        self._static_status = status
        publish_update(self.static_bundle(), self.display_id)

    def __repr__(self) -> str:
        return f"RunWidget(run {self.run.run_id}, chain {self.run.chain.name!r})"


class RunAt:
    """A read-only view of a run as it was right after its event ``seq`` (what the scrubber
    shows): the attributes the widget's views read, from ``run.state_at(seq)``."""

    active = False
    paused = False

    def __init__(self, run: Run, seq: int):
        self.real = run
        self.seq = seq
        self.state = run.state_at(seq)
        self.run_id, self.chain, self.record = run.run_id, run.chain, run.record
        self.runtime = run.runtime

    @property
    def steps(self) -> dict[str, Any]:
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
    """Time travel over a run's events: a slider (arrow keys move it when focused),
    previous/next buttons and **Live**. While scrubbed, the DAG (same style patch as live
    status, no re-layout), the inspector, the approvals and the event log show the state
    right after the chosen event, and every control is read-only."""

    def __init__(self, widget: RunWidget):
        self.widget = widget
        self.seq: int | None = None  # None: live
        self.last = 0
        self.slider = W.IntSlider(value=0, min=0, max=0, description="history",
                                  continuous_update=True, readout=True,
                                  layout=W.Layout(width="24em"),
                                  style={"description_width": "initial"})
        self.prev_button = W.Button(icon="step-backward", tooltip="previous event",
                                    layout=W.Layout(width="3em"))
        self.next_button = W.Button(icon="step-forward", tooltip="next event",
                                    layout=W.Layout(width="3em"))
        self.live_button = W.Button(description="Live", icon="circle",
                                    tooltip="back to the run's current state",
                                    layout=W.Layout(width="auto"))
        self.label = W.HTML()
        self.prev_button.on_click(lambda _: self.step(-1))
        self.next_button.on_click(lambda _: self.step(+1))
        self.live_button.on_click(lambda _: self.live())
        self._syncing = False
        self._view: RunAt | None = None
        self.slider.observe(self._moved, names="value")
        super().__init__([self.slider, self.prev_button, self.next_button, self.live_button,
                          self.label])
        self.add_class("cl-scrubber")

    # -------------------------------------------------------------- public API
    def scrub_to(self, seq: int) -> None:
        """Show the run right after event ``seq`` (0: before anything happened). Raises
        RunStateError for an event the run does not have."""
        self.widget.run.state_at(seq)  # raises for a seq out of range
        self.seq = seq
        self._show(seq)
        self.widget.refresh()

    def step(self, delta: int) -> None:
        """One event back (-1) or forward (+1); forward past the last event goes live."""
        self.sync()
        current = self.last if self.seq is None else self.seq
        target = current + delta
        if target > self.last or (target == self.last and delta > 0 and self.seq is None):
            self.live()
        else:
            self.scrub_to(max(0, target))

    def live(self) -> None:
        """Back to the run's current state: controls work again."""
        if self.seq is not None:
            self.seq = None
            self._view = None
            inbox = self.widget.inbox
            inbox.cards.clear()  # cards drawn from history are rebuilt live
            inbox.children = [inbox.empty]
        self.sync()
        self.widget.refresh()

    def view(self) -> RunAt:
        """The run at the scrubbed event (a log prefix never changes: folded once)."""
        assert self.seq is not None
        if self._view is None or self._view.seq != self.seq or self._view.real is not \
                self.widget.run:
            self._view = RunAt(self.widget.run, self.seq)
        return self._view

    # -------------------------------------------------------------- drawing
    def sync(self) -> None:
        """Follow the run's log: the slider's end is its latest event."""
        self.last = self.widget.run.last_seq
        self._show(self.last if self.seq is None else self.seq)

    def _show(self, value: int) -> None:
        self._syncing = True
        try:
            if self.slider.max != self.last:
                self.slider.max = self.last
            if self.slider.value != value:
                self.slider.value = value
        finally:
            self._syncing = False
        live = self.seq is None
        self.live_button.disabled = live
        self.live_button.button_style = "" if live else "info"
        self.prev_button.disabled = value <= 0
        self.next_button.disabled = live
        text = self._event_text(value) if not live else "live"
        if self.label.value != text:
            self.label.value = text

    def _event_text(self, seq: int) -> str:
        if seq == 0:
            return '<span class="cl-scrub-event">before the first event</span>'
        for ev in self.widget.event_log.events:
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
            self.widget.show_error(exc, action="scrub")


def _disable(widget: W.Widget) -> None:
    """Disable every control inside ``widget`` (a card drawn from history)."""
    if hasattr(widget, "disabled"):
        widget.disabled = True
    for child in getattr(widget, "children", ()):
        _disable(child)
