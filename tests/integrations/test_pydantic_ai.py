"""A Pydantic AI agent converted to a chainlab agent (issue 45 item 1): its instructions,
tools (schemas unchanged), output type and model object come over; each model request is a
recorded chainlab turn asked through the agent's own model object; each tool call is a step
under every rule; the original agent is untouched and still runs natively."""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any

import anyio
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, ModelRetry, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers.openai import OpenAIProvider

from chainlab import Chain, Toolbox
from chainlab.errors import AgentConversionError
from chainlab.integrations.pydantic_ai import PydanticAIClient, from_pydantic_ai
from chainlab.render.dot import chain_dot
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Ledger, one_step, start

pytestmark = pytest.mark.anyio
INSTRUCTIONS = "You help customers with their orders. Look orders up before refunding."


def support_agent(model: Any, ledger: Ledger, **kw: Any) -> PydanticAgent[Any, Any]:
    """The support agent: a lookup that reads, a refund a person approves."""
    agent: PydanticAgent[Any, Any] = PydanticAgent(
        model, name="support", instructions=INSTRUCTIONS,
        output_type=[str, DeferredToolRequests], **kw)

    @agent.tool_plain
    def lookup_order(order_id: int) -> dict[str, Any]:
        """Look an order up (reads only)."""
        ledger.write("lookup_order", order_id=order_id)
        return {"order_id": order_id, "status": "delivered", "total": 40}

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: int, amount: int) -> dict[str, Any]:
        """Refund an amount of an order to the customer."""
        ledger.write("refund", order_id=order_id, amount=amount)
        return {"order_id": order_id, "refunded": amount}

    return agent


def scripted(*turns: list[Any] | str) -> tuple[FunctionModel, list[int]]:
    """A FunctionModel answering by turn (1 + the responses it was sent), and the turns it
    was asked for, in order."""
    asked: list[int] = []

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        turn = 1 + sum(1 for m in messages if m.kind == "response")
        asked.append(turn)
        said = turns[turn - 1]
        if isinstance(said, str):
            return ModelResponse(parts=[TextPart(said)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{turn}.{i}")
                                    for i, (name, args) in enumerate(said)])
    return FunctionModel(answer), asked


REFUND_TURNS = ([("lookup_order", {"order_id": 7}), ("refund", {"order_id": 7, "amount": 15})],
                "Refunded 15 on order 7.")


def read_only() -> dict[str, Any]:
    return {"lookup_order": {"side_effects": False}}


# --------------------------------------------------------------------------- conversion


async def test_the_conversion_keeps_instructions_tools_schemas_and_model(ledger: Ledger
                                                                         ) -> None:
    model, _ = scripted(*REFUND_TURNS)
    native = support_agent(model, ledger, system_prompt="Be brief.")
    agent = from_pydantic_ai(native, tools=read_only())
    assert agent.name == "support"
    assert agent.instructions == f"Be brief.\n\n{INSTRUCTIONS}"
    assert agent.tools == ["support.lookup_order", "support.refund"]
    tools = {t.name: t for t in agent.own_tools}
    found = native._function_toolset.tools
    for name in ("lookup_order", "refund"):  # the JSON Schemas, unchanged
        assert tools[f"support.{name}"].input_schema() == found[name].function_schema.json_schema
        assert tools[f"support.{name}"].description == found[name].description
    assert isinstance(agent.client, PydanticAIClient) and agent.client.model is native.model
    # the contract: described (read only), the SDK's approval, nobody said (unsafe)
    lookup, refund = tools["support.lookup_order"], tools["support.refund"]
    assert (lookup.side_effects, lookup.idempotent, lookup.requires_confirmation) == \
        (False, True, False)
    assert (refund.side_effects, refund.idempotent, refund.requires_confirmation) == \
        (True, False, True)
    toolbox = Toolbox("shop")
    toolbox.add_agent(agent)
    assert {"agent:support", "support.lookup_order", "support.refund"} <= set(toolbox.names())


async def test_an_undescribed_tool_is_unsafe_and_marked_so_on_the_dag(ledger: Ledger) -> None:
    model, _ = scripted(*REFUND_TURNS)
    agent = from_pydantic_ai(support_agent(model, ledger))  # nobody described a tool
    lookup = next(t for t in agent.own_tools if t.name == "support.lookup_order")
    assert (lookup.side_effects, lookup.idempotent, lookup.safe_to_repeat) == \
        (True, False, False)
    assert lookup.describe()["origin"] == "Pydantic AI agent 'support'"
    toolbox = Toolbox("shop")
    toolbox.add_agent(agent)
    chain = Chain.from_dict({"name": "direct", "steps": [
        {"id": "look", "tool": "support.lookup_order", "args": {"order_id": 7}}]})
    dot = chain_dot(chain, toolbox)
    assert "⚡" in dot and "⚡=" not in dot  # side effects, not idempotent


