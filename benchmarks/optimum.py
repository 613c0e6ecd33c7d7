"""The shortest possible makespan of a small DAG on ``c`` identical slots (P|prec|Cmax), by
branch and bound: what NO scheduler can beat, so a benchmark can say how far a release policy
is from the best schedule, not only from max(critical path, work / c).

Exact: every schedule can be shifted left until each step starts at 0 or when another step
ends, so the search branches only at those instants, over every subset of the ready steps
that fits the free slots (starting fewer than fit, i.e. leaving a slot idle on purpose, is
one of the branches: list schedules alone can miss the optimum). Durations are whole
multiples of ``unit`` (default: their greatest common divisor), so every start and end time
of such a schedule is a whole number of units, which makes the bounds' ceilings valid.

Bound at each node (time ``t``): for every step x not started yet, the unfinished work of x's
ancestors needs at least ceil(work / c) units (and their longest path to x), then x and its
longest path to a sink. A sink that depends on everything runs alone, which this captures.
Identical twins (same duration, same predecessors and successors) start in a fixed order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

Steps = Sequence[tuple[str, float, Sequence[str]]]  # (id, duration, dependencies)


@dataclass(frozen=True)
class Optimum:
    makespan: float  # seconds
    proven: bool  # False: the node budget ran out; makespan is the best schedule found
    nodes: int


def optimum(steps: Steps, slots: int, *, unit: float | None = None,
            budget: int = 2_000_000) -> Optimum:
    ids = [s for s, _, _ in steps]
    if unit is None:
        fr = [Fraction(d).limit_denominator(10**6) for _, d, _ in steps]
        num = math.gcd(*(f.numerator * (10**6 // f.denominator) for f in fr)) or 1
        unit = num / 10**6
    dur = {s: round(d / unit) for s, d, _ in steps}
    for s, seconds, _ in steps:
        if abs(dur[s] * unit - seconds) > 1e-9 * max(1.0, seconds):
            raise ValueError(
                f"duration of {s!r} ({seconds}) is not a whole number of units {unit}")
    deps = {s: frozenset(dp) for s, _, dp in steps}
    succ: dict[str, list[str]] = {s: [] for s in ids}
    for s in ids:
        for dep in deps[s]:
            succ[dep].append(s)
    order = _topological(ids, deps)
    tail: dict[str, int] = {}
    for s in reversed(order):
        tail[s] = dur[s] + max((tail[x] for x in succ[s]), default=0)
    anc: dict[str, frozenset[str]] = {}
    for s in order:
        anc[s] = frozenset(deps[s]).union(*(anc[d] for d in deps[s]))
    twin = {s: o for s in ids for o in ids
            if ids.index(o) < ids.index(s) and dur[o] == dur[s] and deps[o] == deps[s]
            and succ[o] == succ[s]}
    best = [_greedy(ids, dur, deps, succ, tail, slots)]
    seen: dict[tuple[frozenset[str], tuple[tuple[int, str], ...]], int] = {}
    nodes = [0]

    def bound(t: int, running: tuple[tuple[int, str], ...], started: frozenset[str]) -> int:
        left = {i: r for r, i in running}
        for i in ids:
            if i not in started:
                left[i] = dur[i]
        b = max((r + tail[i] - dur[i] for r, i in running), default=0)
        b = max(b, math.ceil(sum(left.values()) / slots))
        for x in ids:
            if x in started:
                continue
            work = sum(left[a] for a in anc[x] if a in left)
            b = max(b, math.ceil(work / slots) + tail[x])
        return t + b

    def dfs(t: int, done: frozenset[str], running: tuple[tuple[int, str], ...],
            started: frozenset[str]) -> None:
        nodes[0] += 1
        if len(done) == len(ids):
            best[0] = min(best[0], t)
            return
        if nodes[0] > budget or bound(t, running, started) >= best[0]:
            return
        key = (done, tuple(sorted(running)))
        if seen.get(key, t + 1) <= t:
            return
        seen[key] = t
        ready = [i for i in ids if i not in started and deps[i] <= done]
        free = slots - len(running)
        for k in range(min(free, len(ready)), -1, -1):
            for chosen in itertools.combinations(ready, k):
                if any(i in twin and twin[i] not in started and twin[i] not in chosen
                       for i in chosen):
                    continue
                run = running + tuple((dur[i], i) for i in chosen)
                if not run:
                    continue
                dt = min(r for r, _ in run)
                ended = frozenset(i for r, i in run if r == dt)
                rest = tuple((r - dt, i) for r, i in run if r > dt)
                dfs(t + dt, done | ended, rest, started.union(chosen))

    dfs(0, frozenset(), (), frozenset())
    return Optimum(best[0] * unit, nodes[0] <= budget, nodes[0])


def _topological(ids: list[str], deps: dict[str, frozenset[str]]) -> list[str]:
    out: list[str] = []
    placed: set[str] = set()
    while len(out) < len(ids):
        batch = [s for s in ids if s not in placed and deps[s] <= placed]
        if not batch:
            raise ValueError("the steps have a dependency cycle")
        out += batch
        placed.update(batch)
    return out


def _greedy(ids: list[str], dur: dict[str, int], deps: dict[str, frozenset[str]],
            succ: dict[str, list[str]], tail: dict[str, int], slots: int) -> int:
    """The longest-tail-first list schedule: a first upper bound."""
    rank = {s: (-tail[s], i) for i, s in enumerate(ids)}
    ready = [s for s in ids if not deps[s]]
    done: set[str] = set()
    running: list[tuple[int, str]] = []
    now = 0
    while len(done) < len(ids):
        ready.sort(key=rank.__getitem__)
        while ready and len(running) < slots:
            s = ready.pop(0)
            running.append((now + dur[s], s))
        running.sort()
        now, s = running.pop(0)
        done.add(s)
        ready += [x for x in succ[s] if deps[x] <= done]
    return now
