"""Graphs that grow while they run (DESIGN §17): a ``for_each`` step expands into instances
``ID[0]``, ``ID[1]``, ... once its list is known, recorded by ONE ``steps_added`` event; each
instance is an ordinary step for every rule."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import PermanentError, ToolError
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import RunStatus

from .conftest import Harness, chain_of

pytestmark = pytest.mark.anyio
K = EventKind


def fan(source: str = "{{ steps.split.output }}", **extra: Any) -> dict[str, Any]:
    return {"id": "each", "tool": "work", "for_each": source,
            "args": {"tag": "{{ item }}", **extra.pop("args", {})}, **extra}


def split(items: Any) -> dict[str, Any]:
    return {"id": "split", "tool": "make", "args": {"tag": "split", "items": items}}


def join() -> dict[str, Any]:
    return {"id": "join", "tool": "work", "args": {"tag": "join", "got": "{{ steps.each.output }}"}}


def make_tools(h: Harness, **work: Any) -> None:
    async def make(tag: str, items: Any) -> Any:
        return items

    h.toolbox.tool(make)
    h.tracked("work", **work)


def added(rec: Any) -> list[Any]:
    return [e for e in rec.events if e.kind == K.STEPS_ADDED]


async def test_instances_run_and_the_output_is_their_outputs_in_item_order(h: Harness) -> None:
    make_tools(h)
    chain = chain_of(split(["a", "b", "c"]), fan(), join())
    _run, result, rec = await h.run(chain)
    assert result.status == RunStatus.SUCCEEDED
    assert [o["tag"] for o in result.outputs["each"]] == ["a", "b", "c"]
    assert [s for s in result.outputs if s.startswith("each[")] == ["each[0]", "each[1]",
                                                                   "each[2]"]
    assert result.outputs["join"]["got"] == result.outputs["each"]
    (ev,) = added(rec)  # ONE event grows the graph, all or nothing
    assert ev.step_id == "each"
    assert ev.payload["ids"] == ["each[0]", "each[1]", "each[2]"]
    assert ev.payload["items"] == ["a", "b", "c"]
    # join started after every instance ended
    log = h.log
    assert log.index(("start", "join")) > max(log.index(("end", t)) for t in "abc")


async def test_an_empty_list_succeeds_with_an_empty_list(h: Harness) -> None:
    make_tools(h)
    _run, result, rec = await h.run(chain_of(split([]), fan(), join()))
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["each"] == []
    assert result.outputs["join"]["got"] == []
    assert [e.payload["ids"] for e in added(rec)] == [[]]


@pytest.mark.parametrize(("value", "says"), [
    ({"a": 1}, "is an object"), ("abc", "is a string"), (None, "is null"), (3, "is a number")])
async def test_a_value_that_is_not_a_list_fails_the_step_naming_its_type(
        h: Harness, value: Any, says: str) -> None:
    make_tools(h)
    run, result, rec = await h.run(chain_of(split(value), fan(), join()))
    assert result.status == RunStatus.FAILED
    st = run.state.steps["each"]
    assert st.status == StepStatus.FAILED and st.error_kind == "invalid_input"
    assert says in (st.error or "") and "{{ steps.split.output }}" in (st.error or "")
    assert added(rec) == []  # nothing half-expanded
    assert run.state.steps["join"].status == StepStatus.SKIPPED


async def test_more_items_than_the_limit_fails_naming_the_count_and_the_limit(
        h: Harness) -> None:
    make_tools(h)
    run, result, rec = await h.run(chain_of(split(list(range(10_001))), fan()))
    assert result.status == RunStatus.FAILED
    error = run.state.steps["each"].error or ""
    assert "10,001 items" in error and "at most 10,000" in error
    assert added(rec) == [] and h.starts() == []


async def test_item_fields_index_and_a_condition_per_instance(h: Harness) -> None:
    make_tools(h)
    items = [{"name": "x", "keep": True}, {"name": "y", "keep": False}, {"name": "z", "keep": True}]
    step = fan(args={"tag": "{{ item.name }}-{{ index }}"}, when="item.keep")
    run, result, _ = await h.run(chain_of(split(items), step, join()))
    assert result.status == RunStatus.SUCCEEDED
    assert h.starts() == ["x-0", "z-2", "join"]
    assert run.state.steps["each[1]"].status == StepStatus.SKIPPED
    # an instance its condition skipped leaves no entry
    assert [o["tag"] for o in result.outputs["each"]] == ["x-0", "z-2"]


async def test_as_names_the_item(h: Harness) -> None:
    make_tools(h)
    step = fan(args={"tag": "{{ row }}"})
    step["as"] = "row"
    _, result, _ = await h.run(chain_of(split(["p", "q"]), step))
    assert [o["tag"] for o in result.outputs["each"]] == ["p", "q"]


async def test_max_concurrency_caps_instances_in_flight(h: Harness) -> None:
    make_tools(h, yields=5)
    step = fan(max_concurrency=2)
    _, result, _ = await h.run(chain_of(split(list("abcdefg")), step, max_concurrency=8))
    assert result.status == RunStatus.SUCCEEDED
    assert h.max_active == 2


async def test_the_runs_cap_still_holds_over_instances(h: Harness) -> None:
    make_tools(h, yields=5)
    _, result, _ = await h.run(chain_of(split(list("abcdefg")), fan(), max_concurrency=3))
    assert result.status == RunStatus.SUCCEEDED and h.max_active == 3


async def test_each_instance_asks_for_confirmation_with_its_own_args(h: Harness) -> None:
    make_tools(h, side_effects=True, requires_confirmation=True)
    run = await h.runtime.start(chain_of(split(["a", "b", "c"]), fan()))
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED
    assert result.waiting == {f"each[{i}]": "waiting_confirmation" for i in range(3)}
    assert [run.state.steps[f"each[{i}]"].args for i in range(3)] == [
        {"tag": "a"}, {"tag": "b"}, {"tag": "c"}]
    await run.approve("each[1]")
    await run.wait()
    assert h.starts() == ["b"]  # only the approved instance ran, with its own args
    await run.approve("each[0]", args={"tag": "A"})  # edited: it runs what was approved
    await run.wait()
    await run.reject("each[2]", "not this one")
    result = await run.wait()
    assert h.starts() == ["b", "A"]
    assert result.status == RunStatus.FAILED  # a rejected instance fails its step
    assert run.state.steps["each"].status == StepStatus.FAILED
    assert "each[2] (rejected)" in (run.state.steps["each"].error or "")


async def test_approve_all_decides_every_waiting_instance_each_bound_to_its_args(
        h: Harness) -> None:
    make_tools(h, side_effects=True, requires_confirmation=True)
    run = await h.runtime.start(chain_of(split(["a", "b", "c"]), fan()))
    await run.wait()
    decided = await run.approve_all("each", note="all fine")
    assert decided == ["each[0]", "each[1]", "each[2]"]
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    approvals = [e for e in h.store.load_events(run.run_id) if e.kind == K.STEP_APPROVED]
    assert [(e.step_id, e.payload["args_hash"]) for e in approvals] == [
        (f"each[{i}]", run.state.steps[f"each[{i}]"].args_hash) for i in range(3)]
    assert len({e.payload["args_hash"] for e in approvals}) == 3


async def test_a_failing_instance_under_fail_fast_compensates_the_others_in_reverse(
        h: Harness) -> None:
    undone: list[str] = []

    async def make(tag: str, items: Any) -> Any:
        return items

    def undo(tag: str) -> None:
        undone.append(tag)

    async def work(tag: str) -> str:
        if tag == "bad":
            await anyio.sleep(0.02)
            raise PermanentError("no")
        return tag

    h.toolbox.tool(make)
    h.toolbox.tool(undo, side_effects=True, idempotent=True)
    h.toolbox.tool(work, side_effects=True, idempotent=True,
                   compensate=("undo", {"tag": "{{ output }}"}))
    chain = chain_of(split(["a", "bad", "c"]), fan(args={"tag": "{{ item }}"}))
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.ROLLED_BACK
    completed = [s for s in run.state.completion if s.startswith("each[")]
    assert sorted(completed) == ["each[0]", "each[2]"]
    assert undone == [run.state.steps[s].output for s in reversed(completed)]


async def test_on_failure_continue_runs_the_other_instances_then_fails_the_step(
        h: Harness) -> None:
    async def make(tag: str, items: Any) -> Any:
        return items

    async def work(tag: str, got: Any = None) -> str:
        if tag == "bad":
            raise PermanentError("no")
        return tag

    h.toolbox.tool(make)
    h.toolbox.tool(work)
    chain = chain_of(split(["a", "bad", "c"]), fan(), join(), on_failure="continue")
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    steps = run.state.steps
    assert [steps[f"each[{i}]"].status for i in range(3)] == [
        StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.SUCCEEDED]
    assert steps["each"].status == StepStatus.FAILED
    assert steps["join"].status == StepStatus.SKIPPED


async def test_an_instance_retries_by_its_steps_policy(h: Harness) -> None:
    calls: list[str] = []

    async def make(tag: str, items: Any) -> Any:
        return items

    async def work(tag: str) -> str:
        calls.append(tag)
        if tag == "b" and calls.count("b") == 1:
            raise ToolError("flaky", kind="transient")
        return tag

    h.toolbox.tool(make)
    h.toolbox.tool(work)
    step = fan(retry={"max_attempts": 3, "delay_s": 0.0})
    run, result, _ = await h.run(chain_of(split(["a", "b"]), step))
    assert result.status == RunStatus.SUCCEEDED
    assert run.state.steps["each[1]"].attempts == 2 and calls.count("b") == 2
    assert result.outputs["each"] == ["a", "b"]


async def test_an_unsafe_instance_whose_outcome_is_unknown_is_in_doubt_for_a_person(
        h: Harness) -> None:
    async def make(tag: str, items: Any) -> Any:
        return items

    async def work(tag: str) -> str:
        if tag == "b":
            raise TimeoutError("lost the answer")
        return tag

    h.toolbox.tool(make)
    h.toolbox.tool(work, side_effects=True)
    run = await h.runtime.start(chain_of(split(["a", "b"]), fan()))
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED and result.waiting == {"each[1]": "in_doubt"}
    assert run.state.steps["each"].status == StepStatus.RUNNING
    await run.resolve("each[1]", output="b")
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED and result.outputs["each"] == ["a", "b"]


async def test_a_for_each_inside_a_sub_chain_and_a_sub_chain_as_the_tool(h: Harness) -> None:
    from chainlab import Chain

    make_tools(h)
    inner = Chain.from_dict({"name": "inner", "steps": [
        {"id": "one", "tool": "work", "args": {"tag": "{{ context.x }}-1"}},
        {"id": "two", "tool": "work", "args": {"tag": "{{ steps.one.output.tag }}-2"}}],
        "output": "{{ steps.two.output.tag }}"})
    nested = Chain.from_dict({"name": "nested", "steps": [
        {"id": "s", "tool": "make", "args": {"tag": "s", "items": "{{ context.items }}"}},
        {"id": "m", "tool": "work", "for_each": "{{ steps.s.output }}",
         "args": {"tag": "in-{{ item }}"}}]})
    h.runtime.chains.update({"inner": inner, "nested": nested})
    chain = chain_of(
        split(["p", "q"]),
        {"id": "each", "tool": "chain:inner", "for_each": "{{ steps.split.output }}",
         "args": {"x": "{{ item }}"}},
        {"id": "sub", "tool": "chain:nested", "args": {"items": ["u", "v"]}})
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.SUCCEEDED, run.state.failure
    assert result.outputs["each"] == ["p-1-2", "q-1-2"]
    assert run.state.steps["each[1]/two"].output == {"tag": "q-1-2"}
    assert [o["tag"] for o in result.outputs["sub"]["m"]] == ["in-u", "in-v"]
    assert "sub/m[1]" in run.state.steps


async def test_a_for_each_over_the_context(h: Harness) -> None:
    make_tools(h)
    chain = chain_of(fan("{{ context.rows }}"))
    _, result, _ = await h.run(chain, {"rows": ["1", "2"]})
    assert [o["tag"] for o in result.outputs["each"]] == ["1", "2"]


async def test_instances_rank_as_their_step_under_critical_path(h: Harness) -> None:
    make_tools(h)
    chain = chain_of(split(["a", "b"]), fan(), join(), priority="critical_path")
    _, result, _ = await h.run(chain)
    assert result.status == RunStatus.SUCCEEDED and h.starts() == ["a", "b", "join"]


async def test_what_if_replays_a_grown_graph(h: Harness) -> None:
    from chainlab import whatif

    make_tools(h)
    run, _result, _ = await h.run(chain_of(split(list("abcd")), fan(), join()))
    schedule = whatif(run, max_concurrency=1)
    rows = list(schedule.frame["step_id"])
    assert rows[:1] == ["split"] and rows[-1] == "join"
    assert sorted(rows[1:-1]) == [f"each[{i}]" for i in range(4)]  # the step itself: no slot


async def test_state_at_folds_the_growth(h: Harness) -> None:
    make_tools(h)
    run, _result, rec = await h.run(chain_of(split(["a", "b"]), fan()))
    grown = next(e.seq for e in rec.events if e.kind == K.STEPS_ADDED)
    before, after = run.state_at(grown - 1), run.state_at(grown)
    assert "each[0]" not in before.steps
    assert after.children["each"] == ["each[0]", "each[1]"]
    assert after.steps["each"].status == StepStatus.RUNNING


async def test_runtime_approve_all_decides_a_stored_run_nobody_drives(tmp_path: Any) -> None:
    from chainlab import Toolbox
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    tb = Toolbox("t")
    made: list[str] = []

    @tb.tool
    def make(tag: str, items: list[str]) -> list[str]:
        return items

    @tb.tool(side_effects=True, requires_confirmation=True)
    def work(tag: str) -> str:
        made.append(tag)
        return tag

    db = tmp_path / "a.db"
    async with Runtime(tb, SQLiteStore(db)) as first:
        run = await first.start(chain_of(split(["a", "b"]), fan()))
        assert (await run.wait()).status == RunStatus.SUSPENDED
    async with Runtime(tb, SQLiteStore(db)) as second:  # nobody drives it now
        approved = await second.approve_all(run.run_id, "each", by="ops")
        assert approved == ["each[0]", "each[1]"]
        result = await second.get_run(run.run_id).wait()
        assert result.status == RunStatus.SUCCEEDED and made == ["a", "b"]
        assert await second.approve_all(run.run_id, "each") == []


async def test_the_gantt_groups_instances_under_their_step(h: Harness) -> None:
    from chainlab.timeline.plot import _step_order

    make_tools(h)
    run, _, _ = await h.run(chain_of(split(["a", "b"]), fan(), join()))
    assert _step_order(run.record, run.state) == ["split", "each", "each[0]", "each[1]", "join"]
    frame = run.attempts()
    assert list(frame[frame.step_id.str.startswith("each")].step_id) == ["each[0]", "each[1]"]
