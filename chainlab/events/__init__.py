"""The bottom of the runtime: what a run's log is made of and how it folds to state.

* :mod:`chainlab.events.event`: :class:`Event` and the :class:`EventKind` vocabulary;
* :mod:`chainlab.events.status`: step, run and attempt status enums with their transition
  tables;
* :mod:`chainlab.events.fold`: :class:`RunState`, the run's state derived from its events
  (its handlers, by group: :mod:`~chainlab.events.fold_steps`,
  :mod:`~chainlab.events.fold_decisions`, :mod:`~chainlab.events.fold_jobs`,
  :mod:`~chainlab.events.fold_run`).

Plan-independent readers (views, the timeline, a store, a watcher in another process) import
this package without the scheduler kernel or a store (stdlib only).
"""

from chainlab.events.event import MODEL_DELTA, RUN_END_KINDS, Event, EventKind, event_kind
from chainlab.events.fold import AttemptRecord, RunState, StepState, read_run
from chainlab.events.status import (
    RUN_TERMINAL,
    STEP_TERMINAL,
    AttemptStatus,
    ErrorKind,
    InvalidTransition,
    RunStatus,
    SkipReason,
    StepStatus,
)

__all__ = [
    "MODEL_DELTA",
    "RUN_END_KINDS",
    "RUN_TERMINAL",
    "STEP_TERMINAL",
    "AttemptRecord",
    "AttemptStatus",
    "ErrorKind",
    "Event",
    "EventKind",
    "InvalidTransition",
    "RunState",
    "RunStatus",
    "SkipReason",
    "StepState",
    "StepStatus",
    "event_kind",
    "read_run",
]
