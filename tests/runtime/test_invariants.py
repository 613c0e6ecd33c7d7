"""Random DAGs with random failures and durations keep the scheduler's invariants."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainlab import Chain, PermanentError, Toolbox
from chainlab.events.status import RUN_TERMINAL, STEP_TERMINAL
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock

ENDS = {"step_succeeded", "step_failed", "step_retry_scheduled", "step_in_doubt", "step_cancelled"}


@st.composite
def dags(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 12))
    steps = []
    for i in range(n):
        deps = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        steps.append(
            {
                "id": f"s{i}",
                "tool": "work",
                "depends_on": [f"s{d}" for d in sorted(deps)],
                "args": {
                    "yields": draw(st.integers(0, 3)),
                    "fail": draw(st.sampled_from(["no"] * 6 + ["once", "always"])),
                },
                "retry": {"max_attempts": draw(st.integers(1, 2)), "delay_s": 1},
            }
        )
    return {
        "name": "random",
        "steps": steps,
        "options": {
            "max_concurrency": draw(st.integers(1, 4)),
            "on_failure": draw(st.sampled_from(["fail_fast", "continue"])),
        },
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=dags())
def test_random_dags_keep_the_invariants(plan: dict[str, Any]) -> None:
    chain = Chain.from_dict(plan)
    toolbox = Toolbox()
    calls: dict[tuple[int, str], int] = {}

    async def tool(yields: int, fail: str) -> int:
        key = (yields, fail)
        calls[key] = calls.get(key, 0) + 1
        for _ in range(yields):
            await anyio.sleep(0)
        if fail == "always" or (fail == "once" and calls[key] == 1):
            raise PermanentError("boom") if fail == "always" else ValueError("flaky")
        return 1

    toolbox.tool(tool, name="work")
    store = MemoryStore()

    async def main() -> Any:
        runtime = Runtime(toolbox, store, clock=ManualClock())
        run = await runtime.start(chain)
        result = await run.wait()
        await runtime.aclose()
        return run, result

    run, result = anyio.run(main)
    events = store.load_events(run.run_id)
    # event seq is contiguous from 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # the run ended, every step is terminal
    assert result.status in RUN_TERMINAL
    assert all(s.status in STEP_TERMINAL for s in run.steps.values()), run.steps
    deps = chain.dependencies()
    succeeded_at: dict[str, int] = {}
    active: set[str] = set()
    limit = chain.options.max_concurrency
    for e in events:
        if e.kind == "step_started":
            for d in deps[e.step_id]:
                assert d in succeeded_at, f"{e.step_id} started before {d} succeeded"
            active.add(e.step_id)
            assert len(active) <= limit
        elif e.kind in ENDS and e.step_id in active:
            active.discard(e.step_id)
        if e.kind == "step_succeeded":
            succeeded_at[e.step_id] = e.seq
    # a step that never started is exactly one that was skipped or cancelled
    started = {e.step_id for e in events if e.kind == "step_started"}
    for sid, s in run.steps.items():
        if sid not in started:
            assert s.status in ("skipped", "cancelled"), (sid, s.status)
