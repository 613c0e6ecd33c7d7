"""Release policy (issue 16): duration estimates, critical-path-first release, what-if
replays on the real scheduler in virtual time."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import Chain, RunOptions, Toolbox, whatif
from chainlab.events import EventKind
from chainlab.plan.schema import RunOptions as Options
from chainlab.runtime import Runtime
from chainlab.runtime.engine.compile import compile_chain
from chainlab.runtime.history.estimates import History, estimate, upward_ranks
from chainlab.runtime.history.whatif import simulate
from chainlab.store import MemoryStore
from chainlab.timeline import gantt_compare, schedule_of

pytestmark = pytest.mark.anyio


def toolbox(**durations: float) -> Toolbox:
    tb = Toolbox("policy")
    for name, seconds in durations.items():
        async def fn(tag: str = "", _s: float = seconds) -> str:
            await anyio.sleep(_s)
            return tag

        tb.tool(fn, name=name)
    return tb


def chain(steps: list[tuple[str, str, list[str]]], **options: Any) -> Chain:
    return Chain.from_dict({"name": "p", "options": options, "steps": [
        {"id": sid, "tool": tool, "depends_on": deps, "args": {"tag": sid}}
        for sid, tool, deps in steps]})


def graph_of(c: Chain, tb: Toolbox) -> Any:
    return compile_chain(c, tb, {}, c.options)


# a long chain declared LAST among short independent steps: declaration order fills both
# slots with the short ones first
LONG_LAST = [("s1", "short", []), ("s2", "short", []), ("s3", "short", []),
             ("s4", "short", []), ("l1", "long", []), ("l2", "long", ["l1"]),
             ("l3", "long", ["l2"])]


@pytest.mark.parametrize(("steps", "seconds", "expected"), [
    (LONG_LAST, {"short": 1.0, "long": 2.0}, ["l1", "s1", "s2", "l2", "s3", "s4", "l3"]),
    ([("a", "short", []), ("b", "long", []), ("c", "short", ["a"])],
     {"short": 1.0, "long": 1.5}, ["a", "b", "c"]),  # a+c (2.0) outranks b (1.5)
    ([("a", "short", []), ("b", "short", [])], {"short": 1.0, "long": 1.0},
     ["a", "b"]),  # ties: declaration order
])
def test_critical_path_release_order_in_virtual_time(steps: list, seconds: dict,
                                                      expected: list[str]) -> None:
    tb = toolbox(short=0, long=0)
    g = graph_of(chain(steps), tb)
    durations = {sid: seconds[tool] for sid, tool, _ in steps}
    slots = simulate(g.nodes, g.top, durations, max_concurrency=2, priority="critical_path")
    assert [s.step_id for s in slots] == expected


def test_critical_path_shortens_the_makespan_where_declaration_order_is_bad() -> None:
    tb = toolbox(short=0, long=0)
    g = graph_of(chain(LONG_LAST), tb)
    durations = {sid: {"short": 1.0, "long": 2.0}[tool] for sid, tool, _ in LONG_LAST}
    by_decl = simulate(g.nodes, g.top, durations, max_concurrency=2)
    by_cp = simulate(g.nodes, g.top, durations, max_concurrency=2, priority="critical_path")
    assert max(s.end for s in by_decl) == 8.0  # shorts first, then the chain of 3 x 2 s
    assert max(s.end for s in by_cp) == 6.0  # = the critical path: the lower bound


def test_upward_rank_of_a_subchain_child_continues_after_its_parent() -> None:
    tb = toolbox(work=0)
    tb.chains["inner"] = chain([("x", "work", []), ("y", "work", ["x"])])
    c = Chain.from_dict({"name": "outer", "steps": [
        {"id": "sub", "tool": "chain:inner"},
        {"id": "after", "tool": "work", "depends_on": ["sub"], "args": {"tag": "a"}}]})
    g = compile_chain(c, tb, tb.chains, c.options)
    ranks = upward_ranks(g.nodes, {"sub/x": 1, "sub/y": 2, "after": 4})
    assert ranks == {"after": 4, "sub/y": 6, "sub/x": 7, "sub": 7}


def test_estimates_prefer_the_step_then_the_tool_then_the_hint_then_the_median() -> None:
    tb = toolbox(short=0, long=0)
    tb.tool(lambda tag="": tag, name="hinted", expected_duration_s=3.0)
    tb.tool(lambda tag="": tag, name="unknown")
    c = chain([("a", "short", []), ("b", "long", []), ("c", "hinted", []),
               ("d", "unknown", [])])
    hist = History()
    hist.by_step[("p", "a")].extend([1.0, 2.0, 9.0])
    hist.by_tool["long"].extend([4.0])
    est = estimate(graph_of(c, tb).nodes, "p", hist)
    assert [(e.step_id, e.median_s, e.source) for e in est.values()] == [
        ("a", 2.0, "step"), ("b", 4.0, "tool"), ("c", 3.0, "hint"), ("d", 3.0, "default")]
    assert est["a"].p90_s == 9.0


async def test_the_runtime_learns_durations_and_records_its_policy() -> None:
    tb = toolbox(short=0.01, long=0.05)
    runtime = Runtime(tb, MemoryStore())
    c = chain(LONG_LAST, max_concurrency=2)
    first = await runtime.start(c)
    await first.wait()
    second = await runtime.start(c)
    await second.wait()
    started = [e.payload for r in (first, second) for e in r.event_list()
               if e.kind == EventKind.RUN_STARTED]
    assert started[0]["priority"] == "declaration"  # nothing known yet
    assert started[1]["priority"] == "critical_path"  # learned from the first run
    assert started[1]["estimates"]["l1"] > started[1]["estimates"]["s1"]
    real = [s for s in schedule_of(second).frame["step_id"]]
    assert real[0] == "l1"  # the long chain starts first now
    pinned = await runtime.start(c, options=RunOptions(priority="declaration"))
    await pinned.wait()
    assert list(schedule_of(pinned).frame["step_id"])[:2] == ["s1", "s2"]
    await runtime.aclose()


async def test_whatif_of_a_declaration_run_reproduces_its_real_start_order() -> None:
    tb = toolbox(short=0.02, long=0.07)
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(LONG_LAST, max_concurrency=2, priority="declaration"))
    await run.wait()
    real = list(schedule_of(run).frame["step_id"])
    replay = whatif(run, priority="declaration")
    assert list(replay.frame["step_id"]) == real
    faster = whatif(run, priority="critical_path")
    assert faster.frame["step_id"].iloc[0] == "l1"
    assert faster.makespan < replay.makespan
    fig = gantt_compare(replay, faster)
    assert len(fig.axes) == 2 and fig._repr_png_()[:4] == b"\x89PNG"
    await runtime.aclose()


async def test_a_resumed_run_keeps_its_recorded_release_order() -> None:
    store = MemoryStore()
    tb = Toolbox("hints")  # no history: the tools' hints give the estimates
    tb.tool(lambda tag="": tag, name="short", expected_duration_s=1.0)
    tb.tool(lambda tag="": tag, name="long", expected_duration_s=2.0)
    c = chain(LONG_LAST, max_concurrency=1, priority="critical_path")
    tb.tool(lambda tag="": tag, name="gate", requires_confirmation=True)
    c = Chain.from_dict({**c.to_dict(), "steps": [
        {"id": "g", "tool": "gate", "args": {"tag": "g"}},
        *[{**s, "depends_on": [*s.get("depends_on", []), "g"]} for s in c.to_dict()["steps"]]]})
    a = Runtime(tb, store)
    run = await a.start(c)
    assert (await run.wait()).suspended
    await a.aclose()
    b = Runtime(tb, store)
    again = await b.resume(run.run_id)
    await again.approve("g")
    await again.wait()
    starts = [e.step_id for e in again.event_list() if e.kind == EventKind.STEP_STARTED]
    assert starts[:2] == ["g", "l1"]
    await b.aclose()
    assert Options().priority == "auto"


async def test_estimates_frame_updates_after_each_run() -> None:
    tb = toolbox(short=0.01, long=0.03)
    runtime = Runtime(tb, MemoryStore())
    c = chain(LONG_LAST, max_concurrency=4)
    before = runtime.estimates(c)
    assert set(before["source"]) == {"default"} and list(before["samples"]) == [0] * 7
    for expected in (1, 2):
        await (await runtime.start(c)).wait()
        after = runtime.estimates(c)
        assert set(after["source"]) == {"step"}
        assert list(after["samples"]) == [expected] * 7
    row = after.set_index("step_id").loc["l1"]
    assert row["median_s"] >= 0.03 and row["p90_s"] >= row["median_s"]
    await runtime.aclose()
