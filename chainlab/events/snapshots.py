"""Fold snapshots: the state of a run at any event without folding its whole log again
(time travel, DESIGN §11: ``run.state_at(k)`` and the run widget's history scrubber).

A :class:`FoldIndex` keeps the fold of a run's log at every ``every``-th event and answers
``state_at(events, seq)`` with a copy of the nearest snapshot at or before ``seq`` plus the
fold of the few events after it (THE fold, :meth:`RunState.apply`, so a snapshot's answer is
the same state a full fold gives; ``tests/test_snapshots.py`` checks it at every event).

Copies are copy-on-write: a copied state shares the snapshot's :class:`StepState` objects
and clones one only when an event looks it up to change it; lists and dicts of the state
are copied (shallow: the fold replaces their items; the few small values it edits in place,
such as a usage total or a remote job's progress, are copied deeply) and the open attempts,
the only attempt records the fold still changes, are cloned. So a copy costs
about one dict copy of the steps, not one object per step, and a snapshot never changes
after it was taken.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

from chainlab.events.event import Event
from chainlab.events.fold import AttemptRecord, RunState, StepState

__all__ = ["FoldIndex", "copy_state"]

_MIN_EVERY = 200  # events between two snapshots, at least
_MAX_SNAPSHOTS = 128
# each snapshot holds one dict of the run's steps (about 40 bytes a step, the step objects
# are shared): keep them to about 64 MB for the whole index
_STEP_ENTRIES = 1_600_000


class _CowSteps(dict[str, StepState]):
    """The steps of a copied state: a step is cloned the first time the fold looks it up
    (``steps[id]`` or ``steps.get(id)``); reading through ``items()``/``values()`` sees the
    shared objects, which nobody changes."""

    __slots__ = ("_own",)

    def __init__(self, base: dict[str, StepState]):
        super().__init__(base)
        self._own: set[str] = set()

    def _mine(self, key: str, st: StepState) -> StepState:
        if key in self._own:
            return st
        st = _clone(st)
        dict.__setitem__(self, key, st)
        self._own.add(key)
        return st

    def __getitem__(self, key: str) -> StepState:
        return self._mine(key, dict.__getitem__(self, key))

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        st = dict.get(self, key)
        return default if st is None else self._mine(key, st)

    def __setitem__(self, key: str, value: StepState) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)


_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepState))
# small step fields the fold may change in place (a remote job's progress, a usage total
# whose model list grows): copied deeply; outputs and args are payloads, never changed
_STEP_NESTED = frozenset({"job", "usage", "approval", "decided", "reused"}) & set(_STEP_FIELDS)
# run-level attributes the fold may change in place below their top level (a usage total)
_RUN_NESTED = frozenset({"usage"})


def _clone(st: StepState) -> StepState:
    return StepState(*(copy.deepcopy(v) if f in _STEP_NESTED and v else v
                       for f, v in ((f, getattr(st, f)) for f in _STEP_FIELDS)))


def copy_state(state: RunState) -> RunState:
    """A copy of ``state`` that events can be applied to while ``state`` stays as it is
    (copy-on-write steps; see the module docstring)."""
    new = RunState.__new__(RunState)
    fields: dict[str, Any] = {}
    for name, value in vars(state).items():
        if name == "steps":
            value = _CowSteps(value)
        elif name in _RUN_NESTED:
            value = copy.deepcopy(value)
        elif isinstance(value, dict):
            value = dict(value)
        elif isinstance(value, list):
            value = list(value)
        fields[name] = value
    # the attempts still open are the only records the fold changes (when they end):
    # clone them, in the attempts list too
    attempts: list[AttemptRecord] = fields["attempts"]
    for name, value in fields.items():
        if isinstance(value, dict) and value and name != "steps" and all(
                isinstance(v, AttemptRecord) for v in value.values()):
            clones = {id(rec): dataclasses.replace(rec) for rec in value.values()}
            fields[name] = {k: clones[id(rec)] for k, rec in value.items()}
            for i in range(len(attempts) - 1, -1, -1):
                if not clones:
                    break
                clone = clones.pop(id(attempts[i]), None)
                if clone is not None:
                    attempts[i] = clone
    new.__dict__.update(fields)
    return new


class FoldIndex:
    """Fold snapshots of one run's (append-only) log, every ``every`` events; built as far
    as asked, on the first call that needs them.

    ``state_at(events, seq)``: the run's state right after its event ``seq`` (``events``:
    its log in seq order, the same log or a longer one on every call)."""

    def __init__(self, run_id: str, step_ids: Iterable[str] = (), every: int | None = None):
        self.run_id = run_id
        self.step_ids = list(step_ids)
        self.every = every
        self._snaps: list[RunState] = []  # _snaps[j]: the fold of events[: j * every]
        self._marks: list[int] = []  # the seq of the last event folded into _snaps[j]

    def state_at(self, events: Sequence[Event], seq: int) -> RunState:
        upto = bisect.bisect_right(events, seq, key=lambda ev: ev.seq)
        if self.every is None:
            snapshots = max(1, min(_MAX_SNAPSHOTS, _STEP_ENTRIES // max(1, len(self.step_ids))))
            self.every = max(_MIN_EVERY, math.ceil(len(events) / snapshots))
        every = self.every
        if not self._valid(events):
            self._snaps, self._marks = [], []
        if not self._snaps:
            self._snaps.append(RunState(self.run_id, self.step_ids))
            self._marks.append(0)
        want = upto // every
        while len(self._snaps) <= want:  # fold on to the next snapshot
            j = len(self._snaps)
            head = copy_state(self._snaps[-1])  # (a snapshot never changes once taken)
            for ev in events[(j - 1) * every: j * every]:
                head.apply(ev)
            self._snaps.append(head)
            self._marks.append(events[j * every - 1].seq)
        j = want
        state = copy_state(self._snaps[j])
        for ev in events[j * every: upto]:
            state.apply(ev)
        return state

    def _valid(self, events: Sequence[Event]) -> bool:
        """The snapshots were folded from a prefix of ``events`` (the same log)."""
        if len(self._marks) <= 1:
            return True
        i = (len(self._marks) - 1) * (self.every or 1) - 1
        return i < len(events) and events[i].seq == self._marks[-1]