async def test_the_converted_agent_runs_and_the_original_still_runs_natively(
        ledger: Ledger) -> None:
    model, asked = scripted(*REFUND_TURNS)
    native = support_agent(model, ledger)
    before = (copy.copy(native._function_toolset.tools), native.model, native._instructions,
              native.output_type, dict(vars(native._function_toolset.tools["refund"])))
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(native, tools=read_only()))
    runtime, run = await start(toolbox, one_step("support"))
    with anyio.fail_after(20):
        await run.wait()
        assert run.waiting() == {"help/1.2": "waiting_confirmation"}
        assert ledger.tools() == ["lookup_order"]  # the refund waits for a person
        await run.approve("help/1.2", note="ok")
        result = await run.wait()
    assert result.status == "succeeded"
    assert result.outputs["help"] == "Refunded 15 on order 7."
    assert result.outputs["help/1.2"] == {"order_id": 7, "refunded": 15}
    assert ledger.tools() == ["lookup_order", "refund"] and asked == [1, 2]
    # nothing was copied into the agent or patched on it ...
    after = (native._function_toolset.tools, native.model, native._instructions,
             native.output_type, dict(vars(native._function_toolset.tools["refund"])))
    assert after[0] == before[0] and after[1:] == before[1:]
    # ... and it runs natively: it stops at the refund, as Pydantic AI does
    native_model, native_asked = scripted(*REFUND_TURNS)
    with native.override(model=native_model):
        outcome = await native.run("order 7 arrived broken, refund 15")
    assert isinstance(outcome.output, DeferredToolRequests)
    assert [c.tool_name for c in outcome.output.approvals] == ["refund"]
    assert native_asked == [1]
    await runtime.aclose()


async def test_requests_go_through_the_agents_own_openai_model_over_http(
        ledger: Ledger) -> None:
    """The model object is the agent's (OpenAIChatModel over the real openai client): the
    requests are the ones Pydantic AI itself sends for the same agent."""
    script = [tool_calls(Call("lookup_order", {"order_id": 7}, "c1")), "Order 7: delivered."]
    bodies: dict[str, list[dict[str, Any]]] = {}
    for how in ("chainlab", "native"):
        with FakeOpenAI(list(script)) as server:
            model = OpenAIChatModel("fake-model", provider=OpenAIProvider(
                openai_client=AsyncOpenAI(base_url=server.base_url, api_key="test",
                                          max_retries=0)))
            native = support_agent(model, ledger)
            if how == "native":
                outcome = await native.run("where is order 7?")
                assert outcome.output == "Order 7: delivered."
            else:
                toolbox = Toolbox("shop")
                toolbox.add_agent(from_pydantic_ai(native, tools=read_only()))
                runtime, run = await start(toolbox, one_step("support", "where is order 7?"))
                with anyio.fail_after(20):
                    result = await run.wait()
                assert result.outputs["help"] == "Order 7: delivered."
                await runtime.aclose()
            bodies[how] = [r.body for r in server.completions]
    assert len(bodies["chainlab"]) == len(bodies["native"]) == 2
    for mine, theirs in zip(bodies["chainlab"], bodies["native"], strict=True):
        assert mine["tools"] == theirs["tools"]  # names, descriptions, schemas, strict
        assert mine["messages"] == theirs["messages"]
        assert mine.get("tool_choice") == theirs.get("tool_choice")


