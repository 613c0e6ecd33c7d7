"""``RunWidget``: the live view and the control panel of one run.

The DAG, Run/Pause/Step/Resume/Cancel/Rollback, the breakpoints and the ready queue, the
approvals inbox, a step inspector, the event log tail and the timeline. Buttons call the
run's public coroutines (the same controller a script uses) through
:func:`chainlab.jupyter._tasks.eager`; every error is shown in the widget.

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

from chainlab.events import Event
from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus
from chainlab.jupyter._tasks import eager
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter.dag import DagView
from chainlab.jupyter.inbox import Inbox
from chainlab.jupyter.inspector import EventLog, StepInspector, TimelineTab
from chainlab.render.throttle import Throttle
from chainlab.runtime.runtime import Run

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession

__all__ = ["RunWidget"]

REDRAW_RATE = 10.0  # redraws per second, at most
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
        super().__init__([W.HTML(style_tag()), self.header, toolbar, self.queue, self.error,
                          self.dag, self.tabs])
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
        if run.active:
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
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        super().close()

    def _on_event(self, ev: Event) -> None:
        # called synchronously by the scheduler for every event, in the middle of its
        # bookkeeping: record the event and redraw later, from a consistent state
        self.event_log.add(ev)
        self.schedule_refresh()

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
        for step_id in self.run.record.options.get("breakpoints", []):
            st = self.run.steps.get(step_id)
            if st is not None and st.status in (StepStatus.PENDING, StepStatus.READY):
                out[step_id] = " · ".join(b for b in ("● break", out.get(step_id)) if b)
        return out

    def refresh(self) -> None:
        """Redraw everything from the run's state (cheap; unchanged parts are not re-sent)."""
        run = self.run
        status = run.status
        self.dag.update(self.statuses(), self.badges())
        self._set(self.header, self._header_html(status))
        ready = run.ready_steps()
        if tuple(self.next_step.options) != tuple(ready):
            self.next_step.options = ready
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
        if self.event_log.gap:
            self._read_stored_events()
        self.event_log.refresh()

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
        paused = ""
        if run.paused and run.state.paused_at:
            paused = f" at breakpoint <code>{html.escape(run.state.paused_at)}</code>"
        return (f'<div class="cl-head"><b>{html.escape(run.chain.name)}</b> '
                f'<span class="cl-runid">{html.escape(run.run_id)}</span> '
                f'<span class="cl-badge cl-r-{status}">{status}</span>{paused} '
                f'<span class="cl-summary">{html.escape(summary)}</span>{where}</div>')

    def _queue_html(self, ready: list[str]) -> str:
        bps = self.run.record.options.get("breakpoints", [])
        parts = []
        if ready and (self.run.paused or self.run.status == RunStatus.PAUSED):
            parts.append("ready queue: " + ", ".join(f"<code>{html.escape(s)}</code>"
                                                     for s in ready))
        if bps:
            parts.append("breakpoints: " + ", ".join(f"<code>{html.escape(b)}</code>"
                                                     for b in bps))
        return f'<div class="cl-queue">{" · ".join(parts)}</div>' if parts else ""

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
            self.act("rollback", self._rollback)
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
        """Run a control coroutine now (see :func:`eager`); show any error it raises."""
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
        what = f"could not {action}: " if action else ""
        self.error.value = (f'<div class="cl-error">⚠ {html.escape(what)}'
                            f"<b>{html.escape(type(exc).__name__)}</b>: "
                            f"{html.escape(str(exc))}</div>")

    def __repr__(self) -> str:
        return f"RunWidget(run {self.run.run_id}, chain {self.run.chain.name!r})"
