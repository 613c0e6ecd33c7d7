"""FoldIndex (chainlab.events.snapshots): the state at any event, from the nearest fold
snapshot, equals the full fold of the prefix, and asking never changes a snapshot."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import TransientError
from chainlab.events import Event, RunState
from chainlab.events.snapshots import FoldIndex, copy_state
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore


def everything(state: RunState) -> Any:
    """Every attribute of a state as comparable data (steps and attempts field by field)."""
    out = {}
    for name, value in vars(state).items():
        if name == "steps":
            value = {k: dataclasses.asdict(v) for k, v in value.items()}
        elif name == "attempts":
            value = [dataclasses.asdict(a) for a in value]
        elif name == "_open":
            value = {k: dataclasses.asdict(a) for k, a in value.items()}
        out[name] = value
    return out


def real_events() -> tuple[list[Event], list[str]]:
    """A real run with retries, a failure, a skip, an approval and a rollback."""
    tb = Toolbox("snap")
    seen: set[str] = set()

    @tb.tool
    def ok(tag: str) -> str:
        return tag

    @tb.tool(retry={"max_attempts": 3, "delay_s": 0})
    def flaky(tag: str) -> str:
        if tag not in seen:
            seen.add(tag)
            raise TransientError("again")
        return tag

    @tb.tool(side_effects=True, requires_confirmation=True, compensate="undo")
    def effect(tag: str) -> str:
        return tag

    @tb.tool(side_effects=True)
    def undo(output: str = "") -> None:
        return None

    @tb.tool(retry={"max_attempts": 1})
    def boom(tag: str) -> str:
        raise ValueError("boom")

    steps = [{"id": "a", "tool": "ok", "args": {"tag": "a"}},
             {"id": "b", "tool": "flaky", "args": {"tag": "b"}, "depends_on": ["a"]},
             {"id": "c", "tool": "flaky", "args": {"tag": "c"}},
             {"id": "e", "tool": "effect", "args": {"tag": "e"}, "depends_on": ["b"]},
             {"id": "s", "tool": "ok", "args": {"tag": "s"}, "when": "1 == 2"},
             {"id": "x", "tool": "boom", "args": {"tag": "x"}, "depends_on": ["e"]}]
    chain = Chain.from_dict({"name": "snap", "steps": steps})

    async def main() -> list[Event]:
        store = MemoryStore()
        async with Runtime(tb, store) as rt:
            run = await rt.start(chain)
            await run.wait()
            await run.approve("e")
            await run.wait()
            if run.status == "failed":
                await run.rollback()
                await run.wait()
            return run.event_list()

    return anyio.run(main), [s["id"] for s in steps]


@pytest.mark.parametrize("every", [1, 2, 3, 7, 1000])
def test_state_at_every_event_equals_the_full_fold(every: int) -> None:
    events, ids = real_events()
    assert len(events) > 25
    kinds = {ev.kind for ev in events}
    assert {"step_retry_scheduled", "step_approved", "compensation_succeeded"} <= kinds
    index = FoldIndex("r", ids, every=every)
    expected = {ev.seq: everything(RunState.from_events("r", events[:i + 1], ids))
                for i, ev in enumerate(events)}
    order = [ev.seq for ev in events]
    random.Random(every).shuffle(order)
    for seq in order + order[:5]:  # random order, and again: snapshots stay as they were
        assert everything(index.state_at(events, seq)) == expected[seq], seq
    assert everything(index.state_at(events, 0)) == everything(RunState("r", ids))


def test_a_copy_changes_without_changing_its_original() -> None:
    events, ids = real_events()
    half = len(events) // 2
    original = RunState.from_events("r", events[:half], ids)
    before = everything(original)
    copy = copy_state(original)
    for ev in events[half:]:
        copy.apply(ev)
    assert everything(original) == before
    assert everything(copy) == everything(RunState.from_events("r", events, ids))


def test_a_longer_log_reuses_the_snapshots_and_a_different_one_rebuilds() -> None:
    events, ids = real_events()
    index = FoldIndex("r", ids, every=4)
    part = events[: len(events) // 2]
    index.state_at(part, part[-1].seq)
    last = events[-1].seq
    assert everything(index.state_at(events, last)) == everything(
        RunState.from_events("r", events, ids))
    other = [ev._replace(seq=ev.seq) for ev in events[:3]] + [
        ev._replace(seq=ev.seq + 1000) for ev in events[3:]]
    seq = other[-1].seq
    assert everything(index.state_at(other, seq)) == everything(
        RunState.from_events("r", other, ids))


def test_a_copy_shares_no_small_value_the_fold_edits_in_place() -> None:
    events, ids = real_events()
    original = RunState.from_events("r", events, ids)
    approved = next(s for s in original.steps.values() if s.decided)
    before = everything(original)
    copy = copy_state(original)
    mine = copy.steps[approved.step_id]  # cloned on first look-up, as the fold does
    assert mine is not approved and mine.decided == approved.decided
    mine.decided["action"] = "changed in place"
    assert everything(original) == before
