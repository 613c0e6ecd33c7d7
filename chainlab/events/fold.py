"""Run state derived from events (the fold).

The scheduler applies each event it emits; ``resume`` and the views replay stored events
through the same :meth:`RunState.apply`. Transitions are checked against the tables in
:mod:`chainlab.events.status`, live and on replay alike.

This module is the fold's core: :class:`RunState`, the dispatch of each :class:`EventKind`
to its handler, and :func:`read_run`. The state it folds into and the primitives every
handler changes it through are in :mod:`chainlab.events.fold_state` (:class:`StepState`,
:class:`AttemptRecord` are re-exported here). The handlers sit in groups beside it: a
step's calls and compensations (:mod:`chainlab.events.fold_steps`), a person's decisions
(:mod:`chainlab.events.fold_decisions`), remote jobs (:mod:`chainlab.events.fold_jobs`) and
the run's own events (:mod:`chainlab.events.fold_run`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chainlab.events.event import Event, event_kind
from chainlab.events.fold_decisions import HANDLERS as DECISION_HANDLERS
from chainlab.events.fold_jobs import HANDLERS as JOB_HANDLERS
from chainlab.events.fold_run import HANDLERS as RUN_HANDLERS
from chainlab.events.fold_state import (
    BACKGROUND_NOTE,
    REDACTED,
    AttemptRecord,
    FoldState,
    Handler,
    StepState,
)
from chainlab.events.fold_steps import HANDLERS as STEP_HANDLERS
from chainlab.events.status import WAITS_FOR_PERSON

__all__ = ["BACKGROUND_NOTE", "FOLD", "AttemptRecord", "RunState", "StepState", "read_run"]


class RunState(FoldState):
    """The fold of a run's events."""

    @classmethod
    def from_events(
        cls, run_id: str, events: Iterable[Event], step_ids: Iterable[str] = ()
    ) -> RunState:
        state = cls(run_id, step_ids)
        for ev in events:
            state.apply(ev)
        return state

    def waiting(self) -> dict[str, str]:
        """Steps that wait for a person: ``{step_id: waiting_confirmation | in_doubt}``."""
        return {step_id: str(st.status) for step_id, st in self.steps.items()
                if st.status in WAITS_FOR_PERSON}

    @property
    def outputs(self) -> dict[str, Any]:
        """Outputs of every step that succeeded (kept after compensation, for the audit)."""
        return {step_id: self.steps[step_id].output for step_id in self.completion}

    # ------------------------------------------------------------------ applying events
    def apply(self, ev: Event) -> None:
        self.last_seq = ev.seq
        self.epoch = ev.epoch
        handler = _HANDLERS.get(ev.kind)
        if handler is None:
            event_kind(ev.kind)  # raises for a kind this chainlab does not know
            raise AssertionError(f"EventKind {ev.kind!r} has no fold handler")
        handler(self, ev)
        marked = ev.payload.get(REDACTED)
        if marked:  # (only a stored event has it: the engine's own are never masked)
            self.redacted.setdefault(ev.step_id or "", set()).update(marked)


def _dispatch(*groups: dict[str, Handler]) -> dict[str, Handler]:
    """One table from the handler groups; a kind two groups claim is a bug, said at import."""
    table: dict[str, Handler] = {}
    for group in groups:
        for kind, handler in group.items():
            if kind in table:
                raise AssertionError(f"EventKind {kind!r} has two fold handlers")
            table[kind] = handler
    return table


_HANDLERS = _dispatch(STEP_HANDLERS, DECISION_HANDLERS, JOB_HANDLERS, RUN_HANDLERS)
#: the handler of every event kind, what :meth:`RunState.apply` dispatches to (the kernel's
#: emit, which folds the few events of every step, calls it without apply's frame)
FOLD: Mapping[str, Handler] = _HANDLERS


def read_run(
    store: Any, run_id: str, *, upto: int | None = None
) -> tuple[Any, list[Event], RunState]:
    """``(record, events, state)`` of a stored run: THE read path of every front end (the stored
    ``Run``, the timeline, the CLI, the widgets). ``store`` is any Store (only ``get_run``
    and ``load_events`` are used); ``upto``: fold only the events up to that seq.

    Raises RunNotFoundError for an unknown run."""
    record = store.get_run(run_id)
    events = store.load_events(run_id)
    if upto is not None:
        events = [ev for ev in events if ev.seq <= upto]
    step_ids = [s["id"] for s in record.chain.get("steps", [])]
    return record, events, RunState.from_events(run_id, events, step_ids)