async def test_a_structured_output_type_is_the_output_schema(ledger: Ledger) -> None:
    class Verdict(BaseModel):
        refunded: int
        note: str

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        assert [t.name for t in info.output_tools] == ["final_result"]
        assert not info.allow_text_output
        return ModelResponse(parts=[ToolCallPart("final_result",
                                                 {"refunded": 15, "note": "done"})])

    native = PydanticAgent(FunctionModel(answer), name="judge", output_type=Verdict)
    agent = from_pydantic_ai(native)
    assert agent.output_json_schema == Verdict.model_json_schema()
    toolbox = Toolbox("shop")
    toolbox.add_agent(agent)
    runtime, run = await start(toolbox, one_step("judge", "decide"))
    result = await run.wait()
    assert result.outputs["help"] == {"refunded": 15, "note": "done"}
    # a scalar output type travels wrapped ({"response": ...}) and comes out as itself
    count = PydanticAgent(TestModel(custom_output_args=3), name="counter",
                          output_type=int)
    toolbox.add_agent(from_pydantic_ai(count))
    runtime2, run2 = await start(toolbox, one_step("counter", "how many?"))
    assert (await run2.wait()).outputs["help"] == 3
    await runtime.aclose()
    await runtime2.aclose()


async def test_a_tool_gets_a_run_context_with_deps_made_once_per_run() -> None:
    made: list[int] = []
    seen: list[dict[str, Any]] = []

    def deps() -> dict[str, Any]:
        made.append(1)
        return {"shop": "north", "n": len(made)}

    model, _ = scripted([("where", {"order_id": 1}), ("where", {"order_id": 2})],
                        [("where", {"order_id": 3})], "done")
    native: PydanticAgent[dict[str, Any], str] = PydanticAgent(model, name="desk",
                                                               deps_type=dict)

    @native.tool
    def where(ctx: RunContext[dict[str, Any]], order_id: int) -> str:
        """Where an order is."""
        seen.append({"deps": ctx.deps, "run": ctx.run_id, "call": ctx.tool_call_id,
                     "retry": ctx.retry, "tool": ctx.tool_name, "model": ctx.model})
        return f"order {order_id} is at {ctx.deps['shop']}"

    toolbox = Toolbox("desk")
    toolbox.add_agent(from_pydantic_ai(native, deps=deps,
                                       tools={"where": {"side_effects": False}}))
    runtime, run = await start(toolbox, one_step("desk", "where are my orders?"))
    result = await run.wait()
    assert result.status == "succeeded", result
    assert made == [1]  # once for the run, for its three calls
    assert [s["call"] for s in seen] == ["help/1.1", "help/1.2", "help/2.1"]
    assert {s["run"] for s in seen} == {run.run_id}
    assert all(s["deps"] == {"shop": "north", "n": 1} and s["retry"] == 0
               and s["tool"] == "where" and s["model"] is model for s in seen)
    await runtime.aclose()


async def test_model_retry_goes_back_to_the_model_as_the_calls_error() -> None:
    model, asked = scripted([("check", {"code": "x"})], [("check", {"code": "ok"})], "fine")
    native = PydanticAgent(model, name="checker")

    @native.tool_plain
    def check(code: str) -> str:
        """Check a code."""
        if code != "ok":
            raise ModelRetry("codes are 'ok' or nothing")
        return "valid"

    toolbox = Toolbox("t")
    toolbox.add_agent(from_pydantic_ai(native))
    runtime, run = await start(toolbox, one_step("checker", "check x"))
    result = await run.wait()
    assert result.status == "succeeded" and asked == [1, 2, 3]
    first = run.state.steps["help/1.1"]
    assert first.status == "failed" and "codes are 'ok' or nothing" in first.error
    told = run.transcript("help")[0]["calls"][0]["result"]
    assert "asks to try again: codes are 'ok' or nothing" in told
    assert run.state.steps["help/1.1"].attempts == 1  # not retried: the model reads it
    await runtime.aclose()


async def test_a_rejection_and_a_turn_limit_wait_and_go_back_to_the_model(
        ledger: Ledger) -> None:
    model, asked = scripted(*REFUND_TURNS)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger), tools=read_only()))
    runtime, run = await start(toolbox, one_step("support", max_turns=1))
    with anyio.fail_after(20):
        await run.wait()
        await run.reject("help/1.2", reason="too much")
        await run.wait()
        assert run.waiting() == {"help": "waiting_confirmation"}  # max_turns=1 reached
        assert run.state.steps["help"].reason == "limit_reached"
        assert asked == [1]  # the model is not asked past the limit
        await run.approve("help")
        result = await run.wait()
    assert result.status == "succeeded" and asked == [1, 2]
    assert ledger.tools() == ["lookup_order"]  # the refund was never made
    assert run.transcript("help")[0]["calls"][1]["result"] == \
        "a person rejected this call: too much"
    await runtime.aclose()


