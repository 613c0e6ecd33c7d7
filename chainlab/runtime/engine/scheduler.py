"""The scheduler: which step may start now. Pure bookkeeping, no I/O, no event loop.

Shaped like the standard library's :class:`graphlib.TopologicalSorter` and as strict about
misuse: the async driver (:mod:`chainlab.runtime.engine.kernel`) tells it what happened and asks
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
* ``grow(graph)`` adds steps to a running graph (a ``for_each`` step's instances, an agent's
  calls: DESIGN §17), blocked until ``start`` counts their dependencies.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Breakpoint", "Phase", "Scheduler", "SchedulerError", "Topology"]

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


class Topology:
    """The static shape of a run's graph: dependencies, dependants and declaration order per
    step. Built once per compiled chain and shared by every run of it (a scheduler keeps
    only the per-run state: phases, counts, what is held)."""

    __slots__ = ("deps", "order", "succ")

    def __init__(self, graph: Mapping[str, tuple[Sequence[str], Sequence[int]]]):
        self.deps: dict[str, tuple[str, ...]] = {}
        self.order: dict[str, tuple[int, ...]] = {}
        succ: dict[str, list[str]] = {}
        for step_id, (deps, order) in graph.items():
            self.deps[step_id] = tuple(deps)
            self.order[step_id] = tuple(order)
            succ[step_id] = []
        for step_id, deps in self.deps.items():
            for dep in deps:
                if dep not in succ:
                    raise SchedulerError(f"step {step_id!r} depends on unknown step {dep!r}")
                succ[dep].append(step_id)
        self.succ: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in succ.items()}

    def copy(self) -> Topology:
        """A topology of its own (a run that grows must not change the shared one)."""
        new = Topology.__new__(Topology)
        new.deps, new.order, new.succ = dict(self.deps), dict(self.order), dict(self.succ)
        return new

    def add(self, graph: Mapping[str, tuple[Sequence[str], Sequence[int]]]) -> None:
        """Add steps whose dependencies are known steps (or each other). Raises
        SchedulerError for a step that exists or a dependency that does not."""
        deps, order, succ = self.deps, self.order, self.succ
        for step_id in graph:
            if step_id in deps:
                raise SchedulerError(f"step {step_id!r} already exists")
        for step_id, (step_deps, step_order) in graph.items():
            deps[step_id] = tuple(step_deps)
            order[step_id] = tuple(step_order)
            succ[step_id] = ()
        for step_id, (step_deps, _) in graph.items():
            for dep in step_deps:
                if dep not in succ:
                    raise SchedulerError(f"step {step_id!r} depends on unknown step {dep!r}")
                succ[dep] = (*succ[dep], step_id)


class Scheduler:
    """Indegrees, the ready heap, slots, serial keys, resource pools, pause, step tokens and
    breakpoints of one run.

    ``graph``: a :class:`Topology`, or ``{step_id: (dependencies, declaration order)}``.
    ``priority``: an optional key per step; smaller goes first (ties by declaration order).
    """

    def __init__(
        self,
        graph: Topology | Mapping[str, tuple[Sequence[str], tuple[int, ...]]],
        *,
        max_concurrency: int,
        pools: Mapping[str, int] | None = None,
        breakpoints: Iterable[str] = (),
        priority: Callable[[str], float] | None = None,
    ):
        if max_concurrency < 1:
            raise SchedulerError(f"max_concurrency must be >= 1, got {max_concurrency}")
        topo = graph if isinstance(graph, Topology) else Topology(graph)
        self._topo = topo
        self._own_topo = not isinstance(graph, Topology)  # a shared one is copied to grow
        # per-run state in flat dicts (built at C speed: a run of 1,000 steps allocates no
        # object per step here)
        self._phase: dict[str, Phase] = dict.fromkeys(topo.deps, Phase.BLOCKED)
        self._waiting: dict[str, int] = {}  # unfinished dependencies of a started level
        self._holding: dict[str, int] = {}  # takes not yet released (absent: 0)
        self._key: dict[str, str] = {}  # serial key of a ready/running step that has one
        self._units: dict[str, Mapping[str, int]] = {}  # pool units, likewise
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
        self.n_ready = 0  # steps in phase READY (the heap may hold stale entries too)

    # ------------------------------------------------------------------ queries
    def phase(self, step_id: str) -> Phase:
        return self._phase_of(step_id)

    def get_ready(self) -> list[str]:
        """Ready steps in release order (what ``take()`` would consider, first to last)."""
        return [
            step_id
            for _, step_id in sorted(set(self._heap))
            if self._phase[step_id] == Phase.READY
        ]

    def is_active(self) -> bool:
        """Anything ready that could start if slots allowed (for the driver's idle check)."""
        return not self.stopped and (not self.paused or bool(self.tokens)) and self.n_ready > 0

    # ------------------------------------------------------------------ dependencies
    def start(self, step_ids: Iterable[str]) -> list[str]:
        """Count the dependencies of these steps (a level of the chain) and return those that
        have none, now unblocked, in the order given."""
        phase, deps, waiting = self._phase, self._topo.deps, self._waiting
        out: list[str] = []
        for step_id in step_ids:
            now = phase.get(step_id)
            if now is not Phase.BLOCKED:
                self._phase_of(step_id)  # raises for an unknown step
                raise SchedulerError(f"step {step_id!r} was already started ({now})")
            n = 0
            for dep in deps[step_id]:
                if phase[dep] is not Phase.DONE:
                    n += 1
            waiting[step_id] = n
            if n == 0:
                out.append(step_id)
        for step_id in out:
            phase[step_id] = Phase.UNBLOCKED
        return out

    def restore(self, done: Iterable[str], satisfied: Iterable[str]) -> None:
        """Rebuild after a restart: ``done`` steps are terminal; of those, ``satisfied`` ones
        released their dependants. Every other step is blocked on its unsatisfied
        dependencies (the driver then readies, parks or ends what it must)."""
        ok = set(satisfied)
        for step_id in done:
            self._phase_of(step_id)
            self._phase[step_id] = Phase.DONE
        for step_id, deps in self._topo.deps.items():
            self._waiting[step_id] = sum(1 for d in deps if d not in ok)

    def grow(self, graph: Mapping[str, tuple[Sequence[str], Sequence[int]]]) -> None:
        """Add steps to a running graph (``{step_id: (dependencies, declaration order)}``):
        blocked until :meth:`start` counts their dependencies, like a sub-chain's steps."""
        if not self._own_topo:
            self._topo = self._topo.copy()
            self._own_topo = True
        self._topo.add(graph)
        self._phase.update(dict.fromkeys(graph, Phase.BLOCKED))

    def unblock(self, step_id: str) -> None:
        """Mark a blocked step as unblocked (recovery: its dependencies were done before)."""
        now = self._phase_of(step_id)
        if now != Phase.BLOCKED:
            raise SchedulerError(f"step {step_id!r} is {now}, not blocked")
        self._phase[step_id] = Phase.UNBLOCKED

    def done(self, step_id: str, ok: bool) -> list[str]:
        """End a step. ``ok``: its dependants may go on; returns those now unblocked. Not ok:
        returns the dependants still blocked (the driver skips them)."""
        phase = self._phase
        now = phase.get(step_id)
        if now is None:
            raise SchedulerError(f"unknown step {step_id!r}")
        if now is Phase.DONE:
            raise SchedulerError(f"step {step_id!r} was already marked as done")
        if now is Phase.READY:
            self.n_ready -= 1
        phase[step_id] = Phase.DONE
        out: list[str] = []
        waiting = self._waiting
        for succ in self._topo.succ[step_id]:
            if phase[succ] is not Phase.BLOCKED:
                continue
            if not ok:
                out.append(succ)
                continue
            left = waiting.get(succ, 0) - 1  # (a level not started yet: recounted by start)
            waiting[succ] = left
            if left == 0:
                phase[succ] = Phase.UNBLOCKED
                out.append(succ)
        return out

    # ------------------------------------------------------------------ the ready queue
    def ready(
        self, step_id: str, serial_key: str | None = None, units: Mapping[str, int] | None = None
    ) -> None:
        """Queue a step for a slot; it needs ``serial_key`` and pool ``units`` to start."""
        now = self._phase.get(step_id)
        if now is not Phase.UNBLOCKED and now is not Phase.PARKED:
            if now is None:
                raise SchedulerError(f"unknown step {step_id!r}")
            raise SchedulerError(
                f"step {step_id!r} is {now}; only an unblocked or parked step can become ready"
            )
        self._phase[step_id] = Phase.READY
        self.n_ready += 1
        if serial_key is not None:
            self._key[step_id] = serial_key
        elif self._key:
            self._key.pop(step_id, None)
        if units:
            self._units[step_id] = units
        elif self._units:
            self._units.pop(step_id, None)
        order = self._topo.order[step_id]
        if self._priority is None:
            heapq.heappush(self._heap, (order, step_id))
        else:
            heapq.heappush(self._heap, ((self._priority(step_id), order), step_id))

    def park(self, step_id: str) -> None:
        """The step waits (a person, a back-off, its children) and holds nothing."""
        now = self._phase_of(step_id)
        if now not in (Phase.UNBLOCKED, Phase.RUNNING, Phase.READY, Phase.PARKED):
            raise SchedulerError(f"step {step_id!r} is {now} and cannot be parked")
        if now is Phase.READY:
            self.n_ready -= 1
        self._phase[step_id] = Phase.PARKED

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
        phase, heap = self._phase, self._heap
        while heap:
            item = heapq.heappop(heap)
            step_id = item[1]
            if phase[step_id] is not Phase.READY:
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
            if (self._key or self._units) and not self._acquire(step_id):
                skipped.append(item)
                continue
            found = step_id
            break
        for item in skipped:
            heapq.heappush(heap, item)
        if found.__class__ is str:
            phase[found] = Phase.RUNNING  # type: ignore[index]
            self.n_ready -= 1
            holding = self._holding
            holding[found] = holding.get(found, 0) + 1  # type: ignore[arg-type]
            self.running += 1
            if self.tokens:
                self.tokens.pop(0)
            if self.breakpoints:
                self._bp_passed.add(found)  # type: ignore[arg-type]
        return found

    def release(self, step_id: str) -> None:
        """Give back the slot, serial key and pool units that ``take()`` gave the step."""
        held = self._holding.get(step_id)
        if not held:
            self._phase_of(step_id)  # raises for an unknown step
            raise SchedulerError(f"step {step_id!r} holds no slot: it was not taken")
        if held == 1:
            del self._holding[step_id]
        else:
            self._holding[step_id] = held - 1
        self.running -= 1
        if self._key or self._units:
            key = self._key.get(step_id)
            if key is not None:
                self.keys_held.discard(key)
            for pool, units in self._units.get(step_id, _NO_UNITS).items():
                if pool in self.pools:
                    self.pool_used[pool] -= units

    def _acquire(self, step_id: str) -> bool:
        key = self._key.get(step_id)
        units = self._units.get(step_id, _NO_UNITS)
        if key is not None and key in self.keys_held:
            return False
        for pool, n in units.items():
            cap = self.pools.get(pool)
            if cap is not None and self.pool_used.get(pool, 0) + n > cap:
                return False
        if key is not None:
            self.keys_held.add(key)
        for pool, n in units.items():
            if pool in self.pools:
                self.pool_used[pool] = self.pool_used.get(pool, 0) + n
        return True

    # ------------------------------------------------------------------ step-through
    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.tokens.clear()

    def step(self, step_id: str) -> None:
        """Allow exactly one more release, of ``step_id`` (pauses the scheduler)."""
        now = self._phase_of(step_id)
        if now != Phase.READY:
            raise SchedulerError(f"step {step_id!r} is {now}, not ready")
        self.paused = True
        self.tokens.append(step_id)

    def set_breakpoints(self, step_ids: Iterable[str]) -> None:
        """Pause before these steps start (replaces the set; one set again fires again)."""
        ids = set(step_ids)
        for step_id in ids:
            self._phase_of(step_id)
        self.breakpoints = ids
        self._bp_passed -= ids

    def stop(self) -> None:
        """Release nothing new from now on (failure under fail_fast, cancel, rollback)."""
        self.stopped = True

    # ------------------------------------------------------------------ internals
    def _phase_of(self, step_id: str) -> Phase:
        try:
            return self._phase[step_id]
        except KeyError:
            raise SchedulerError(f"unknown step {step_id!r}") from None
