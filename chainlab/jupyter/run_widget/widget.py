"""``RunWidget``: the live view and the control panel of one run.

The DAG, Run/Pause/Step/Resume/Cancel/Rollback, the breakpoints and the ready queue, the
approvals inbox, a step inspector, the event log tail and the timeline. Buttons call the
run's public coroutines (the same controller a script uses) through
:func:`chainlab.jupyter._loop.eager`; every error is shown in the widget.

It subscribes to the run's events (a cheap callback that records the event and asks for a
redraw) and redraws at most about ten times a second, so it keeps working after the cell
that made it returned, and while a cell awaits ``run.wait()``.

The widget is the host of its panels (:mod:`.host`): each panel gets the widget as a
:class:`~.host.RunHost` and reads the run through it, ``host.run`` to act on, ``host.view``
to draw (the run, or the scrubber's past state, :mod:`.scrubber`). The toolbar's rules and
the header lines are pure functions in :mod:`.controls`; the toolbar is :mod:`.toolbar`,
the tabs :mod:`.tabs`, the failure line :mod:`.failure`. What is built before the run
starts and when the rest is built (a run never waits for its widget) is :mod:`.deferred`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import ipywidgets as W

from chainlab.events import Event
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, eager, home_loop
from chainlab.jupyter.run_widget.confirm import RollbackConfirm
from chainlab.jupyter.run_widget.controls import header_html, pending_breakpoints, queue_html
from chainlab.jupyter.run_widget.dag import DagView
from chainlab.jupyter.run_widget.deferred import SETTLING, DeferredBuild, Prelaid
from chainlab.jupyter.run_widget.event_log import EventLog
from chainlab.jupyter.run_widget.failure import FailureLine
from chainlab.jupyter.run_widget.faults import FaultsPanel
from chainlab.jupyter.run_widget.fork import fork_notes
from chainlab.jupyter.run_widget.legend import BREAK_MARK
from chainlab.jupyter.run_widget.scrubber import RunAt, Scrubber
from chainlab.jupyter.run_widget.stale import stale_note
from chainlab.jupyter.run_widget.tabs import RunTabs
from chainlab.jupyter.run_widget.toolbar import Toolbar
from chainlab.jupyter.views import error_html
from chainlab.render.display import run_badges, run_statuses
from chainlab.render.throttle import Throttle
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.runtime.runtime import Run

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunView
    from chainlab.jupyter.session import NotebookSession

__all__ = ["RunWidget"]

REDRAW_RATE = 10.0  # redraws per second, at most
_PARTS = frozenset({
    "failure", "show_failure", "error", "buttons", "next_step", "queue", "event_log", "scrubber",
    "rollback_confirm", "dag", "inbox", "inspector", "timeline", "tabs", "faults", "toolbar",
    "failure_line",
})


class RunWidget(W.VBox):
    """The live widget of ``run`` (``display(RunWidget(run))``; ``%chain run`` shows one);
    the :class:`~.host.RunHost` of its panels."""

    def __init__(self, run: Run, *, session: NotebookSession | None = None,
                 log_lines: int = 14, dag: DagView | None = None, defer: bool = False,
                 prelaid: Prelaid | None = None):
        self.run = run  # the handle the controls act on; panels draw `view`
        self.session = session
        self.last_error: BaseException | None = None
        self._loop = home_loop()  # where runs are driven; clicks may arrive on another thread
        self._unsubscribe: Callable[[], None] | None = None
        self._soon = False
        self._throttle: Throttle[None] = Throttle(self._redraw_now, rate=REDRAW_RATE)
        self._log_lines = log_lines
        # ``dag``: laid out before the run started (so Graphviz does not delay its first step)
        self._dag = prelaid.dag if prelaid is not None else dag
        self.built_at: int | None = None  # the run's last event seq when the panels were built
        self._pending = False
        self.header = prelaid.header if prelaid is not None else W.HTML()
        self.header.value = header_html(run, run.status, last_seq=run.last_seq)
        self.stale_note = stale_note(run.run_id)  # shown once the kernel session ended
        super().__init__([prelaid.style if prelaid is not None else W.HTML(style_tag()),
                          self.stale_note, self.header])
        self.add_class("cl-run")
        if defer and self._loop is not None:
            # issue 29: building the panels takes 40-150 ms on the kernel's loop; a run
            # started from a cell must not wait for them. Build once its first steps have
            # started (or it stopped, or soon anyway); the widget catches up from the log.
            self._pending = True
            self._deferred = DeferredBuild(run, self._loop, self.build)
        else:
            self._build(None)

    def __getattr__(self, name: str) -> Any:
        # a panel asked for before the deferred build (a script, a test): build it now
        if name in _PARTS and self.__dict__.get("_pending"):
            self.build()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def built(self) -> bool:
        """True once the panels exist (``%chain run`` builds them after the first steps
        started, so a run never waits for its widget)."""
        return not self.__dict__.get("_pending", False)

    def build(self) -> None:
        """Build the panels now if they were deferred (a no-op after that)."""
        if not self.__dict__.get("_pending"):
            return
        self._pending = False
        deferred = self.__dict__.pop("_deferred", None)
        self._build(deferred.stop() if deferred is not None else None)

    def _build(self, early: list[Event] | None) -> None:
        """``early``: a deferred build, the events recorded before it."""
        run = self.run
        self.built_at = run.last_seq
        self.error = W.HTML()
        self.rollback_confirm = RollbackConfirm(self)  # asks before Rollback (issue 18)
        self.toolbar = Toolbar(self, self.rollback_confirm)
        self.buttons, self.next_step = self.toolbar.buttons, self.toolbar.next_step
        self.queue = W.HTML()
        self.event_log = EventLog(self._log_lines)
        self.scrubber = Scrubber(self, self.event_log)
        self.dag = self._dag if self._dag is not None else DagView(
            run.chain, run.runtime.toolbox, run.runtime.chains)
        self.tabs = RunTabs(self, self.event_log)
        self.inbox, self.inspector, self.timeline = \
            self.tabs.inbox, self.tabs.inspector, self.tabs.timeline
        self.faults = FaultsPanel(self)  # issue 19: demo fault injection, collapsed, off
        # issue 29: the first failure, named, one click from the inspector; a node click
        # selects its step there too
        self.failure_line = FailureLine(self, self.tabs)
        self.failure, self.show_failure = self.failure_line.text, self.failure_line.button
        if self.dag.clicks is not None:
            self.dag.clicks.observe(self._node_clicked, names="selected")
        prelaid = cast("Any", self).children[0]  # (ipywidgets' traits are untyped)
        self.children = [prelaid, self.stale_note, self.header, self.toolbar,
                         self.rollback_confirm, self.scrubber, self.queue, self.error,
                         self.failure_line, self.dag, self.tabs, self.faults]
        self.attach(run)
        if early is not None:  # deferred: catch up with what happened before the build
            try:
                self.event_log.fill(run.history())  # (committed first)
            except Exception as exc:
                self.show_error(exc, action="read the stored events")
            self.event_log.fill(early)
            self.refresh()

    # ------------------------------------------------------------------ binding
    def attach(self, run: Run) -> None:
        """Show ``run`` (e.g. the live handle after a resume): stored history first, then
        live events when this kernel drives it."""
        if self._pending:
            self.run = run
            self.build()
            return
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.run = run
        self.event_log.reset(())
        if run.active or isinstance(run, WatchedRun):  # driven here, or followed (§13)
            self._unsubscribe = run.subscribe(self._on_event)
        self._read_stored_events(run)
        self.refresh()

    def _read_stored_events(self, run: RunView) -> None:
        # events emitted before we subscribed come from the store (once committed)
        try:
            self.event_log.fill(run.event_list())
        except Exception as exc:
            self.show_error(exc, action="read the stored events")

    def close(self) -> None:
        self._throttle.cancel()
        self._pending = False
        deferred = self.__dict__.pop("_deferred", None)
        if deferred is not None:
            deferred.stop()
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
        if ev.kind in SETTLING:
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
        if self._pending:
            return  # drawn when built
        self.scrubber.sync()
        self._draw()
        if self.scrubber.seq is None:
            self._sync_static()

    def _draw(self) -> None:
        view = self.view
        status = view.status
        self.dag.update(self.statuses(), self.badges())
        self._set(self.header, header_html(view, status, last_seq=self.scrubber.last))
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

        if self._pending and self._dag is not None:  # the DAG laid out before the start:
            svg = self._dag.static_svg({s: str(st.status) for s, st in self.run.steps.items()})
            return picture_bundle(self.run, run_html(self.run, svg=svg))  # no second layout
        return picture_bundle(self.run, run_html(self.run))

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

    def __repr__(self) -> str:
        return f"RunWidget(run {self.run.run_id}, chain {self.run.chain.name!r})"
