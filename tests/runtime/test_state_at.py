"""``run.state_at(seq)``: the fold of the stored prefix equals what a live subscriber saw
right after event ``seq`` (property test over random runs and their forks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainlab import Chain, Toolbox
from chainlab.errors import RunStateError, TransientError
from chainlab.events import RUN_TERMINAL, Event, RunState, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore


def snapshot(state: RunState) -> Any:
    """Everything a view shows of a state, as plain comparable data."""
    steps = tuple(
        (s.step_id, str(s.status), s.reason, s.attempts, json.dumps(s.output, sort_keys=True),
         s.error_kind, s.error, s.reused is not None)
        for s in state.steps.values()
    )
    attempts = tuple((a.step_id, a.attempt, a.kind, str(a.status), a.error_kind, a.code)
                     for a in state.attempts)
    return (str(state.status), state.last_seq, steps, attempts, tuple(state.completion))


def toolbox() -> Toolbox:
    tb = Toolbox("state-at")
    flaky_seen: set[str] = set()

    @tb.tool
    def ok(tag: str) -> str:
        return f"ok {tag}"

    @tb.tool(retry={"max_attempts": 1})
    def boom(tag: str) -> str:
        raise ValueError(f"boom {tag}")

    @tb.tool(retry={"max_attempts": 2, "delay_s": 0})
    def flaky(tag: str) -> str:
        if tag not in flaky_seen:
            flaky_seen.add(tag)
            raise TransientError("try again")
        return f"flaky {tag}"

    @tb.tool(side_effects=True, requires_confirmation=True)
    def effect(tag: str) -> str:
        return f"did {tag}"

    return tb


TOOLS = ["ok", "boom", "flaky", "effect"]

step_spec = st.tuples(st.sampled_from(TOOLS), st.sets(st.integers(0, 5), max_size=2),
                      st.booleans())


def chain_from(specs: list[tuple[str, set[int], bool]], on_failure: str) -> Chain:
    steps = []
    for i, (tool, deps, when_false) in enumerate(specs):
        step: dict[str, Any] = {"id": f"s{i}", "tool": tool, "args": {"tag": f"s{i}"},
                                "depends_on": [f"s{d}" for d in sorted(deps) if d < i]}
        if when_false and tool == "ok":
            step["when"] = "1 == 2"
        steps.append(step)
    return Chain.from_dict({"name": "random", "steps": steps,
                            "options": {"on_failure": on_failure}})


class Observer:
    """Snapshots the live state right after each event it is told about."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.seen: dict[int, Any] = {}
        run.subscribe(self)

    def __call__(self, ev: Event) -> None:
        self.seen[ev.seq] = snapshot(self.run.state)


async def drive(run: Any, decide: list[bool]) -> None:
    """Wait; approve (or reject) whatever waits; until the run ends."""
    i = 0
    while True:
        result = await run.wait()
        if result.status in RUN_TERMINAL:
            return
        for step_id in sorted(result.waiting):
            yes = decide[i % len(decide)] if decide else True
            i += 1
            if yes:
                await run.approve(step_id)
            else:
                await run.reject(step_id, "no")


def check(run: Any, seen: dict[int, Any]) -> None:
    assert seen, "the subscriber saw no event"
    for seq, snap in seen.items():
        assert snapshot(run.state_at(seq)) == snap, f"state_at({seq}) differs"
    assert snapshot(run.state_at(run.last_seq)) == snapshot(run.state)
    first = run.state_at(1)
    assert first.status == RunStatus.RUNNING and first.last_seq == 1
    before = run.state_at(0)
    assert before.status is None and before.attempts == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(step_spec, min_size=1, max_size=6),
       on_failure=st.sampled_from(["fail_fast", "continue"]),
       decide=st.lists(st.booleans(), max_size=4),
       rerun=st.integers(0, 5))
def test_state_at_equals_what_a_subscriber_saw(
    specs: list[tuple[str, set[int], bool]], on_failure: str, decide: list[bool], rerun: int
) -> None:
    async def main() -> None:
        rt = Runtime(toolbox(), MemoryStore())
        run = await rt.start(chain_from(specs, on_failure))
        seen = Observer(run).seen
        await drive(run, decide)
        check(run, seen)
        # and a fork of it (step_reused events, a run_forked event)
        fork = await rt.fork(run.run_id, rerun=[f"s{rerun % len(specs)}"])
        fork_seen = Observer(fork).seen
        await drive(fork, decide)
        if fork_seen:
            check(fork, fork_seen)
        assert snapshot(fork.state_at(fork.last_seq)) == snapshot(fork.state)
        await rt.aclose()

    anyio.run(main)


def test_state_at_of_a_stored_run_opened_elsewhere(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    chain = chain_from([("ok", set(), False), ("flaky", {0}, False), ("effect", {1}, False),
                        ("boom", {0}, False)], "continue")

    async def main() -> tuple[str, dict[int, Any]]:
        store = SQLiteStore(db)
        rt = Runtime(toolbox(), store)
        run = await rt.start(chain)
        seen = Observer(run).seen
        await drive(run, [True])
        check(run, seen)  # live handle (SQLite, group commit)
        await rt.aclose()
        store.close()
        return run.run_id, seen

    run_id, seen = anyio.run(main)
    store = SQLiteStore(db)  # a new store object: nothing shared with the writer
    try:
        stored = Runtime(toolbox(), store).get_run(run_id)
        assert not stored.active
        for seq, snap in seen.items():
            assert snapshot(stored.state_at(seq)) == snap
        assert stored.state_at(stored.last_seq).status == RunStatus.FAILED
        waits = [k for k in range(stored.last_seq + 1)
                 if stored.state_at(k).status == RunStatus.SUSPENDED]
        assert waits, "the run was suspended for approval at some point"
        assert str(stored.state_at(waits[0]).steps["s2"].status) == "waiting_confirmation"
    finally:
        store.close()


def test_state_at_refuses_a_seq_the_run_does_not_have() -> None:
    async def main() -> None:
        rt = Runtime(toolbox(), MemoryStore())
        run = await rt.start(chain_from([("ok", set(), False)], "fail_fast"))
        await run.wait()
        last = run.last_seq
        with pytest.raises(RunStateError, match=rf"has events 1..{last}; there is no event "
                           rf"{last + 1}"):
            run.state_at(last + 1)
        with pytest.raises(RunStateError, match="there is no event -1"):
            run.state_at(-1)
        with pytest.raises(TypeError, match="seq must be an int"):
            run.state_at("3")  # type: ignore[arg-type]
        # the state is a copy: the live one is not touched
        assert run.state_at(1) is not run.state
        await rt.aclose()

    anyio.run(main)
