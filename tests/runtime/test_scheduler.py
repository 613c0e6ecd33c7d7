"""Scheduler kernel: tables of graphs with exact outcomes (DESIGN §4)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab.runtime import RunStatus
from chainlab.testing import RecordingTool

from .conftest import Harness, S, chain_of

pytestmark = pytest.mark.anyio


GRAPHS = {
    # name: (steps, {max_concurrency: expected start order})
    "chain": (
        [S("a"), S("b", ["a"]), S("c", ["b"]), S("d", ["c"])],
        {1: "abcd", 2: "abcd", 8: "abcd"},
    ),
    "diamond": (
        [S("a"), S("b", ["a"]), S("c", ["a"]), S("d", ["b", "c"])],
        {1: "abcd", 2: "abcd", 8: "abcd"},
    ),
    "fan_out_in": (
        [
            S("r"),
            S("x1", ["r"]),
            S("x2", ["r"]),
            S("x3", ["r"]),
            S("x4", ["r"]),
            S("j", ["x1", "x2", "x3", "x4"]),
        ],
        {
            1: ["r", "x1", "x2", "x3", "x4", "j"],
            2: ["r", "x1", "x2", "x3", "x4", "j"],
            8: ["r", "x1", "x2", "x3", "x4", "j"],
        },
    ),
    # declared out of topological order: release order is declaration order among READY
    "declared_late_root": (
        [S("b", ["a"]), S("c"), S("a"), S("d", ["c"])],
        # c and a are ready first; with one slot a's completion releases b, declared
        # before d, so b goes first; with two, c's early end releases d while a runs
        {1: "cabd", 2: "cadb", 8: "cadb"},
    ),
    "disconnected": (
        [S("a1"), S("a2", ["a1"]), S("b1"), S("b2", ["b1"]), S("c1")],
        # one slot: a2 (declared 2nd) beats b1 once a1 is done; two slots: a1/b1 start,
        # their successors a2/b2 are declared before c1; eight: every root starts first
        {
            1: ["a1", "a2", "b1", "b2", "c1"],
            2: ["a1", "b1", "a2", "b2", "c1"],
            8: ["a1", "b1", "c1", "a2", "b2"],
        },
    ),
}


@pytest.mark.parametrize("concurrency", [1, 2, 8])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
async def test_start_order_and_dependencies(h: Harness, graph: str, concurrency: int) -> None:
    steps, expected = GRAPHS[graph]
    h.tracked("work")
    chain = chain_of(*steps, max_concurrency=concurrency)
    _run, result, _ = await h.run(chain)
    assert result.status == RunStatus.SUCCEEDED
    assert h.starts() == list(expected[concurrency])
    # no step starts before all its dependencies ended
    pos = {("end", tag): i for i, (kind, tag) in enumerate(h.log) if kind == "end"}
    for i, (kind, tag) in enumerate(h.log):
        if kind == "start":
            for dep in chain.dependencies()[tag]:
                assert pos[("end", dep)] < i, f"{tag} started before {dep} ended"
    assert h.max_active <= concurrency


@pytest.mark.parametrize("concurrency,expected_max", [(1, 1), (2, 2), (3, 3), (8, 4)])
async def test_concurrency_limit_is_reached_and_never_exceeded(
    h: Harness, concurrency: int, expected_max: int
) -> None:
    h.tracked("work", yields=3)
    chain = chain_of(S("r"), *(S(f"x{i}", ["r"]) for i in range(4)), max_concurrency=concurrency)
    await h.run(chain)
    assert h.max_active == expected_max


async def test_sequential_mode_runs_one_at_a_time_in_declaration_order(h: Harness) -> None:
    h.tracked("work", yields=3)
    chain = chain_of(
        S("b", ["a"]), S("a"), S("c"), S("d", ["a", "c"]), mode="sequential", max_concurrency=8
    )
    await h.run(chain)
    assert h.max_active == 1
    assert h.starts() == ["a", "b", "c", "d"]


async def test_qtable_chain_overlaps_middle_steps_and_creates_last(h: Harness) -> None:
    timeline = iter(range(10_000))
    tools = {
        name: RecordingTool(0.02, timeline=timeline, name=name)  # type: ignore[arg-type]
        for name in ("split", "estimate", "gantt", "read_schema", "create")
    }
    for name, t in tools.items():
        t.register(h.toolbox, name, side_effects=(name == "create"))
    chain = chain_of(
        {"id": "split", "tool": "split", "args": {"request": "{{ context.request }}"}},
        {"id": "estimate", "tool": "estimate", "args": {"tasks": "{{ steps.split.output }}"}},
        {"id": "gantt", "tool": "gantt", "args": {"tasks": "{{ steps.split.output }}"}},
        {"id": "read_schema", "tool": "read_schema", "depends_on": ["split"]},
        {
            "id": "create",
            "tool": "create",
            "args": {
                "effort": "{{ steps.estimate.output }}",
                "plan": "{{ steps.gantt.output }}",
                "schema": "{{ steps.read_schema.output }}",
            },
        },
    )
    _run, result, _ = await h.run(chain, {"request": "approval system"})
    assert result.ok
    calls = {name: t.calls[0] for name, t in tools.items()}
    middle = ["estimate", "gantt", "read_schema"]
    for a in middle:
        assert calls[a].start > calls["split"].end
        for b in middle:
            if a != b:
                assert RecordingTool.overlapping(calls[a], calls[b]), (a, b)
        assert calls["create"].start > calls[a].end
    assert calls["create"].args["effort"]["tasks"] == {"request": "approval system"}


async def test_serial_keys_never_overlap_but_other_keys_do(h: Harness) -> None:
    h.tracked("write", yields=3, serial_key="table:{table}")
    steps = [
        S(f"w{i}", tool="write", args={"table": "t1" if i % 2 == 0 else "t2"}) for i in range(6)
    ]
    await h.run(chain_of(*steps, max_concurrency=8))
    spans: dict[str, list[int]] = {}
    for i, (_kind, tag) in enumerate(h.log):
        spans.setdefault(tag, []).append(i)
    same = [["w0", "w2", "w4"], ["w1", "w3", "w5"]]
    for group in same:
        for a in group:
            for b in group:
                if a < b:
                    sa, sb = spans[a], spans[b]
                    assert sa[1] < sb[0] or sb[1] < sa[0], f"{a} overlaps {b}"
    assert h.max_active == 2  # one per table


async def test_parallel_safe_false_serialises_a_tool(h: Harness) -> None:
    h.tracked("work", yields=3, parallel_safe=False)
    await h.run(chain_of(*(S(f"s{i}") for i in range(4)), max_concurrency=4))
    assert h.max_active == 1


async def test_pools_never_exceed_capacity(h: Harness) -> None:
    h.tracked("llm_call", yields=3, resources={"llm": 1})
    h.tracked("work", yields=3)
    steps = [S(f"l{i}", tool="llm_call") for i in range(6)] + [S(f"w{i}") for i in range(2)]
    chain = chain_of(*steps, max_concurrency=8, pools={"llm": 2})
    seen_llm = 0
    peak = 0

    async def observe() -> None:
        nonlocal seen_llm, peak
        while True:
            # count llm steps running right now from the run state
            running = [
                s for s, st in run.steps.items() if st.status == "running" and s.startswith("l")
            ]
            peak = max(peak, len(running))
            seen_llm += bool(running)
            await anyio.sleep(0)

    run = await h.runtime.start(chain)
    async with anyio.create_task_group() as tg:
        tg.start_soon(observe)
        result = await run.wait()
        tg.cancel_scope.cancel()
    assert result.ok
    assert peak == 2
    assert seen_llm > 0
    # pool waits hold no slot: the two plain steps were not held back by the llm queue
    starts = h.starts()
    assert starts.index("w0") < starts.index("l2")


async def test_step_waiting_for_a_key_holds_no_slot(h: Harness) -> None:
    h.tracked("write", yields=5, serial_key="k")
    h.tracked("work", yields=1)
    # concurrency 2: w1 waits for the key held by w0; the free slot goes to x
    chain = chain_of(S("w0", tool="write"), S("w1", tool="write"), S("x"), max_concurrency=2)
    await h.run(chain)
    assert h.starts() == ["w0", "x", "w1"]


async def test_fail_fast_stops_releasing_and_skips_downstream(h: Harness) -> None:
    h.tracked("work", yields=2)

    async def boom(tag: str = "") -> None:
        raise ValueError("nope")

    h.toolbox.tool(boom, retry={"max_attempts": 1})
    chain = chain_of(
        S("a"),
        S("bad", ["a"], tool="boom"),
        S("after", ["bad"]),
        S("slow"),
        S("late", ["slow"]),
        max_concurrency=1,
    )
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    st = {k: (v.status, v.reason) for k, v in run.steps.items()}
    assert st["bad"][0] == "failed"
    assert st["after"] == ("skipped", "upstream_failed")
    # released before the failure: ran; never released: cancelled
    assert st["a"][0] == "succeeded"
    assert st["late"][0] == "cancelled"
    assert run.steps["bad"].error_kind == "execution_failed"
    assert "ValueError: nope" in run.steps["bad"].error


async def test_continue_runs_independent_branches(h: Harness) -> None:
    h.tracked("work")

    async def boom(tag: str = "") -> None:
        raise ValueError("nope")

    h.toolbox.tool(boom, retry={"max_attempts": 1})
    chain = chain_of(
        S("bad", tool="boom"),
        S("after", ["bad"]),
        S("after2", ["after"]),
        S("other"),
        S("other2", ["other"]),
        on_failure="continue",
    )
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    assert {k: str(v.status) for k, v in run.steps.items()} == {
        "bad": "failed",
        "after": "skipped",
        "after2": "skipped",
        "other": "succeeded",
        "other2": "succeeded",
    }
    assert run.steps["after2"].reason == "upstream_failed"


async def test_when_condition_skips_and_dependants_still_run(h: Harness) -> None:
    h.tracked("work")
    chain = chain_of(
        S("check", args={"n": 3}),
        S("big", when="{{ steps.check.output.n }} > 5"),
        S("small", when="steps.check.output.n <= 5 and not false"),
        S("join", ["big", "small"]),
    )
    run, result, _ = await h.run(chain)
    assert result.ok
    assert (run.steps["big"].status, run.steps["big"].reason) == ("skipped", "condition")
    assert run.steps["small"].status == "succeeded"
    assert run.steps["join"].status == "succeeded"


async def test_args_resolution_keeps_types_and_interpolates_text(h: Harness) -> None:
    h.tracked("work")
    chain = chain_of(
        S("a", args={"n": 3, "items": [1, 2]}, save_as="first"),
        S(
            "b",
            args={
                "n": "{{ steps.a.output.n }}",
                "items": "{{ first.items }}",
                "text": "got {{ memory.first.n }} and {{ first.items }} for {{ context.who }}",
                "nested": {"deep": ["{{ first.items[1] }}"]},
            },
        ),
    )
    run, _result, _ = await h.run(chain, {"who": "ann"})
    out = run.outputs["b"]
    assert out["n"] == 3 and out["items"] == [1, 2]
    assert out["text"] == "got 3 and [1, 2] for ann"
    assert out["nested"] == {"deep": [2]}
    assert run.memory["first"]["n"] == 3


async def test_reference_missing_at_run_time_fails_with_invalid_input(h: Harness) -> None:
    h.tracked("work")
    chain = chain_of(S("a"), S("b", args={"x": "{{ steps.a.output.nope }}"}))
    run, result, _ = await h.run(chain)
    assert result.status == RunStatus.FAILED
    assert run.steps["b"].error_kind == "invalid_input"
    assert "no key 'nope'" in run.steps["b"].error


async def test_context_keys_are_checked_at_start(h: Harness) -> None:
    from chainlab import PlanError

    h.tracked("work")
    with pytest.raises(PlanError) as err:
        await h.runtime.start(chain_of(S("a", args={"x": "{{ context.missing }}"})), {"other": 1})
    assert err.value.codes == ["unknown_reference"]


async def test_event_seq_is_contiguous_and_stored(h: Harness) -> None:
    h.tracked("work")
    run, _result, rec = await h.run(chain_of(S("a"), S("b", ["a"])))
    stored = h.store.load_events(run.run_id)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert [e.kind for e in stored] == [
        "run_started",
        "step_ready",
        "step_started",
        "step_succeeded",
        "step_ready",
        "step_started",
        "step_succeeded",
        "run_succeeded",
    ]
    assert rec.events == stored[1:]  # subscribed right after start: live == stored


async def test_events_async_stream_replays_history_then_live(h: Harness) -> None:
    h.tracked("work", yields=2)
    run = await h.runtime.start(chain_of(S("a"), S("b", ["a"])))
    kinds = [ev.kind async for ev in run.events()]
    assert kinds[0] == "run_started" and kinds[-1] == "run_succeeded"
    assert kinds.count("step_succeeded") == 2


async def test_subscriber_that_raises_is_dropped_and_run_goes_on(h: Harness) -> None:
    h.tracked("work")
    run = await h.runtime.start(chain_of(S("a"), S("b", ["a"])))
    calls = []

    def bad(ev: Any) -> None:
        calls.append(ev.kind)
        raise RuntimeError("widget bug")

    run.subscribe(bad)
    result = await run.wait()
    assert result.ok
    assert len(calls) == 1


async def test_unsafe_output_is_an_execution_failure_naming_the_step(h: Harness) -> None:
    async def weird(tag: str = "") -> Any:
        return {"when": object()}

    async def typed(tag: str = "") -> int:
        return "not a number"  # type: ignore[return-value]

    h.toolbox.tool(weird, retry={"max_attempts": 1})
    h.toolbox.tool(typed, retry={"max_attempts": 1})
    run, _result, _ = await h.run(
        chain_of(S("w", tool="weird"), S("t", tool="typed"), on_failure="continue")
    )
    error = run.steps["w"].error
    assert "step 'w'" in error and "is refused (not JSON data" in error
    assert "when" in run.steps["w"].error
    assert "return annotation" in run.steps["t"].error


async def test_sync_tools_run_in_threads(h: Harness) -> None:
    import threading

    main = threading.get_ident()
    seen = []

    def blocking(tag: str = "") -> str:
        seen.append(threading.get_ident())
        return tag

    h.toolbox.tool(blocking)
    _run, result, _ = await h.run(chain_of(S("a", tool="blocking"), S("b", tool="blocking")))
    assert result.outputs == {"a": "a", "b": "b"}
    assert main not in seen
