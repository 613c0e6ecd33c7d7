"""Agent steps (DESIGN §18) over real HTTP: each model turn is an attempt of the agent step;
the turn's tool calls are ONE ``steps_added`` and run as ordinary steps under every rule;
what became of each call goes back to the model in the model's call order."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from chainlab import Agent, ToolDefinitionError
from chainlab.agent.turns import turn_requests
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, Delay, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, run_agent, start, tool_messages

pytestmark = pytest.mark.anyio
K = EventKind


def added(run: Any) -> list[Any]:
    return [e for e in run.event_list() if e.kind == K.STEPS_ADDED]


async def until(check: Any) -> None:
    """Wait (bounded) until ``check()`` holds: a condition, never a fixed sleep."""
    with anyio.fail_after(10):
        while not check():
            await anyio.sleep(0.01)


async def test_parallel_calls_run_at_once_and_their_results_go_back_in_call_order(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("slow", {"order": 1}, "c-slow"), Call("lookup", {"order": 2},
                                                                       "c-look")),
               "Order 2 is delivered; the warehouse has order 1.")
    runtime, run = await start(shop, agent_chain())
    await until(lambda: ("help/1.2", "lookup") in shop.tools_called())
    assert ("help/1.1", "slow") not in shop.tools_called()  # slow is still running
    shop.gate.set()
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["help"] == "Order 2 is delivered; the warehouse has order 1."
    assert shop.tools_called() == [("help/1.2", "lookup"), ("help/1.1", "slow")]
    (grow,) = added(run)  # ONE event for the turn's calls, all or nothing
    assert grow.step_id == "help" and grow.payload["turn"] == 1
    assert grow.payload["ids"] == ["help/1.1", "help/1.2"]
    assert [(s["index"], s["tool"], s["args"]) for s in grow.payload["calls"]] == [
        (0, "slow", {"order": 1}), (1, "lookup", {"order": 2})]
    # the model sees the results in ITS order, although lookup finished first
    second = server.completions[1]
    assert tool_messages(second) == [
        ("c-slow", json.dumps("warehouse has 1")),
        ("c-look", '{"order":2,"status":"delivered","total":40}')]
    # each model turn is an attempt of the agent step, with its request hash and usage
    turns = [a for a in run.state.attempts if a.step_id == "help"]
    assert [(a.attempt, a.status) for a in turns] == [(1, "succeeded"), (2, "succeeded")]
    assert all(a.usage and a.usage["tokens"] > 0 for a in turns)
    starts = [e for e in run.event_list() if e.kind == K.STEP_STARTED and e.step_id == "help"]
    assert [e.payload["turn"] for e in starts] == [1, 2]
    # (the request is not stored again: rebuilt from the log, the one the server received)
    asked = [body for _, body in turn_requests(run.state, run.event_list())]
    assert asked[1]["messages"] == second.messages
    assert all("request" not in e.payload for e in starts)
    assert len({e.payload["request_hash"] for e in starts}) == 2
    assert run.state.usage["tokens"] == sum(a.usage["tokens"] for a in turns)
    await runtime.aclose()


async def test_a_call_waits_for_approval_of_its_own_args_while_its_siblings_run(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("refund", {"order": 7, "amount": 15}), Call("lookup",
                                                                           {"order": 7})),
               "Refunded 15 on order 7.")
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUSPENDED
    assert run.waiting() == {"help/1.1": "waiting_confirmation"}
    assert run.steps["help/1.2"].status == StepStatus.SUCCEEDED  # the sibling ran
    assert run.steps["help/1.1"].preview == "refund 15 on order 7"
    assert run.steps["help"].status == StepStatus.RUNNING  # waits for its calls, no slot
    assert len(server.completions) == 1  # the next turn waits for every call of this one
    await run.approve("help/1.1", note="fine")
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert ("help/1.1", "refund", {"order": 7, "amount": 15}) in shop.calls
    assert tool_messages(server.completions[1])[0][1] == '{"order":7,"refunded":15}'
    await runtime.aclose()


async def test_an_approval_with_edited_args_runs_those_and_the_model_sees_them(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(Call("refund", {"order": 7, "amount": 15}), "Refunded 10 instead.")
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    await run.approve("help/1.1", args={"order": 7, "amount": 10})
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert [args for _, tool, args in shop.calls if tool == "refund"] == [
        {"order": 7, "amount": 10}]
    (told,) = tool_messages(server.completions[1])
    assert told[1] == ('(a person changed the arguments before approving; the call ran with '
                       '{"order":7,"amount":10}) {"order":7,"refunded":10}')
    await runtime.aclose()


async def test_a_rejection_and_a_failed_call_go_back_to_the_model_and_the_run_goes_on(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("refund", {"order": 7, "amount": 500}),
                          Call("broken", {"order": 7})),
               "I could not refund: a person said no, and the order is archived.")
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    await run.reject("help/1.1", "more than the order's total")
    result = await run.wait()
    # the agent step does not fail because a call failed or was rejected (unlike fail_fast
    # for an ordinary step): both are the model's to read
    assert result.status == RunStatus.SUCCEEDED, result
    assert run.steps["help/1.1"].status == StepStatus.REJECTED
    assert run.steps["help/1.2"].status == StepStatus.FAILED
    assert [t for _, t in shop.tools_called()] == ["broken"]  # refund never ran
    assert [m for _, m in tool_messages(server.completions[1])] == [
        "a person rejected this call: more than the order's total",
        "error (permanent): order 7 is archived"]
    await runtime.aclose()


async def test_calls_that_cannot_be_made_are_refused_to_the_model_and_recorded(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("lookup_ordr", {"order": 1}), Call("lookup", '{"order": '),
                          Call("lookup", {"order": "seven"}), Call("lookup", [7]),
                          Call("lookup", {"order": 7, "note": "x" * 100_001}),
                          Call("lookup", {"order": 7})),
               "Order 7 is delivered.")
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    (grow,) = added(run)
    assert grow.payload["ids"] == ["help/1.6"]  # only the good call
    assert [r["index"] for r in grow.payload["refused"]] == [0, 1, 2, 3, 4]
    told = [m for _, m in tool_messages(server.completions[1])]
    assert told[0] == ("error: unknown tool 'lookup_ordr'; did you mean 'lookup'? The tools are: "
                       "lookup, refund, label, slow, broken")
    assert "the arguments of 'lookup' are not valid JSON" in told[1]
    assert "the arguments do not fit 'lookup': order: Input should be a valid integer" \
        in told[2]
    assert "must be a JSON object, got [7]" in told[3]
    assert "100,0" in told[4] and "at most 100,000 are taken" in told[4]
    assert told[5] == '{"order":7,"status":"delivered","total":40}'
    assert shop.tools_called() == [("help/1.6", "lookup")]
    await runtime.aclose()


async def test_500_calls_in_one_turn_run_the_first_max_calls_per_turn_and_refuse_the_rest(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server, max_calls_per_turn=16)
    server.add(tool_calls(*(Call("lookup", {"order": i}) for i in range(500))), "done")
    runtime, run = await start(shop, agent_chain())
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    (grow,) = added(run)
    assert len(grow.payload["ids"]) == 16 and len(grow.payload["refused"]) == 484
    told = [m for _, m in tool_messages(server.completions[1])]
    assert len(told) == 500
    assert told[16].startswith("error: refused: at most 16 tool calls are made per turn")
    assert len(shop.calls) == 16
    await runtime.aclose()


async def test_a_model_that_keeps_asking_for_impossible_calls_fails_the_step_clearly(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(*[Call("teleport", {"order": 7})] * 3)
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.FAILED
    st = run.steps["help"]
    assert st.status == StepStatus.FAILED
    assert st.error is not None and st.error.startswith(
        "the model's last 3 turns made no call that could run (the last: unknown tool "
        "'teleport'")
    assert len(server.completions) == 3
    await runtime.aclose()


async def test_a_server_error_is_asked_again_per_turn(shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(503, Call("lookup", {"order": 7}), 500, "delivered")
    retry = {"max_attempts": 2, "delay_s": 0, "retry_on": ["transient"]}
    runtime, run = await start(shop, agent_chain(retry=retry))
    result = await run.wait()
    # two failed requests, each retried once: the retry policy counts per model turn
    assert result.status == RunStatus.SUCCEEDED
    kinds = [e.kind for e in run.event_list() if e.step_id == "help"]
    assert kinds.count(K.STEP_RETRY_SCHEDULED) == 2
    assert [a.status for a in run.state.attempts if a.step_id == "help"] == [
        "failed", "succeeded", "failed", "succeeded"]
    await runtime.aclose()


async def test_a_server_that_keeps_failing_fails_the_step_naming_the_endpoint(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(500, 500)
    retry = {"max_attempts": 2, "delay_s": 0}
    runtime, run = await start(shop, agent_chain(retry=retry))
    result = await run.wait()
    assert result.status == RunStatus.FAILED
    st = run.steps["help"]
    assert st.error_kind == "transient"
    assert st.error is not None and server.base_url in st.error and "HTTP 500" in st.error
    await runtime.aclose()


async def test_a_server_that_is_down_is_retried_then_named(shop: Shop) -> None:
    with FakeOpenAI() as gone:
        url = gone.base_url  # a port nobody listens on once it is closed
    shop.toolbox.add_agent(Agent("support", "help", ["lookup"], model="m", base_url=url))
    runtime, run = await start(shop, agent_chain(retry={"max_attempts": 3, "delay_s": 0}))
    result = await run.wait()
    assert result.status == RunStatus.FAILED
    st = run.steps["help"]
    assert st.attempts == 3 and st.error_kind == "transient"
    assert st.error is not None and st.error.startswith(
        f"cannot reach the model endpoint {url}")
    await runtime.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_streamed_and_whole_answers_give_the_same_run(
        shop: Shop, server: FakeOpenAI, stream: bool) -> None:
    shop.agent(server, stream=stream)
    server.add(tool_calls(Call("lookup", {"order": 7}), Call("label", {"order": 7,
                                                                       "text": "fragile"}),
                          content="Let me look."),
               "Order 7: delivered and labelled fragile.")
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["help"] == "Order 7: delivered and labelled fragile."
    assert [r.stream for r in server.completions] == [stream, stream]
    (grow,) = added(run)
    assert grow.payload["answer"]["content"] == "Let me look."
    assert [s["args"] for s in grow.payload["calls"]] == [{"order": 7},
                                                          {"order": 7, "text": "fragile"}]
    assert grow.payload["usage"]["tokens"] > 0
    await runtime.aclose()


async def test_an_agent_without_tools_is_a_prompt_step(shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server, tools=[], name="summarize")
    server.add("A broken parcel; the customer wants 15 back.")
    runtime, run = await start(shop, agent_chain(agent="summarize"))
    result = await run.wait()
    assert result.outputs == {"help": "A broken parcel; the customer wants 15 back."}
    (request,) = server.completions
    assert request.tools is None
    assert request.messages == [
        {"role": "system", "content": "You help customers with their orders."},
        {"role": "user", "content": "order 7 arrived broken, please refund 15"}]
    await runtime.aclose()


SCHEMA = {"type": "object", "properties": {"refund": {"type": "integer"}},
          "required": ["refund"], "additionalProperties": False}


async def test_an_answer_that_does_not_fit_the_output_schema_goes_back_to_the_model(
        shop: Shop, server: FakeOpenAI) -> None:
    runtime, run, result = await run_agent(
        shop, server, "Sure! I will refund it.", '{"refund": "15"}',
        '```json\n{"refund": 15}\n```', output_schema=SCHEMA)
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["help"] == {"refund": 15}  # the JSON, checked
    feedback = [g.payload["feedback"] for g in added(run)]
    assert feedback[0].startswith("the answer is not JSON")
    assert feedback[1] == "the answer does not fit the schema at refund: '15' is not of " \
        "type 'integer'"
    last = server.completions[2].messages
    assert last[-1] == {"role": "user", "content": feedback[1]}
    assert server.completions[0].response_format["type"] == "json_schema"
    await runtime.aclose()


async def test_an_answer_that_never_fits_fails_the_step_clearly(
        shop: Shop, server: FakeOpenAI) -> None:
    runtime, run, result = await run_agent(shop, server, "no", "still no", "{}",
                                           output_schema=SCHEMA)
    assert result.status == RunStatus.FAILED
    assert run.steps["help"].error == (
        "the model's last 3 turns made no call that could run (the last: the answer does not "
        "fit the schema at the top: 'refund' is a required property)")
    await runtime.aclose()


async def test_the_output_schema_is_negotiated_as_the_planner_negotiates(shop: Shop) -> None:
    with FakeOpenAI(['{"refund": 15}'], like="llama-cpp-python") as server:
        shop.agent(server, output_schema=SCHEMA)
        runtime, run = await start(shop, agent_chain())
        assert (await run.wait()).outputs["help"] == {"refund": 15}
        # json_schema refused by the server (not a turn: nothing recorded), json_object taken
        assert [r.response_format["type"] for r in server.completions] == [
            "json_schema", "json_object"]
        assert [a.status for a in run.state.attempts if a.step_id == "help"] == ["succeeded"]
        await runtime.aclose()


async def test_a_server_that_takes_no_tools_fails_the_step_saying_so(shop: Shop) -> None:
    with FakeOpenAI(["unused"], like="no-response-format") as server:
        shop.agent(server)
        runtime, run = await start(shop, agent_chain())
        result = await run.wait()
        assert result.status == RunStatus.FAILED
        error = run.steps["help"].error or ""
        assert error.startswith(f"model endpoint {server.base_url} answered HTTP 422") \
            and "tools" in error
        await runtime.aclose()


async def test_the_transcript_shows_each_turn_its_calls_and_their_results(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("lookup", {"order": 7}, "a"), Call("nope", {}, "b"),
                          content="Checking."),
               Reply(content="Delivered.", usage={"prompt_tokens": 90, "completion_tokens": 3}))
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    first, final = run.transcript("help")
    assert first["turn"] == 1 and first["content"] == "Checking."
    assert [(c["call_id"], c["step_id"], c["status"] if c["step_id"] else c["refused"])
            for c in first["calls"]] == [
        ("a", "help/1.1", "succeeded"),
        ("b", None, "unknown tool 'nope'. The tools are: lookup, refund, label, slow, broken")]
    assert first["usage"]["tokens"] > 0
    assert final == {"turn": 2, "content": "Delivered.", "calls": [], "feedback": None,
                     "usage": {"input_tokens": 90, "output_tokens": 3, "tokens": 93,
                               "model": "fake-model"}, "usage_unknown": None, "final": True}
    await runtime.aclose()


async def test_a_model_request_past_the_steps_timeout_is_asked_again(
        shop: Shop, server: FakeOpenAI) -> None:
    # (the first answer would come after the server closes; 5 s leaves the second one room
    # on a loaded machine: a new client, a request, an answer)
    server.add(Delay(600.0, "too late"), "in time")
    runtime, run, result = await run_agent(
        shop, server, chain=agent_chain(timeout_s=5,
                                        retry={"max_attempts": 2, "delay_s": 0}))
    assert result.outputs.get("help") == "in time", result.errors
    assert [(a.status, a.error_kind) for a in run.state.attempts if a.step_id == "help"] == [
        ("timed_out", "timeout"), ("succeeded", None)]
    await runtime.aclose()


async def test_cancelling_the_run_while_the_model_thinks_records_the_turn_cancelled(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(Delay(30.0, "never"))
    runtime, run = await start(shop, agent_chain())
    await until(lambda: len(server.completions) == 1)
    with anyio.fail_after(10):
        await run.cancel()
        result = await run.wait()
    assert result.status == RunStatus.CANCELLED
    assert run.steps["help"].status == StepStatus.CANCELLED
    assert [a.status for a in run.state.attempts] == ["cancelled"]
    await runtime.aclose()


async def test_approve_all_approves_each_waiting_call_of_the_agent_with_its_own_args(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(tool_calls(Call("refund", {"order": 1, "amount": 5}),
                          Call("refund", {"order": 2, "amount": 6})), "both refunded")
    runtime, run = await start(shop, agent_chain())
    await run.wait()
    assert set(run.waiting()) == {"help/1.1", "help/1.2"}
    assert await run.approve_all("help") == ["help/1.1", "help/1.2"]
    assert (await run.wait()).ok
    assert sorted(a["amount"] for _, t, a in shop.calls if t == "refund") == [5, 6]
    await runtime.aclose()


async def test_an_agent_step_that_needs_confirmation_asks_before_its_first_turn(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.agent(server)
    server.add(Call("lookup", {"order": 7}), "delivered")
    runtime, run = await start(shop, agent_chain(confirm=True))
    await run.wait()
    assert run.waiting() == {"help": "waiting_confirmation"} and not server.completions
    await run.approve("help")  # once: its later turns go on with the same args
    assert (await run.wait()).outputs["help"] == "delivered"
    await runtime.aclose()


async def test_a_turn_with_tools_says_tool_choice_auto_and_sends_no_null_text(
        shop: Shop, server: FakeOpenAI) -> None:
    """OpenAI's default with tools is "auto", but llama-cpp-python's function-calling chat
    formats read a request without ``tool_choice`` as "none" and leave the tools out of the
    prompt: a local model then never sees them (found with bench_agent_local.py)."""
    runtime, _run, result = await run_agent(shop, server, Call("lookup", {"order": 7}), "Done.")
    assert result.ok
    assert [r.body.get("tool_choice") for r in server.completions] == ["auto", "auto"]
    # the turn that only called a tool is sent back with "" as its text, not null (which
    # llama-cpp-python's server refuses with a 500 on every next turn)
    said = [m for m in server.completions[1].messages if m["role"] == "assistant"]
    assert [m["content"] for m in said] == [""] and said[0]["tool_calls"]
    await runtime.aclose()

    prompt = Shop()
    with FakeOpenAI() as other:
        runtime, _run, result = await run_agent(prompt, other, "Hello.", tools=[])
        assert result.ok and "tool_choice" not in other.completions[0].body  # no tools
    await runtime.aclose()


async def test_max_tokens_bounds_each_answer_and_is_checked(shop: Shop,
                                                            server: FakeOpenAI) -> None:
    """A small local model can run on for minutes in one answer (bench_agent_local.py saw
    a refund's arguments never end): ``max_tokens`` goes with every turn's request."""
    runtime, _run, result = await run_agent(shop, server, Call("lookup", {"order": 7}),
                                            "Done.", max_tokens=200)
    assert result.ok
    assert [r.body.get("max_tokens") for r in server.completions] == [200, 200]
    await runtime.aclose()
    for bad in (0, -1, 1.5, True, "200"):
        with pytest.raises(ToolDefinitionError, match="max_tokens must be an int"):
            Agent("x", "Help.", max_tokens=bad)  # type: ignore[arg-type]
