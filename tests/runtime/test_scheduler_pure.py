"""The pure scheduler, driven by plain calls (no event loop): release order, slots, serial
keys, pools, step tokens, breakpoints, and a precise error for every misuse."""

from __future__ import annotations

import graphlib
import random

import pytest

from chainlab.runtime.engine.scheduler import Breakpoint, Phase, Scheduler, SchedulerError


def make(edges: dict[str, list[str]], **kw: object) -> Scheduler:
    graph = {sid: (deps, (i,)) for i, (sid, deps) in enumerate(edges.items())}
    kw.setdefault("max_concurrency", 8)
    return Scheduler(graph, **kw)  # type: ignore[arg-type]


def run_all(s: Scheduler, top: list[str]) -> list[str]:
    """Drive to the end, one step at a time: every unblocked step becomes ready at once."""
    order: list[str] = []
    for sid in s.start(top):
        s.ready(sid)
    while (got := s.take()) is not None:
        assert isinstance(got, str)
        order.append(got)
        s.release(got)
        for nxt in s.done(got, ok=True):
            s.ready(nxt)
    return order


# ---------------------------------------------------------------- release order tables
ORDER_CASES = [
    # (edges in declaration order, expected release order with one step at a time)
    ({"a": [], "b": ["a"], "c": ["b"]}, ["a", "b", "c"]),
    ({"c": [], "b": [], "a": []}, ["c", "b", "a"]),  # declaration order, not names
    ({"root": [], "x": ["root"], "y": ["root"], "join": ["x", "y"]},
     ["root", "x", "y", "join"]),
    ({"late": ["early"], "early": [], "other": []}, ["early", "late", "other"]),
    ({"a": [], "b": [], "c": ["a"], "d": ["b"], "e": ["c", "d"]}, ["a", "b", "c", "d", "e"]),
]


@pytest.mark.parametrize(("edges", "expected"), ORDER_CASES)
def test_release_order_is_topological_then_declaration(edges: dict[str, list[str]],
                                                       expected: list[str]) -> None:
    assert run_all(make(edges), list(edges)) == expected


def test_priority_key_goes_first_ties_by_declaration() -> None:
    rank = {"a": 3.0, "b": 1.0, "c": 1.0, "d": 0.0}
    s = make({"a": [], "b": [], "c": [], "d": []}, priority=rank.__getitem__)
    assert run_all(s, ["a", "b", "c", "d"]) == ["d", "b", "c", "a"]


