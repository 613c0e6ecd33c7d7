"""The scheduler: which step may start now. Pure bookkeeping, no I/O, no event loop.

Shaped like the standard library's :class:`graphlib.TopologicalSorter` and as strict about
misuse: the async driver (:mod:`chainlab.runtime.kernel`) tells it what happened and asks
what to do next; table-driven tests drive it with plain calls.

A step's life here (one phase at a time)::

    blocked --(its dependencies are done)--> unblocked --ready()--> ready --take()--> running
                                                 |  \\__park()__> parked <--park()--/  |
                                                 |                  |--ready()--> ready |
                                                 +--------- done() <+-------------------+

* ``start(step_ids)`` counts the dependencies of one level (the top level, or a sub-chain's
  children when the sub-chain starts) and returns the steps that are unblocked at once.
* ``done(step_id, ok)`` ends a step. ``ok`` releases its dependants: those whose last
  dependency this was become unblocked and are returned. A step that did not end well
  returns the dependants that are still blocked: the driver skips them (and ends them).
* ``ready(step_id, serial_key=, units=)`` queues an unblocked (or parked) step; among ready
  steps, ``take()`` releases the first by priority, ties in declaration order, that can get
  a concurrency slot, its serial key and its pool units, all or none (no deadlock). A
  step-through token or a breakpoint is honoured here too.
* ``release(step_id)`` gives the slot, key and units back (after the call has really ended,
  even if the step was already decided, e.g. a timed-out sync tool still running).
* ``park(step_id)``: waiting for a person, a back-off or its sub-chain's children; holds
  nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Breakpoint", "Phase", "Scheduler", "SchedulerError"]

_NO_UNITS: Mapping[str, int] = {}  # shared, never written


class SchedulerError(ValueError):
    """The scheduler's protocol was misused (a chainlab bug): a step done twice, an unknown
    step, releasing what was not taken..."""


class Phase(StrEnum):
    BLOCKED = "blocked"  # some dependency is not done yet
    UNBLOCKED = "unblocked"  # dependencies done; the driver decides (condition, args, confirm)
    READY = "ready"  # queued for a slot
    RUNNING = "running"  # taken: holds a slot (until released), its key and pool units
    PARKED = "parked"  # waits for a person, a back-off or its children; holds nothing
    DONE = "done"  # terminal


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """``take()`` stopped before this step: the scheduler is paused now."""

    step_id: str


@dataclass(slots=True)
class _Entry:
    deps: tuple[str, ...]
    succ: list[str]
    order: tuple[int, ...]
    phase: Phase = Phase.BLOCKED
    waiting_on: int = 0
    key: str | None = None
    units: Mapping[str, int] = field(default_factory=dict)
    holding: int = 0  # takes not yet released (a retry may start while a timed-out body runs)


class Scheduler:
    """Indegrees, the ready heap, slots, serial keys, resource pools, pause, step tokens and
    breakpoints of one run.

    ``graph``: ``{step_id: (dependencies, declaration order)}``. ``priority``: an optional
    key per step; smaller goes first (ties by declaration order).
    """

    def __init__(
        self,
        graph: Mapping[str, tuple[Sequence[str], tuple[int, ...]]],
        *,
        max_concurrency: int,
        pools: Mapping[str, int] | None = None,
        breakpoints: Iterable[str] = (),
        priority: Callable[[str], float] | None = None,
    ):
        if max_concurrency < 1:
            raise SchedulerError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self._steps: dict[str, _Entry] = {
            step_id: _Entry(tuple(deps), [], tuple(order))
            for step_id, (deps, order) in graph.items()
        }
        for step_id, entry in self._steps.items():
            for dep in entry.deps:
                self._entry(dep).succ.append(step_id)
        self.max_concurrency = max_concurrency
        self.pools = dict(pools or {})
        self.pool_used: dict[str, int] = {}
        self.keys_held: set[str] = set()
        self.running = 0
        self.paused = False
        self.stopped = False
        self.tokens: list[str] = []
        self.breakpoints: set[str] = set()
        self._bp_passed: set[str] = set()
        self.set_breakpoints(breakpoints)
        self._priority = priority
        # (order, step_id), or ((rank, order), step_id) with a priority key: homogeneous per
        # scheduler, and the plain form compares faster on the hot path
        self._heap: list[tuple[Any, str]] = []
        self._n_ready = 0  # steps in phase READY (the heap may hold stale entries too)

    # ------------------------------------------------------------------ queries
    def phase(self, step_id: str) -> Phase:
        return self._entry(step_id).phase

    def get_ready(self) -> list[str]:
        """Ready steps in release order (what ``take()`` would consider, first to last)."""
        return [
            step_id
            for _, step_id in sorted(set(self._heap))
            if self._steps[step_id].phase == Phase.READY
        ]

    @property
    def has_ready(self) -> bool:
        return self._n_ready > 0

    @property
    def n_ready(self) -> int:
        return self._n_ready

    def is_active(self) -> bool:
        """Anything ready that could start if slots allowed (for the driver's idle check)."""
        return not self.stopped and (not self.paused or bool(self.tokens)) and self.has_ready

    # ------------------------------------------------------------------ dependencies
    def start(self, step_ids: Iterable[str]) -> list[str]:
        """Count the dependencies of these steps (a level of the chain) and return those that
        have none, now unblocked, in the order given."""
        ids = list(step_ids)
        for step_id in ids:
            entry = self._entry(step_id)
            if entry.phase != Phase.BLOCKED:
                raise SchedulerError(f"step {step_id!r} was already started ({entry.phase})")
            entry.waiting_on = sum(1 for d in entry.deps if self._steps[d].phase != Phase.DONE)
        out = [step_id for step_id in ids if self._steps[step_id].waiting_on == 0]
        for step_id in out:
            self._steps[step_id].phase = Phase.UNBLOCKED
        return out

    def restore(self, done: Iterable[str], satisfied: Iterable[str]) -> None:
        """Rebuild after a restart: ``done`` steps are terminal; of those, ``satisfied`` ones
        released their dependants. Every other step is blocked on its unsatisfied
        dependencies (the driver then readies, parks or ends what it must)."""
        ok = set(satisfied)
        for step_id in done:
            self._entry(step_id).phase = Phase.DONE
        for entry in self._steps.values():
            entry.waiting_on = sum(1 for d in entry.deps if d not in ok)

    def unblock(self, step_id: str) -> None:
        """Mark a blocked step as unblocked (recovery: its dependencies were done before)."""
        entry = self._entry(step_id)
        if entry.phase != Phase.BLOCKED:
            raise SchedulerError(f"step {step_id!r} is {entry.phase}, not blocked")
        entry.phase = Phase.UNBLOCKED

    def done(self, step_id: str, ok: bool) -> list[str]:
        """End a step. ``ok``: its dependants may go on; returns those now unblocked. Not ok:
        returns the dependants still blocked (the driver skips them)."""
        try:
            entry = self._steps[step_id]
        except KeyError:
            raise SchedulerError(f"unknown step {step_id!r}") from None
        if entry.phase == Phase.DONE:
            raise SchedulerError(f"step {step_id!r} was already marked as done")
        if entry.phase == Phase.READY:
            self._n_ready -= 1
        entry.phase = Phase.DONE
        out: list[str] = []
        for step_id in entry.succ:
            succ = self._steps[step_id]
            if succ.phase != Phase.BLOCKED:
                continue
            if not ok:
                out.append(step_id)
                continue
            succ.waiting_on -= 1
            if succ.waiting_on == 0:
                succ.phase = Phase.UNBLOCKED
                out.append(step_id)
        return out

    # ------------------------------------------------------------------ the ready queue
    def ready(
        self, step_id: str, serial_key: str | None = None, units: Mapping[str, int] | None = None
    ) -> None:
        """Queue a step for a slot; it needs ``serial_key`` and pool ``units`` to start."""
        try:
            entry = self._steps[step_id]
        except KeyError:
            raise SchedulerError(f"unknown step {step_id!r}") from None
        if entry.phase not in (Phase.UNBLOCKED, Phase.PARKED):
            raise SchedulerError(
                f"step {step_id!r} is {entry.phase}; only an unblocked or "
                "parked step can become ready"
            )
        entry.phase = Phase.READY
        self._n_ready += 1
        entry.key = serial_key
        entry.units = units or _NO_UNITS
        if self._priority is None:
            heapq.heappush(self._heap, (entry.order, step_id))
        else:
            heapq.heappush(self._heap, ((self._priority(step_id), entry.order), step_id))

    def park(self, step_id: str) -> None:
        """The step waits (a person, a back-off, its children) and holds nothing."""
        entry = self._entry(step_id)
        if entry.phase not in (Phase.UNBLOCKED, Phase.RUNNING, Phase.READY):
            raise SchedulerError(f"step {step_id!r} is {entry.phase} and cannot be parked")
        if entry.phase == Phase.READY:
            self._n_ready -= 1
        entry.phase = Phase.PARKED

    def take(self) -> str | Breakpoint | None:
        """The next step to start, with its slot, serial key and pool units taken; a
        :class:`Breakpoint` when the next step has one (the scheduler pauses); None when
        nothing can start now."""
        if self.stopped or (self.paused and not self.tokens) or (
            self.running >= self.max_concurrency
        ):
            return None
        token = self.tokens[0] if self.tokens else None
        skipped: list[tuple[Any, str]] = []
        found: str | Breakpoint | None = None
        while self._heap:
            item = heapq.heappop(self._heap)
            step_id = item[1]
            entry = self._steps[step_id]
            if entry.phase != Phase.READY:
                continue  # stale entry (ended or re-queued meanwhile)
            if token is not None and step_id != token:
                skipped.append(item)
                continue
            if token is None and step_id in self.breakpoints and step_id not in self._bp_passed:
                self._bp_passed.add(step_id)
                skipped.append(item)
                self.paused = True
                found = Breakpoint(step_id)
                break
            if (entry.key is not None or entry.units) and not self._acquire(entry):
                skipped.append(item)
                continue
            found = step_id
            break
        for item in skipped:
            heapq.heappush(self._heap, item)
        if isinstance(found, str):
            entry = self._steps[found]
            entry.phase = Phase.RUNNING
            self._n_ready -= 1
            entry.holding += 1
            self.running += 1
            if self.tokens:
                self.tokens.pop(0)
            if self.breakpoints:
                self._bp_passed.add(found)
        return found

    def release(self, step_id: str) -> None:
        """Give back the slot, serial key and pool units that ``take()`` gave the step."""
        try:
            entry = self._steps[step_id]
        except KeyError:
            raise SchedulerError(f"unknown step {step_id!r}") from None
        if not entry.holding:
            raise SchedulerError(f"step {step_id!r} holds no slot: it was not taken")
        entry.holding -= 1
        self.running -= 1
        if entry.key is not None:
            self.keys_held.discard(entry.key)
        for pool, units in entry.units.items():
            if pool in self.pools:
                self.pool_used[pool] -= units

    def _acquire(self, entry: _Entry) -> bool:
        key = entry.key
        if key is not None and key in self.keys_held:
            return False
        for pool, units in entry.units.items():
            cap = self.pools.get(pool)
            if cap is not None and self.pool_used.get(pool, 0) + units > cap:
                return False
        if key is not None:
            self.keys_held.add(key)
        for pool, units in entry.units.items():
            if pool in self.pools:
                self.pool_used[pool] = self.pool_used.get(pool, 0) + units
        return True

    # ------------------------------------------------------------------ step-through
    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.tokens.clear()

    def step(self, step_id: str) -> None:
        """Allow exactly one more release, of ``step_id`` (pauses the scheduler)."""
        if self._entry(step_id).phase != Phase.READY:
            raise SchedulerError(f"step {step_id!r} is {self._steps[step_id].phase}, not ready")
        self.paused = True
        self.tokens.append(step_id)

    def set_breakpoints(self, step_ids: Iterable[str]) -> None:
        """Pause before these steps start (replaces the set; one set again fires again)."""
        ids = set(step_ids)
        for step_id in ids:
            self._entry(step_id)
        self.breakpoints = ids
        self._bp_passed -= ids

    def stop(self) -> None:
        """Release nothing new from now on (failure under fail_fast, cancel, rollback)."""
        self.stopped = True

    # ------------------------------------------------------------------ internals
    def _entry(self, step_id: str) -> _Entry:
        try:
            return self._steps[step_id]
        except KeyError:
            raise SchedulerError(f"unknown step {step_id!r}") from None
