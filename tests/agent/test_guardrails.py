"""Guardrails around an agent's model (DESIGN §24, chainlab.agent.guardrails), over the real
``openai`` client and the scripted server: input (fails the step before the model is asked),
output (the reason goes back as feedback, then the step fails), call (that call is refused,
never runs); every verdict recorded with the turn, and a replay (and an export-test's
replay) reads them and never runs a guardrail again. Each bad guardrail is refused naming
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chainlab import Agent
from chainlab.errors import ToolDefinitionError
from chainlab.events import EventKind
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from chainlab.testing.replay import Recording, replay_run
from tests.agent.conftest import Shop, agent_chain, run_agent

pytestmark = pytest.mark.anyio


class Counted:
    """A guardrail that counts its calls and says ``verdict(value)``."""

    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict
        self.calls: list[Any] = []
        self.__qualname__ = "Counted"

    def __call__(self, value: Any) -> Any:
        self.calls.append(value)
        return self.verdict(value) if callable(self.verdict) else self.verdict


def _checks(run: Any) -> list[dict[str, Any]]:
    out = []
    for ev in run.history():
        answer = ev.payload.get("answer")
        out += list((answer or {}).get("checks") or ()) + list(ev.payload.get("checks") or ())
    return out


async def test_an_input_guardrail_fails_the_step_before_the_model_is_asked(
        shop: Shop, server: FakeOpenAI) -> None:
    guard = Counted(lambda request: "no refunds over chat" if "refund" in request else None)
    _, run, result = await run_agent(shop, server, "never sent", input_guardrails=[guard])
    assert str(result.status) == "failed"
    st = run.state.steps["help"]
    assert st.error == "input guardrail 'Counted' tripped: no refunds over chat"
    assert server.requests == [] and shop.calls == []  # the model was never asked
    assert guard.calls == ["order 7 arrived broken, please refund 15"]
    assert _checks(run) == [{"check": "guardrail", "guardrail": "Counted", "stage": "input",
                             "tripped": True, "reason": "no refunds over chat"}]


async def test_an_async_input_guardrail_that_passes_is_recorded_with_the_attempt(
        shop: Shop, server: FakeOpenAI) -> None:
    async def polite(request: str) -> None:
        return None

    _, run, result = await run_agent(shop, server, "Refund on its way.",
                                     input_guardrails=[polite])
    assert result.ok and run.outputs["help"] == "Refund on its way."
    assert [c["stage"] for c in _checks(run)] == ["input"]
    assert not _checks(run)[0]["tripped"]


async def test_an_output_guardrail_sends_the_reason_back_then_the_answer_passes(
        shop: Shop, server: FakeOpenAI) -> None:
    guard = Counted(lambda out: "do not promise dates" if "tomorrow" in out else None)
    _, run, result = await run_agent(shop, server, "It arrives tomorrow.", "It is on its way.",
                                     output_guardrails=[guard])
    assert result.ok and run.outputs["help"] == "It is on its way."
    feedback = server.requests[1].messages[-1]
    assert feedback["role"] == "user" and "do not promise dates" in feedback["content"]
    assert guard.calls == ["It arrives tomorrow.", "It is on its way."]
    assert [c["tripped"] for c in _checks(run)] == [True, False]


async def test_an_output_guardrail_that_keeps_tripping_fails_the_step(
        shop: Shop, server: FakeOpenAI) -> None:
    _, run, result = await run_agent(shop, server, "a", "b", "c",
                                     output_guardrails=[lambda out: "never good enough"])
    assert str(result.status) == "failed"
    assert "never good enough" in (run.state.steps["help"].error or "")


async def test_a_call_guardrail_refuses_that_call_which_never_runs(
        shop: Shop, server: FakeOpenAI) -> None:
    guard = Counted(lambda call: "refunds need a person on the phone"
                    if call["tool"] == "refund" else None)
    _, run, result = await run_agent(
        shop, server,
        tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7, "amount": 15})),
        "I looked it up; a person will call you about the refund.",
        call_guardrails=[guard])
    assert result.ok
    assert shop.tools_called() == [("help/1.1", "lookup")]  # refund never ran
    told = [m["content"] for m in server.requests[1].messages if m.get("role") == "tool"]
    assert told[1] == "error: refused by guardrail 'Counted': refunds need a person on the phone"
    assert guard.calls == [{"tool": "lookup", "args": {"order": 7}},
                           {"tool": "refund", "args": {"order": 7, "amount": 15}}]
    checks = _checks(run)
    assert [(c["index"], c["tripped"]) for c in checks] == [(0, False), (1, True)]
    turn = run.transcript("help")[0]
    assert turn["calls"][1]["refused"].startswith("refused by guardrail 'Counted'")


async def test_a_replay_reads_the_verdicts_and_runs_no_guardrail(
        shop: Shop, server: FakeOpenAI, tmp_path: Path) -> None:
    calls = Counted(lambda call: "no" if call["tool"] == "refund" else None)
    outputs = Counted(lambda out: "shorter" if len(out) > 20 else None)
    inputs = Counted(None)
    runtime, run, result = await run_agent(
        shop, server,
        tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7, "amount": 15})),
        "A long answer that is far too long.", "Done.",
        input_guardrails=[inputs], output_guardrails=[outputs], call_guardrails=[calls])
    assert result.ok and run.outputs["help"] == "Done."
    before = (len(inputs.calls), len(outputs.calls), len(calls.calls))
    assert before == (1, 2, 2)
    replayed = await replay_run(run, shop.toolbox)
    replayed.assert_same()
    assert (len(inputs.calls), len(outputs.calls), len(calls.calls)) == before  # not again
    assert replayed.state.steps["help"].output == "Done."
    # the export-test's fixture: written, read back, replayed: no guardrail runs either
    fixture = Recording.from_store(runtime.store, run.run_id).save(tmp_path / "f.replay.json")
    again = await replay_run(Recording.load(fixture), shop.toolbox)
    again.assert_same()
    assert (len(inputs.calls), len(outputs.calls), len(calls.calls)) == before


async def test_a_replay_of_a_tripped_input_guardrail_fails_the_same_without_it(
        shop: Shop, server: FakeOpenAI) -> None:
    guard = Counted("not today")
    _, run, result = await run_agent(shop, server, input_guardrails=[guard])
    assert str(result.status) == "failed" and len(guard.calls) == 1
    replayed = await replay_run(run, shop.toolbox)
    replayed.assert_same()
    assert len(guard.calls) == 1
    assert replayed.state.steps["help"].error == "input guardrail 'Counted' tripped: not today"


async def test_input_verdicts_of_a_retried_turn_replay_without_the_guardrail(
        shop: Shop, server: FakeOpenAI) -> None:
    """The first request fails (HTTP 500) and is asked again: each attempt records its input
    verdict, and the replay asks the guardrail for neither."""
    guard = Counted(None)
    chain = agent_chain(retry={"max_attempts": 3, "delay_s": 0,
                               "retry_on": ["transient", "timeout"]})
    _, run, result = await run_agent(shop, server, 500, "Done.", input_guardrails=[guard],
                                     chain=chain)
    assert result.ok and len(guard.calls) == 2
    started = [ev for ev in run.history() if ev.kind == EventKind.STEP_STARTED]
    assert [len(ev.payload["checks"]) for ev in started] == [1, 1]
    replayed = await replay_run(run, shop.toolbox)
    replayed.assert_same()
    assert len(guard.calls) == 2


@pytest.mark.parametrize("stage", ["input", "output", "call"])
async def test_a_guardrail_that_raises_fails_the_step_naming_it_and_nothing_runs(
        shop: Shop, server: FakeOpenAI, stage: str) -> None:
    def broken(value: Any) -> Any:
        raise KeyError("missing")

    answers = [tool_calls(Call("lookup", {"order": 7}))] if stage == "call" else ["Done."]
    _, run, result = await run_agent(shop, server, *answers,
                                     **{f"{stage}_guardrails": [broken]})
    assert str(result.status) == "failed" and shop.calls == []
    error = run.state.steps["help"].error or ""
    assert f"{stage} guardrail" in error and "broken" in error and "KeyError" in error
    failed = [ev for ev in run.history() if ev.kind == EventKind.STEP_FAILED]
    assert failed[-1].payload["guardrail"].endswith("broken")
    assert len(server.requests) == (0 if stage == "input" else 1)


@pytest.mark.parametrize("said", [True, 0, {"reason": "x"}, ["no"]])
async def test_a_guardrail_that_returns_neither_none_nor_a_str_fails_the_step(
        shop: Shop, server: FakeOpenAI, said: Any) -> None:
    _, run, result = await run_agent(shop, server, "Done.",
                                     output_guardrails=[lambda out: said])
    assert str(result.status) == "failed"
    error = run.state.steps["help"].error or ""
    assert "returned" in error and "returns None (it passes) or a reason" in error


@pytest.mark.parametrize("given", ["not_a_function", [1], "string"])
def test_guardrails_that_are_not_functions_are_refused(given: Any) -> None:
    value = given if given != "not_a_function" else ["check"]
    if given == "string":
        value = "check"
    with pytest.raises(ToolDefinitionError, match="input_guardrails"):
        Agent("a", "help", input_guardrails=value)
