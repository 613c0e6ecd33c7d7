"""benchmarks/optimum.py: the exact shortest makespan the W5 benchmark compares release policies
with. Checked against an independent exhaustive search (one time unit at a time, every subset
of the ready steps), on an instance where only a deliberately idle slot reaches the optimum,
and on the W5 workloads themselves (the figures the issue-16 note quotes)."""

from __future__ import annotations

import functools
import itertools
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from bench_release import lower_bound, w5a, w5b  # noqa: E402
from optimum import optimum  # noqa: E402

# a DAG on 2 slots where every work-conserving (list) schedule takes 10 units and the best
# schedule takes 9: it keeps a slot idle at t=1 instead of starting s4 (found by search)
IDLE_NEEDED = [
    ("s0", 1, []), ("s1", 3, []), ("s2", 2, ["s1"]), ("s3", 1, ["s0", "s1"]),
    ("s4", 4, ["s0"]), ("s5", 2, ["s0", "s2", "s3"]), ("s6", 2, ["s5"]),
]


def exhaustive(steps: list[tuple[str, int, list[str]]], slots: int) -> int:
    """Every schedule on whole time units: at each tick, start any subset of the ready steps."""
    ids = [s for s, _, _ in steps]
    dur = {s: d for s, d, _ in steps}
    deps = {s: frozenset(dp) for s, _, dp in steps}

    @functools.cache
    def go(done: frozenset[str], running: tuple[tuple[int, str], ...]) -> int:
        if len(done) == len(ids):
            return 0
        started = done | {i for _, i in running}
        ready = [i for i in ids if i not in started and deps[i] <= done]
        best = 10**9
        for k in range(min(slots - len(running), len(ready)) + 1):
            for chosen in itertools.combinations(ready, k):
                run = [*running, *((dur[i], i) for i in chosen)]
                if not run:
                    continue
                ended = frozenset(i for r, i in run if r == 1)
                rest = tuple(sorted((r - 1, i) for r, i in run if r > 1))
                best = min(best, 1 + go(done | ended, rest))
        return best

    return go(frozenset(), ())


def best_list_schedule(steps: list[tuple[str, int, list[str]]], slots: int) -> int:
    """The best work-conserving schedule over every release order (a slot never idles while
    a step is ready)."""
    dur = {s: d for s, d, _ in steps}
    deps = {s: set(dp) for s, _, dp in steps}
    best = 10**9
    for order in itertools.permutations(dur):
        rank = {s: i for i, s in enumerate(order)}
        done: set[str] = set()
        running: list[tuple[int, str]] = []
        now = 0
        while len(done) < len(dur):
            started = done | {i for _, i in running}
            ready = sorted((s for s in dur if s not in started and deps[s] <= done),
                           key=rank.__getitem__)
            running += [(now + dur[s], s) for s in ready[: slots - len(running)]]
            running.sort()
            now = running[0][0]
            done |= {s for t, s in running if t == now}
            running = [(t, s) for t, s in running if t != now]
        best = min(best, now)
    return best


def test_the_optimum_can_need_an_idle_slot() -> None:
    found = optimum(IDLE_NEEDED, 2, unit=1)
    assert found.proven
    assert found.makespan == exhaustive(IDLE_NEEDED, 2) == 9
    assert best_list_schedule(IDLE_NEEDED, 2) == 10  # no release order reaches it


@pytest.mark.parametrize("seed", range(4))
def test_random_dags_match_the_exhaustive_search(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(15):
        ids = [f"s{i}" for i in range(rng.randint(2, 6))]
        steps = [(s, rng.randint(1, 4), [d for d in ids[:i] if rng.random() < 0.35])
                 for i, s in enumerate(ids)]
        slots = rng.choice([1, 2, 3])
        found = optimum(steps, slots, unit=1)
        assert found.proven
        assert found.makespan == exhaustive(steps, slots), (steps, slots)


def test_w5_optimum_against_the_simple_lower_bound() -> None:
    """W5a reaches max(critical path, work / 4); W5b cannot: its final join runs alone, so
    the best schedule is 150 ms, 1.053 x that bound (the issue's 1.05 x target is out of
    reach of every scheduler there)."""
    a, _ = w5a()
    b, _ = w5b()
    assert optimum(a, 4).makespan == pytest.approx(lower_bound(a)) == pytest.approx(0.4)
    best_b = optimum(b, 4)
    assert best_b.proven
    assert best_b.makespan == pytest.approx(0.150)
    assert best_b.makespan / lower_bound(b) == pytest.approx(1.0526, abs=1e-4)


def test_durations_off_the_unit_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number of units"):
        optimum([("a", 0.015, [])], 1, unit=0.01)


def test_identical_steps_start_together() -> None:
    """Interchangeable steps are started in a fixed order to cut the search, never one per
    instant. Two fan-outs of identical lookups (W5b's shape) on 3 slots: longest-tail-first
    takes 9 units, the best schedule 8 (found by search)."""
    steps = [
        ("g0q0", 1, []), ("g0q1", 1, []), ("g0x", 1, []), ("g0j", 2, ["g0q0", "g0q1", "g0x"]),
        ("g1q0", 3, []), ("g1q1", 3, []), ("g1q2", 3, []), ("g1x", 5, []),
        ("g1j", 1, ["g1q0", "g1q1", "g1q2", "g1x"]), ("ans", 1, ["g0j", "g1j"]),
    ]
    assert optimum(steps, 3, unit=1).makespan == exhaustive(steps, 3) == 8
