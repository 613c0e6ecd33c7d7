"""``RunWidget``: the live view and the control panel of one run.

The DAG, Run/Pause/Step/Resume/Cancel/Rollback, the breakpoints and the ready queue, the
approvals inbox, a step inspector, the event log tail and the timeline. Buttons call the
run's public coroutines (the same controller a script uses) through
:func:`chainlab.jupyter._loop.eager`; every error is shown in the widget.

It subscribes to the run's events (and a streamed answer's pieces) and redraws at most about
ten times a second, also after its cell returned and while a cell awaits ``run.wait()``.

The widget is the host of its panels (:mod:`.host`): each panel gets the widget as a
:class:`~.host.RunHost` and reads the run through it, ``host.run`` to act on, ``host.view`` to
draw (the run, or the scrubber's past state, :mod:`.scrubber`). The toolbar's rules and the
header lines are pure functions in :mod:`.controls`; the toolbar is :mod:`.toolbar`, the tabs
:mod:`.tabs`, the failure line :mod:`.failure`. A run started from a cell never waits for its
widget: it is built and shown before the run exists (:mod:`.starting`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events import Event
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.events.writing import Writing
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, eager, home_loop, run_on
from chainlab.jupyter.run_widget.confirm import RollbackConfirm
from chainlab.jupyter.run_widget.controls import header_html, pending_breakpoints, queue_html
from chainlab.jupyter.run_widget.dag import DagView
from chainlab.jupyter.run_widget.event_log import EventLog
from chainlab.jupyter.run_widget.failure import FailureLine
from chainlab.jupyter.run_widget.faults import FaultsPanel
from chainlab.jupyter.run_widget.fork import fork_notes
from chainlab.jupyter.run_widget.legend import BREAK_MARK
from chainlab.jupyter.run_widget.scrubber import RunAt, Scrubber
from chainlab.jupyter.run_widget.stale import stale_note
from chainlab.jupyter.run_widget.starting import (
    FIRST_DRAW_AFTER,
    FIRST_DRAW_AT_THE_LATEST_S,
    SETTLING,
)
from chainlab.jupyter.run_widget.tabs import RunTabs
from chainlab.jupyter.run_widget.toolbar import Toolbar
from chainlab.jupyter.runloop import loop_of
from chainlab.jupyter.views import error_html
from chainlab.render.display import agent_turns, run_badges, run_statuses
from chainlab.render.throttle import Throttle
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.runtime.runtime import Run

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunView
    from chainlab.jupyter.session import NotebookSession

__all__ = ["RunWidget"]

REDRAW_RATE = 10.0  # redraws per second, at most


class RunWidget(W.VBox):
    """The live widget of ``run`` (``display(RunWidget(run))``; ``%chain run`` shows one), the
    :class:`~.host.RunHost` of its panels. Once shown, it is changed only on the loop ``run``
    is driven on (in a kernel, the session's :class:`~chainlab.jupyter.runloop.RunLoop`): the
    run's events redraw it there; a click or a slider move from another thread is handed over."""

    def __init__(self, run: Run, *, session: NotebookSession | None = None,
                 log_lines: int = 14):
        self.run = run  # the handle the controls act on; panels draw `view`
        self.session = session
        self.last_error: BaseException | None = None
        # where runs are driven; clicks may arrive on another thread (a comm subshell, or
        # the kernel's main thread while runs are driven on a loop of their own)
        self._loop = loop_of(run) or home_loop()
        self._unsubscribe: Callable[[], None] | None = None
        self._soon = False
        self._now = False  # the next redraw ignores the rate (the run settled)
        self._holding = False  # a fresh run's first redraw waits for its first step
        self._throttle: Throttle[None] = Throttle(self._redraw_now, rate=REDRAW_RATE)
        self.pieces = Writing()  # the turns streaming now (the Inspector shows them)
        self.header = W.HTML()
        self.header.value = header_html(run, run.status, last_seq=run.last_seq)
        self.stale_note = stale_note(run.run_id)  # shown once the kernel session ended
        self.error = W.HTML()
        self.rollback_confirm = RollbackConfirm(self)  # asks before Rollback (issue 18)
        self.toolbar = Toolbar(self, self.rollback_confirm)
        self.buttons, self.next_step = self.toolbar.buttons, self.toolbar.next_step
        self.queue = W.HTML()
        self.event_log = EventLog(log_lines)
        self.scrubber = Scrubber(self, self.event_log)
        self.dag = DagView(run.chain, run.toolbox, run.runtime.chains, agent_turns(run))
        self.tabs = RunTabs(self, self.event_log)
        self.inbox, self.inspector, self.timeline = \
            self.tabs.inbox, self.tabs.inspector, self.tabs.timeline
        self.faults = FaultsPanel(self)  # issue 19: demo fault injection, collapsed, off
        # issue 29: the first failure, named, one click from the inspector; a node click
        # selects its step there too
        self.failure_line = FailureLine(self, self.tabs)
        self.failure, self.show_failure = self.failure_line.text, self.failure_line.button
        if self.dag.clicks is not None:
            self.dag.clicks.observe(self.on_loop(self._node_clicked), names="selected")
        super().__init__([W.HTML(style_tag()), self.stale_note, self.header, self.toolbar,
                          self.rollback_confirm, self.scrubber, self.queue, self.error,
                          self.failure_line, self.dag, self.tabs, self.faults])
        self.add_class("cl-run")
        live = run.active or isinstance(run, WatchedRun)
        run_on(self._loop if live else None, self.attach, run)  # a live run's loop owns it

    # ------------------------------------------------------------------ binding
    def attach(self, run: Run, *, fresh: bool = False) -> None:
        """Show ``run`` (e.g. the live handle after a resume): stored history first, then
        live events when this kernel drives it. ``fresh``: a run just created for this
        widget (:mod:`.starting`): nothing is read or drawn until its first step started,
        so the run never waits for its widget. Call it on the run's loop."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.run = run
        self._loop = loop_of(run) or self._loop
        self.event_log.reset(())
        if run.active or isinstance(run, WatchedRun):  # driven here, or followed (§13)
            self._unsubscribe = run.subscribe(self._on_event, deltas=True)
        if fresh and not run.paused:  # (started paused, no step starts by itself: draw)
            self._holding = True
            asyncio.get_running_loop().call_later(FIRST_DRAW_AT_THE_LATEST_S, self._release)
            return
        self._read_stored_events(run)
        self.refresh()

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            self.schedule_refresh()

    def _read_stored_events(self, run: RunView) -> None:
        # events from before the subscription: the store's (a live run's flushed first)
        try:
            self.event_log.fill(run.history() if isinstance(run, Run) else run.event_list())
        except Exception as exc:
            self.show_error(exc, action="read the stored events")

    def close(self) -> None:
        self._throttle.cancel()
        self._holding = False
        if isinstance(self.run, WatchedRun):
            self.run.stop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        super().close()

    def _on_event(self, ev: Event) -> None:
        # called synchronously by the scheduler for every event, in the middle of its
        # bookkeeping: record the event and redraw later, from a consistent state
        if self.pieces.heard(ev):  # a piece of a streamed answer: drawn, never logged
            return self.schedule_refresh()
        self.event_log.add(ev)
        if self._holding:
            if ev.kind not in FIRST_DRAW_AFTER:
                return
            self._holding = False
        if ev.kind in SETTLING:  # nothing more happens by itself: show it now, not 0.1 s on
            self.schedule_refresh(now=True)
        else:
            self.schedule_refresh()
        if ev.kind in SETTLING:
            # the run's last event (or it waits for a person): replace the static output NOW,
            # before `await run.wait()` returns and the cell that awaits it ends (nbclient
            # keeps only the outputs of the cell it executes)
            try:
                self._sync_static()
            except Exception as exc:
                self.show_error(exc, action="draw the static picture of the run")

    def schedule_refresh(self, *, now: bool = False) -> None:
        """Redraw soon: on the next loop iteration, at most ~10 times a second (bursts of
        events are coalesced; the last state is always drawn); ``now``: on the next
        iteration whatever the rate (the run settled). Without a running loop (plain
        Python), redraw now."""
        self._now = self._now or now
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
        if self._now:
            self._now = False
            self._throttle.cancel()
            self._redraw_now()
            return
        self._throttle(None)

    def on_loop(self, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn`` as a callback for the front end (a click, a slider move): called on the
        run's loop, handed over there from another thread; where it arrives when nothing
        moves the run (ended, or stored and not driven here: no other writer)."""
        def callback(*args: Any) -> None:
            moving = self.run.active or isinstance(self.run, WatchedRun)
            if not (moving and call_on(self._loop, fn, *args)):
                fn(*args)

        return callback

    def _redraw_now(self, _: object = None) -> None:
        try:
            self.refresh()
        except Exception as exc:
            self.show_error(exc, action="redraw")

    # ------------------------------------------------------------------ drawing
    @property
    def view(self) -> Run | RunAt:
        """What the panels show: the run, or (while scrubbing) the run at the scrubbed
        event."""
        if self.scrubber.seq is None:
            return self.run
        return self.scrubber.view()

    def statuses(self) -> dict[str, str]:
        """Step id -> status, as the DAG shows them (:attr:`view`)."""
        return run_statuses(self.view)  # (a for_each step's instances: counted on it)

    def badges(self) -> dict[str, str]:
        """The DAG's badges: attempts, reasons, approvals (``chainlab.render``) and the
        breakpoints a paused run has not passed yet (of :attr:`view`)."""
        view = self.view
        out = run_badges(view)
        for step_id in pending_breakpoints(view):  # none once the run ended
            out[step_id] = " · ".join(b for b in (BREAK_MARK, out.get(step_id)) if b)
        return out

    def refresh(self) -> None:
        """Redraw everything from the run's state (cheap; unchanged parts are not re-sent);
        while scrubbing, from its state at the scrubbed event (read-only)."""
        self.scrubber.follow()
        self._draw()  # the header and the DAG first: what a person looks at
        self.scrubber.sync()  # then the history bar (each change is a message of its own)
        if self.scrubber.seq is None:
            self._sync_static()

    def _draw(self) -> None:
        view = self.view
        status = view.status
        # what a person looks at first goes first: each change is a message of its own
        self._set(self.header, header_html(view, status, last_seq=self.scrubber.last))
        self.dag.update(self.statuses(), self.badges(), agent_turns(view))  # (turns: a shape)
        ready = view.ready_steps()
        self.toolbar.sync(view, status, ready)
        self._set(self.queue, queue_html(view, ready))
        self.tabs.sync()
        self.failure_line.sync(view)
        self.faults.refresh()
        if self.event_log.gap:
            self._read_stored_events(view)
        self.event_log.upto = self.scrubber.seq
        self.event_log.refresh()
        fork_notes(self.run, self.inbox, self.event_log.events)

    @property
    def selected_step(self) -> str | None:
        """The step the Inspector shows (None before the panels exist)."""
        tabs = self.__dict__.get("tabs")
        return tabs.inspector.picker.value if tabs is not None else None

    def inspect(self, step_id: str) -> None:
        """Show ``step_id`` in the Inspector tab (what a click on its node does)."""
        self.tabs.inspect(step_id)

    def _node_clicked(self, change: dict[str, Any]) -> None:
        step_id = change["new"]
        if step_id and step_id in self.view.steps:
            self.inspect(step_id)

    @staticmethod
    def _set(widget: W.HTML, value: str) -> None:
        if widget.value != value:
            widget.value = value

    # ------------------------------------------------------------------ actions
    def press(self, name: str) -> None:
        """What the toolbar button ``name`` does, as ``widget.buttons[name].click()`` (see
        :meth:`.toolbar.Toolbar.press`)."""
        self.toolbar.press(name)

    async def live(self) -> Run:
        """The run driven by this kernel: itself, or resumed from its store (then shown
        here). Raises what ``runtime.resume`` raises (DriverAliveError, ...)."""
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

    def widget_for(self, run: Run) -> RunWidget:
        """A new widget for another run in the same session (a fork's)."""
        return RunWidget(run, session=self.session)

    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], *,
            on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run a control coroutine now (see :func:`eager`); show any error it raises: above
        the DAG, or only through ``on_error`` when given (a card shows its own error).

        A click handled on another thread (a JupyterLab comm subshell) is handed over to the
        run's loop first: the run's state and events belong to it (issue 18, stuck run)."""
        if call_on(self._loop, self.act, what, make, on_error=on_error):
            return
        self._set(self.error, "")

        def failed(exc: BaseException) -> None:
            if on_error is None:
                self.show_error(exc, action=what)
                return
            self.last_error = exc  # a card's action: the card shows it, once (issue 29)
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
        bundle = dict(super()._repr_mimebundle_() or {})
        bundle["text/html"] = self.picture_bundle()["text/html"]
        return bundle

    def picture_bundle(self) -> dict[str, Any]:
        """The static output shown after the widget view (:mod:`.static`)."""
        from chainlab.jupyter.run_widget.static import picture_bundle
        from chainlab.render.display import run_html

        run = self.run
        svg = self.dag.static_svg(run_statuses(run), run_badges(run), agent_turns(run))
        return picture_bundle(run, run_html(run, svg=svg if self.dag.live is not None else None))

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self.static_bundle()

    def _ipython_display_(self) -> None:
        """The widget view, then the static picture in an output of its own (what an export
        shows, :mod:`.static`), shown with a display id: replaced when the run settles."""
        from IPython import get_ipython
        from IPython.display import display

        self._static_status = self.run.status
        shell = get_ipython()
        self.shown_in_cell = getattr(shell, "execution_count", None)
        display(super()._repr_mimebundle_(), raw=True)
        display(self.picture_bundle(), raw=True, display_id=self.display_id)

    @property
    def display_id(self) -> str:
        """The display id of this widget's static outputs (every place it is shown)."""
        return f"chainlab-run-{self.model_id}"

    def _sync_static(self) -> None:
        shown = getattr(self, "_static_status", None)
        status = self.run.status
        if shown is None or status == shown or not (status in RUN_TERMINAL
                                                    or status == RunStatus.SUSPENDED):
            return
        from chainlab.jupyter.run_widget.static import publish_update

        self._static_status = status
        publish_update(self.picture_bundle(), self.display_id)

    def withdraw(self) -> None:
        """Close the widget and blank its static picture (its run could not be created)."""
        self.close()
        if getattr(self, "_static_status", None) is not None:
            from chainlab.jupyter.run_widget.static import publish_update

            publish_update({"text/plain": ""}, self.display_id)

    def __repr__(self) -> str:
        return f"RunWidget(run {self.run.run_id}, chain {self.run.chain.name!r})"
