"""Usage per step (issue 31): what a tool reports through its context, or an OpenAI-style
response it returns, is part of the attempt's end event, folded into the step and the run,
and shown by the JSON view."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import CallContext, Chain, Toolbox, TransientError
from chainlab.events import RunState
from chainlab.events.usage import normalize_usage, total_usage
from chainlab.render.json import run_dict
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock
from chainlab.tools.context import response_usage

pytestmark = pytest.mark.anyio


def llm_tools() -> Toolbox:
    tools = Toolbox("usage")
    calls = {"flaky": 0}

    @tools.tool
    def ask(question: str, ctx: CallContext) -> str:
        ctx.report_usage(input_tokens=100, output_tokens=20, cost=0.002, model="m-small")
        ctx.report_usage(input_tokens=10, cost=0.001, cache_hits=1)
        return question.upper()

    @tools.tool
    def flaky(ctx: CallContext) -> str:
        calls["flaky"] += 1
        ctx.report_usage(input_tokens=5, output_tokens=5, cost=0.01)
        if calls["flaky"] == 1:
            raise TransientError("rate limited")
        return "ok"

    @tools.tool
    def openai_like() -> dict[str, Any]:
        return {"id": "cmpl-1", "model": "gpt-x", "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}

    @tools.tool
    def free(x: int = 1) -> int:
        return x

    return tools


CHAIN = Chain.from_dict({"name": "u", "steps": [
    {"id": "a", "tool": "ask", "args": {"question": "hi"}},
    {"id": "f", "tool": "flaky", "retry": {"max_attempts": 2, "delay_s": 0}},
    {"id": "o", "tool": "openai_like"},
    {"id": "n", "tool": "free"},
]})


async def test_usage_is_recorded_per_attempt_and_folded() -> None:
    store = MemoryStore()
    runtime = Runtime(llm_tools(), store, clock=ManualClock())
    run = await runtime.start(CHAIN)
    result = await run.wait()
    assert result.status == "succeeded"
    st = run.steps
    assert st["a"].usage == {"input_tokens": 110, "output_tokens": 20, "tokens": 130,
                             "cost": 0.003, "models": ["m-small"], "cache_hits": 1}
    # the failed attempt cost something too: both attempts count, each once
    assert st["f"].usage == {"input_tokens": 10, "output_tokens": 10, "tokens": 20,
                             "cost": 0.02}
    assert st["o"].usage == {"input_tokens": 7, "output_tokens": 3, "tokens": 10,
                             "models": ["gpt-x"]}
    assert st["n"].usage is None
    assert run.state.usage == {"input_tokens": 127, "output_tokens": 33, "tokens": 160,
                               "cost": 0.023, "models": ["m-small", "gpt-x"], "cache_hits": 1}
    # the stored log folds to the same totals (resume, views and history are one path)
    again = RunState.from_events(run.run_id, store.load_events(run.run_id))
    assert again.usage == run.state.usage
    view = run_dict(store.get_run(run.run_id), again)
    assert view["usage"] == run.state.usage
    assert view["steps"]["f"]["usage"]["cost"] == 0.02
    assert [a["usage"] for a in view["steps"]["f"]["attempts"]] == [
        {"input_tokens": 5, "output_tokens": 5, "tokens": 10, "cost": 0.01}] * 2
    assert view["steps"]["n"]["usage"] is None


def test_report_usage_refuses_what_is_not_a_number() -> None:
    ctx = CallContext("r", "s", 1, "", 0, "call", {})
    with pytest.raises(ValueError, match="'cost' must be a finite number"):
        ctx.report_usage(cost="cheap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'input_tokens'"):
        ctx.report_usage(input_tokens=True)  # type: ignore[arg-type]
    CallContext("r", "s", 1, "").report_usage(cost=1.0)  # outside a run: recorded nowhere


def test_response_usage_reads_openai_shapes() -> None:
    class U:
        prompt_tokens = 3
        completion_tokens = 4

    class R:
        usage = U()
        model = "m"

    assert response_usage(R()) == {"input_tokens": 3, "output_tokens": 4, "tokens": 7,
                                   "model": "m"}
    assert response_usage({"usage": {"input_tokens": 1, "output_tokens": 2}}) == {
        "input_tokens": 1, "output_tokens": 2, "tokens": 3}
    assert response_usage({"usage": "lots"}) is None
    assert response_usage("text") is None
    assert response_usage({"usage": {"total": 3}}) is None


def test_totals_add_numbers_and_collect_models() -> None:
    assert total_usage([None, {"cost": 0.1, "model": "a"}, {"cost": 0.2, "model": "a"}]) == {
        "cost": 0.3, "models": ["a"]}
    assert normalize_usage({"input_tokens": 2, "model": None}) == {"input_tokens": 2,
                                                                    "tokens": 2}


async def test_whatif_reports_the_cost_of_a_schedule_next_to_its_makespan() -> None:
    from chainlab.timeline import schedule_of, whatif

    runtime = Runtime(llm_tools(), MemoryStore(), clock=ManualClock())
    run = await runtime.start(CHAIN)
    await run.wait()
    real = schedule_of(run)
    other = whatif(run, priority="declaration", max_concurrency=1)
    assert real.cost == other.cost == 0.023 and real.tokens == other.tokens == 160
    assert list(other.frame["cost"].fillna(0)) == [0.003, 0.02, 0.0, 0.0]
    assert "cost 0.023" in repr(other)
    estimates = runtime.estimates(CHAIN).set_index("step_id")
    assert estimates.loc["a", "cost"] == 0.003 and estimates.loc["a", "tokens"] == 130
    assert estimates.loc["f", "cost"] == 0.01  # the median of one successful call
