"""A run as data and pictures: pandas DataFrames of its attempts, compensations, waits and
events (:mod:`.frames`), its Gantt chart (:mod:`.plot`, marks drawn by :mod:`.marks`), and
comparisons of schedules and runs (:mod:`.compare`: what-if replays, a run against its fork).

Everything is built from the store only (``store.get_run`` + ``store.load_events``, folded by
:class:`chainlab.events.fold.RunState`, the fold the runtime itself uses), so it works for a
live run, a finished one and one written by another process. This is the only package that
imports pandas and matplotlib; the frames' columns are listed in :mod:`.frames`.
"""

from chainlab.timeline.compare import (
    DIFF_COLUMNS,
    Schedule,
    diff,
    gantt_compare,
    person_waits,
    schedule_of,
    whatif,
)
from chainlab.timeline.frames import (
    ATTEMPT_COLUMNS,
    attempts_frame,
    compensations_frame,
    decisions_frame,
    estimates_frame,
    events_frame,
    fork_plan_frame,
    runs_frame,
    waits_frame,
)
from chainlab.timeline.plot import TimelineFigure, plot_timeline

__all__ = [
    "ATTEMPT_COLUMNS",
    "DIFF_COLUMNS",
    "Schedule",
    "TimelineFigure",
    "attempts_frame",
    "compensations_frame",
    "decisions_frame",
    "diff",
    "estimates_frame",
    "events_frame",
    "fork_plan_frame",
    "gantt_compare",
    "person_waits",
    "plot_timeline",
    "runs_frame",
    "schedule_of",
    "waits_frame",
    "whatif",
]
