"""A run never waits for its widget (issues 29 and 40): the widget is built and shown
BEFORE the run exists, on :class:`Unstarted`, the handle of a run about to start.

``%chain run`` and the designer's Run choose the run's id, build the whole widget (Graphviz
lays the DAG out, every panel is made) and show it; only then is the run created with that
id on its loop, and the widget attached to it (:meth:`RunWidget.attach` with ``fresh``). The
widget's first redraw then waits until the run's first steps have started (or it paused,
waits for a person or ended: :data:`FIRST_DRAW_AFTER`), at the latest
:data:`FIRST_DRAW_AT_THE_LATEST_S` after the start, so that between ``run_started`` and the
first ``step_started`` the run's loop does nothing for the widget but record its events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab.errors import RunStateError
from chainlab.events import Event, EventKind, RunState, RunStatus
from chainlab.runtime.runtime import Run
from chainlab.store.base import RunRecord

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain, RunOptions
    from chainlab.runtime.runtime import Runtime

__all__ = ["FIRST_DRAW_AFTER", "FIRST_DRAW_AT_THE_LATEST_S", "SETTLING", "Unstarted"]

#: the run's last event, or it waits for a person: nothing more happens by itself
SETTLING = frozenset({EventKind.RUN_SUCCEEDED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED,
                      EventKind.RUN_ROLLED_BACK, EventKind.RUN_ROLLBACK_FAILED,
                      EventKind.RUN_SUSPENDED})
#: events after which a fresh run's widget draws for the first time
FIRST_DRAW_AFTER = frozenset({EventKind.STEP_STARTED, EventKind.STEP_WAITING_CONFIRMATION,
                              EventKind.RUN_PAUSED, *SETTLING})
FIRST_DRAW_AT_THE_LATEST_S = 0.25  # a fresh run's first redraw, if no step started by then


class Unstarted(Run):
    """The handle of a run about to start: its chain, its id (chosen by the caller) and
    every step pending; nothing has happened and nothing can be done to it. A widget built
    on it shows "starting"; :meth:`RunWidget.attach` replaces it with the run's handle."""

    def __init__(self, runtime: Runtime, chain: Chain, run_id: str,
                 context: Mapping[str, Any] | None, options: RunOptions,
                 meta: Mapping[str, Any] | None = None):
        now = runtime.clock.now()
        record = RunRecord(
            run_id=run_id, chain_name=chain.name, status=RunStatus.RUNNING, epoch=0,
            created_at=now, updated_at=now, chain=chain.to_dict(), chains={},
            context=dict(context or {}),
            options=options.model_dump(mode="json", exclude_defaults=True),
            meta=dict(meta or {}))
        super().__init__(runtime, chain, None, record)
        self._static = RunState(run_id, {})  # nothing has happened yet, nothing grew
        self._events = []  # no log yet: history() is empty
        # its steps as the run will have them: the handle compiles its chain against its
        # own toolbox (the runtime's, with the run's ad-hoc agent), as for any stored run
        compiled = self.compiled()
        if compiled is None:  # (the chain was validated against these tools just before)
            raise RunStateError(f"run {run_id!r} cannot be shown: this runtime's toolbox "
                                "lacks tools of its chain", run_id=run_id)
        self._static = RunState(run_id, compiled[0].nodes)

    def event_list(self) -> list[Event]:
        return []
