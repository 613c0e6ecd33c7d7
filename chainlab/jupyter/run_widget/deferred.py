"""A run never waits for its widget (issue 29): what the widget builds before the run
starts, and when it builds the rest.

``%chain run`` and the designer's Run lay the DAG out with Graphviz and make the first
widgets before the run is created (:class:`Prelaid`). Building the panels takes 40-150 ms
on the kernel's loop, so a widget shown for a run that starts from a cell defers them
(:class:`DeferredBuild`): it builds once the run's first steps started (or it paused, ended
or waits for a person), at the latest :data:`BUILD_AT_THE_LATEST_S` after the start, and
then catches up from the events it recorded meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import ipywidgets as W

from chainlab.events import Event, EventKind
from chainlab.jupyter._assets import style_tag
from chainlab.jupyter.run_widget.dag import DagView

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain
    from chainlab.runtime.runtime import Run
    from chainlab.tools import Toolbox

__all__ = ["BUILD_AFTER", "BUILD_AT_THE_LATEST_S", "SETTLING", "DeferredBuild", "Prelaid"]

#: the run's last event, or it waits for a person: nothing more happens by itself
SETTLING = frozenset({EventKind.RUN_SUCCEEDED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED,
                      EventKind.RUN_ROLLED_BACK, EventKind.RUN_ROLLBACK_FAILED,
                      EventKind.RUN_SUSPENDED})
BUILD_AT_THE_LATEST_S = 0.25  # a deferred widget's panels, if no step started by then
#: events after which a deferred widget builds its panels
BUILD_AFTER = frozenset({EventKind.STEP_STARTED, EventKind.STEP_WAITING_CONFIRMATION,
                         EventKind.RUN_PAUSED, *SETTLING})


class Prelaid:
    """What a run's widget can build before the run starts (``%chain run``, the designer's
    Run): the DAG laid out by Graphviz and the first widgets, so that between the run's
    creation and its first step only the widget's box is made (issue 29)."""

    def __init__(self, chain: Chain, toolbox: Toolbox, chains: Mapping[str, Chain]):
        self.dag = DagView(chain, toolbox, chains)
        self.style = W.HTML(style_tag())
        self.header = W.HTML()


class DeferredBuild:
    """Until :meth:`stop`: records ``run``'s events (the log may not be committed yet when
    the panels are built) and calls ``build`` on ``loop`` soon after the first of
    :data:`BUILD_AFTER`, or :data:`BUILD_AT_THE_LATEST_S` after now, or at once when the run
    starts paused (step-through: no step will start by itself). ``build`` may be called
    more than once: it must ignore the calls after the first."""

    def __init__(self, run: Run, loop: asyncio.AbstractEventLoop, build: Callable[[], None]):
        self.events: list[Event] = []
        self._loop = loop
        self._build = build
        self._unsubscribe: Callable[[], None] | None = run.subscribe(self._event)
        loop.call_later(BUILD_AT_THE_LATEST_S, self.soon)
        if run.paused:
            self.soon()

    def _event(self, ev: Event) -> None:
        self.events.append(ev)
        if ev.kind in BUILD_AFTER:
            self.soon()

    def soon(self) -> None:
        """Build on the loop's next turn (a no-op once stopped or the loop closed)."""
        if self._unsubscribe is not None and not self._loop.is_closed():
            self._loop.call_soon(self._build)

    def stop(self) -> list[Event]:
        """Stop recording (and building); the events recorded so far."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        return self.events