@pytest.mark.parametrize("seed", range(30))
def test_random_dags_release_in_a_graphlib_valid_order(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    edges = {f"s{i}": [f"s{j}" for j in range(i) if rng.random() < 0.2] for i in range(n)}
    order = run_all(make(edges), list(edges))
    assert sorted(order) == sorted(edges)
    pos = {sid: i for i, sid in enumerate(order)}
    assert all(pos[d] < pos[sid] for sid, deps in edges.items() for d in deps)
    graphlib.TopologicalSorter(edges).prepare()  # the same graph is acyclic for graphlib too


# ---------------------------------------------------------------- slots, keys, pools
def test_concurrency_slots_are_held_until_released() -> None:
    s = make({"a": [], "b": [], "c": []}, max_concurrency=2)
    for sid in s.start(["a", "b", "c"]):
        s.ready(sid)
    assert [s.take(), s.take(), s.take()] == ["a", "b", None]
    s.release("a")
    assert s.take() == "c"


def test_serial_key_never_overlaps_and_waiting_step_lets_others_pass() -> None:
    s = make({"a": [], "b": [], "c": []})
    for sid in s.start(["a", "b", "c"]):
        s.ready(sid, serial_key="table:1" if sid in "ab" else None)
    assert s.take() == "a"
    assert s.take() == "c"  # b waits for the key and holds no slot; c passes
    assert s.take() is None and s.get_ready() == ["b"]
    s.release("a")
    assert s.take() == "b"


def test_pools_take_units_all_or_none() -> None:
    s = make({"big": [], "small": [], "tiny": []}, pools={"llm": 3})
    s.start(["big", "small", "tiny"])
    s.ready("big", units={"llm": 2})
    s.ready("small", units={"llm": 2})
    s.ready("tiny", units={"llm": 1})
    assert s.take() == "big"
    assert s.take() == "tiny"  # small needs 2 of the 1 left: it waits, tiny fits
    assert s.take() is None and s.pool_used == {"llm": 3}
    s.release("big")
    assert s.take() == "small" and s.pool_used == {"llm": 3}


def test_a_retry_may_start_while_a_timed_out_body_still_holds_its_slot() -> None:
    s = make({"a": []})
    s.start(["a"])
    s.ready("a")
    assert s.take() == "a"
    s.park("a")  # timed out: back-off; the old body still runs (slot held)
    s.ready("a")
    assert s.take() == "a" and s.running == 2
    s.release("a")
    s.release("a")
    assert s.running == 0
    with pytest.raises(SchedulerError, match="holds no slot"):
        s.release("a")


# ---------------------------------------------------------------- failure and skipping
def test_done_not_ok_returns_the_blocked_dependants_to_skip() -> None:
    s = make({"a": [], "b": ["a"], "c": ["b"], "d": []})
    s.start(["a", "b", "c", "d"])
    assert s.done("a", ok=False) == ["b"]
    assert s.done("b", ok=False) == ["c"]
    assert s.phase("c") == Phase.BLOCKED and s.phase("d") == Phase.UNBLOCKED


def test_start_returns_only_the_steps_unblocked_at_start() -> None:
    # the defect behind "ready -> ready": a skipped step released its dependant during the
    # start loop, which then released it again
    s = make({"a": [], "b": ["a"]})
    assert s.start(["a", "b"]) == ["a"]
    assert s.done("a", ok=True) == ["b"]
    with pytest.raises(SchedulerError, match="already started"):
        s.start(["b"])


# ---------------------------------------------------------------- step-through
def test_pause_step_tokens_and_breakpoints() -> None:
    s = make({"a": [], "b": [], "c": []}, breakpoints=["c"])
    for sid in s.start(["a", "b", "c"]):
        s.ready(sid)
    s.pause()
    assert s.take() is None
    s.step("b")
    assert s.take() == "b" and s.take() is None  # exactly one
    s.unpause()
    assert s.take() == "a"
    assert s.take() == Breakpoint("c") and s.paused
    s.unpause()
    assert s.take() == "c"  # a breakpoint fires once


def test_breakpoint_set_again_fires_again() -> None:
    s = make({"a": [], "b": ["a"]}, breakpoints=["a"])
    for sid in s.start(["a", "b"]):
        s.ready(sid)
    assert s.take() == Breakpoint("a")
    s.set_breakpoints(["a"])
    s.unpause()
    assert s.take() == Breakpoint("a")


def test_stop_releases_nothing_new() -> None:
    s = make({"a": [], "b": []})
    for sid in s.start(["a", "b"]):
        s.ready(sid)
    s.stop()
    assert s.take() is None and not s.is_active()


# ---------------------------------------------------------------- misuse
MISUSE = [
    ("done twice", lambda s: (s.done("a", True), s.done("a", True)),
     "step 'a' was already marked as done"),
    ("unknown step", lambda s: s.done("zz", True), "unknown step 'zz'"),
    ("release not taken", lambda s: s.release("a"), "step 'a' holds no slot"),
    ("ready while blocked", lambda s: s.ready("b"), "step 'b' is blocked"),
    ("ready twice", lambda s: (s.ready("a"), s.ready("a")), "step 'a' is ready"),
    ("park a blocked step", lambda s: s.park("b"), "step 'b' is blocked and cannot be parked"),
    ("step a step that is not ready", lambda s: s.step("b"), "step 'b' is blocked, not ready"),
    ("unknown breakpoint", lambda s: s.set_breakpoints(["nope"]), "unknown step 'nope'"),
    ("unblock twice", lambda s: s.unblock("a"), "step 'a' is unblocked, not blocked"),
]


@pytest.mark.parametrize(("name", "misuse", "message"), MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_raises_a_precise_error(name: str, misuse: object, message: str) -> None:
    s = make({"a": [], "b": ["a"]})
    s.start(["a", "b"])
    with pytest.raises(SchedulerError, match=message):
        misuse(s)  # type: ignore[operator]


def test_max_concurrency_must_be_positive() -> None:
    with pytest.raises(SchedulerError, match="max_concurrency must be >= 1"):
        make({"a": []}, max_concurrency=0)