async def test_step_through_asks_the_model_one_turn_at_a_time(ledger: Ledger) -> None:
    model, asked = scripted(*REFUND_TURNS)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger), tools=read_only()))
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(one_step("support"), paused=True)
    with anyio.fail_after(20):
        while run.steps["help"].status != "ready":
            await anyio.sleep(0.01)
        assert asked == []  # paused: the model is not asked
        await run.step("help")  # Step: exactly the first turn
        while "help/1.1" not in run.steps:
            await anyio.sleep(0.01)
        assert asked == [1] and ledger.tools() == []  # its calls are ready steps now
        await run.step("help/1.1")
        while run.steps["help/1.1"].status != "succeeded":
            await anyio.sleep(0.01)
        assert ledger.tools() == ["lookup_order"] and asked == [1]
    await runtime.aclose()


async def test_the_runs_budget_waits_for_a_person_before_a_turn(ledger: Ledger) -> None:
    from chainlab.plan.schema import RunOptions

    model, asked = scripted(*REFUND_TURNS)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger), tools=read_only()))
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(one_step("support"), options=RunOptions.model_validate(
        {"budget": {"max_tokens": 80}}))
    with anyio.fail_after(20):
        await run.wait()
        await run.approve("help/1.2")
        await run.wait()
    spent = run.state.usage["tokens"]
    assert 40 < spent < 80 and asked == [1]  # FunctionModel counts tokens: turn 2 would
    # cross 80 (a turn is expected to cost what the last one did)
    assert run.waiting() == {"help": "waiting_confirmation"}
    assert run.steps["help"].reason == "budget_exceeded"
    await run.approve("help", budget={"max_tokens": 10_000})
    assert (await run.wait()).status == "succeeded" and asked == [1, 2]
    await runtime.aclose()


async def test_a_completed_call_is_compensated_when_the_run_rolls_back(
        ledger: Ledger) -> None:
    model, _ = scripted(*REFUND_TURNS)
    native = support_agent(model, ledger)

    @native.tool_plain
    def cancel_refund(order_id: int) -> str:
        """Take a refund back."""
        ledger.write("cancel_refund", order_id=order_id)
        return "cancelled"

    agent = from_pydantic_ai(native, tools={
        "lookup_order": {"side_effects": False},
        "refund": {"compensate": ("cancel_refund", {"order_id": "{{ input.order_id }}"})}})
    refund = next(t for t in agent.own_tools if t.name == "support.refund")
    assert refund.compensate is not None and refund.compensate.tool == "support.cancel_refund"
    toolbox = Toolbox("shop")
    toolbox.add_agent(agent)
    runtime, run = await start(toolbox, one_step("support"))
    with anyio.fail_after(20):
        await run.wait()
        await run.approve("help/1.2")
        await run.wait()
        await run.rollback()
        result = await run.wait()
    assert result.status == "rolled_back"
    assert ledger.tools() == ["lookup_order", "refund", "cancel_refund"]
    await runtime.aclose()


async def test_another_runtime_resumes_the_run_without_asking_a_recorded_turn_again(
        ledger: Ledger, tmp_path: Any) -> None:
    from chainlab.store import SQLiteStore

    model, asked = scripted(*REFUND_TURNS)
    native = support_agent(model, ledger)

    def toolbox() -> Toolbox:  # what another process would import
        box = Toolbox("shop")
        box.add_agent(from_pydantic_ai(native, tools=read_only()))
        return box

    first = Runtime(toolbox(), SQLiteStore(tmp_path / "runs.db"))
    run = await first.start(one_step("support"))
    await run.wait()
    assert run.waiting() == {"help/1.2": "waiting_confirmation"}
    await first.aclose()  # the process goes away while the refund waits

    second = Runtime(toolbox(), SQLiteStore(tmp_path / "runs.db"))
    again = await second.resume(run.run_id)
    await again.approve("help/1.2")
    with anyio.fail_after(20):
        result = await again.wait()
    assert result.status == "succeeded"
    assert asked == [1, 2]  # turn 1 answered from the log
    assert ledger.tools() == ["lookup_order", "refund"]
    await second.aclose()


async def test_a_replay_answers_the_model_and_the_tools_from_the_recording(
        ledger: Ledger) -> None:
    from chainlab.testing.replay import replay_run

    model, asked = scripted(*REFUND_TURNS)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger), tools=read_only()))
    runtime, run = await start(toolbox, one_step("support"))
    await run.wait()
    await run.approve("help/1.2")
    assert (await run.wait()).status == "succeeded"
    assert asked == [1, 2] and ledger.tools() == ["lookup_order", "refund"]
    replayed = await replay_run(run, toolbox)
    replayed.assert_same()
    assert asked == [1, 2]  # the replay did not ask the model ...
    assert ledger.tools() == ["lookup_order", "refund"]  # ... nor refund again
    await runtime.aclose()


# --------------------------------------------------------------------------- bad input


def test_an_object_that_is_not_a_pydantic_ai_agent_is_refused() -> None:
    for thing in (object(), "support", TestModel()):
        with pytest.raises(AgentConversionError, match="not a Pydantic AI Agent"):
            from_pydantic_ai(thing)


def test_a_version_outside_the_supported_range_is_named(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    import pydantic_ai

    monkeypatch.setattr(pydantic_ai, "__version__", "3.0.1")
    with pytest.raises(AgentConversionError) as info:
        from_pydantic_ai(PydanticAgent(TestModel(), name="x"))
    assert "Pydantic AI 3.0.1" in str(info.value) and ">=2.78,<3" in str(info.value)
    assert 'pip install "chainlab[pydantic-ai]"' in info.value.fix


def test_two_tools_of_one_name_are_refused() -> None:
    from pydantic_ai.toolsets import FunctionToolset

    def lookup(order_id: int) -> str:
        """Look up."""
        return "x"

    extra = FunctionToolset([lookup])
    native = PydanticAgent(TestModel(), name="twice", tools=[lookup], toolsets=[extra])
    with pytest.raises(AgentConversionError, match="two tools are named 'lookup'"):
        from_pydantic_ai(native)


def test_a_tool_whose_schema_the_value_gate_refuses_is_named() -> None:
    native = PydanticAgent(TestModel(), name="gate")

    @native.tool_plain  # (a pattern in the schema only: pydantic does not check it)
    def tag(code: Annotated[str, Field(json_schema_extra={"pattern": r"^(a+)+\1$"})]) -> str:
        """A code with a backreference, which RE2 (no backtracking) refuses."""
        return code

    with pytest.raises(AgentConversionError) as info:
        from_pydantic_ai(native)
    assert "its tool 'tag' cannot be a chainlab tool" in str(info.value)
    assert "'^(a+)+\\\\1$', which RE2 cannot run" in str(info.value)  # the pattern, named
    assert str(info.value).startswith("agent 'gate' (Pydantic AI): ")


@pytest.mark.parametrize("build,feature", [
    (lambda: PydanticAgent(None, name="x"), "it has no model"),
    (lambda: PydanticAgent(TestModel(), name="x", deps_type=int),
     "deps_type=<class 'int'> and no deps= was given"),
    (lambda: PydanticAgent(TestModel(), name="x", instructions=lambda: "now"),
     "instructions are made by functions"),
    (lambda: _with(PydanticAgent(TestModel(), name="x"), "system_prompt"),
     "system prompts are made by functions"),
    (lambda: _with(PydanticAgent(TestModel(), name="x", output_type=str), "output_validator"),
     "output validators"),
    (lambda: PydanticAgent(TestModel(), name="x", output_type=[BaseModel, str]),
     "has no mapping"),
    (lambda: PydanticAgent(TestModel(), name="x", toolsets=[_wrapped_toolset()]),
     "its toolset PrefixedToolset has no mapping"),
    (lambda: PydanticAgent(TestModel()), "the agent has no name"),
])
def test_features_with_no_mapping_are_refused_naming_them(build: Any, feature: str) -> None:
    with pytest.raises(AgentConversionError) as info:
        from_pydantic_ai(build())
    assert feature in str(info.value), str(info.value)
    assert info.value.fix


def _with(agent: Any, decorator: str) -> Any:
    def hook(ctx: Any, *args: Any) -> Any:
        return args[0] if args else "made now"
    getattr(agent, decorator)(hook)
    return agent


def _wrapped_toolset() -> Any:
    from pydantic_ai.toolsets import FunctionToolset

    def peek(order_id: int) -> str:
        """Peek."""
        return "x"
    return FunctionToolset([peek]).prefixed("shop")  # (listed per run, renamed)


def test_tool_descriptions_are_checked(ledger: Ledger) -> None:
    model, _ = scripted(*REFUND_TURNS)
    native = support_agent(model, ledger)
    with pytest.raises(AgentConversionError, match="did you mean 'lookup_order'"):
        from_pydantic_ai(native, tools={"lookup_ordr": {"side_effects": False}})
    with pytest.raises(AgentConversionError, match="no contract key"):
        from_pydantic_ai(native, tools={"lookup_order": {"side_effect": False}})
    with pytest.raises(AgentConversionError, match="requires approval in its own SDK"):
        from_pydantic_ai(native, tools={"refund": {"requires_confirmation": False}})
    with pytest.raises(AgentConversionError, match="not a factory"):
        from_pydantic_ai(native, deps={"shop": "north"})  # type: ignore[arg-type]


async def test_a_tools_metadata_can_describe_it() -> None:
    native = PydanticAgent(TestModel(), name="meta")

    @native.tool_plain(metadata={"chainlab": {"side_effects": False}})
    def peek(order_id: int) -> str:
        """Peek."""
        return "x"

    [peek_tool] = from_pydantic_ai(native).own_tools
    assert (peek_tool.side_effects, peek_tool.idempotent) == (False, True)


async def test_a_deps_factory_that_raises_fails_the_call_naming_it_nothing_called() -> None:
    called: list[int] = []
    model, _ = scripted([("where", {"order_id": 1})], "sorry")
    native: PydanticAgent[dict[str, Any], str] = PydanticAgent(model, name="desk",
                                                               deps_type=dict)

    @native.tool
    def where(ctx: RunContext[dict[str, Any]], order_id: int) -> str:
        """Where an order is."""
        called.append(order_id)
        return "here"

    def broken_deps() -> dict[str, Any]:
        raise ConnectionError("the shop's database is down")

    toolbox = Toolbox("desk")
    toolbox.add_agent(from_pydantic_ai(native, deps=broken_deps))
    runtime, run = await start(toolbox, one_step("desk"))
    result = await run.wait()
    step = run.state.steps["help/1.1"]
    assert step.status == "failed" and called == []
    assert "the deps factory" in step.error and "broken_deps raised ConnectionError" in \
        step.error and "was not called" in step.error
    assert result.status == "succeeded"  # the model read the error and answered
    await runtime.aclose()


@pytest.mark.parametrize("status,kind,asked", [(500, "transient", 3), (401, "permanent", 1)])
async def test_a_provider_that_raises_is_classified_naming_provider_and_model(
        status: int, kind: str, asked: int) -> None:
    with FakeOpenAI([status] * 5) as server:
        model = OpenAIChatModel("fake-model", provider=OpenAIProvider(
            openai_client=AsyncOpenAI(base_url=server.base_url, api_key="test",
                                      max_retries=0)))
        toolbox = Toolbox("t")
        toolbox.add_agent(from_pydantic_ai(PydanticAgent(model, name="down")))
        runtime = Runtime(toolbox, MemoryStore())
        run = await runtime.start(one_step("down"))  # (retried by the agent's MODEL_RETRY)
        with anyio.fail_after(30):
            result = await run.wait()
        assert len(server.completions) == asked
        await runtime.aclose()
    assert result.status == "failed"
    failures = [e.payload for e in run.event_list() if e.kind in ("step_failed",
                                                                  "step_retry_scheduled")]
    assert failures[-1]["error_kind"] == kind
    assert "Pydantic AI openai model 'fake-model'" in failures[-1]["error"]
    assert f"HTTP {status}" in failures[-1]["error"]


def test_two_conversions_register_side_by_side_and_again_in_a_notebook(ledger: Ledger
                                                                       ) -> None:
    model, _ = scripted(*REFUND_TURNS)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger)))
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger), name="support2"))
    toolbox.add_agent(from_pydantic_ai(support_agent(model, ledger)))  # a cell run again
    assert sorted(n for n in toolbox.names() if "." in n) == [
        "support.lookup_order", "support.refund", "support2.lookup_order", "support2.refund"]


def test_the_request_body_names_the_tools_as_the_model_sees_them(ledger: Ledger) -> None:
    model, _ = scripted(*REFUND_TURNS)
    agent = from_pydantic_ai(support_agent(model, ledger))
    toolbox = Toolbox("shop")
    toolbox.add_agent(agent)
    offers = agent.offers(toolbox, {})
    assert list(offers) == ["lookup_order", "refund"]
    assert [o.tool for o in offers.values()] == ["support.lookup_order", "support.refund"]
    assert json.dumps(offers["refund"].spec()["function"]["parameters"]) == json.dumps(
        support_agent(model, ledger)._function_toolset.tools["refund"].function_schema
        .json_schema)

