"""An OpenAI Agents SDK agent converted to a chainlab agent (issue 45 item 2): instructions,
function tools (``needs_approval`` a confirmation bound to the args), output type and the
model through the SDK's own ``Model`` interface (``OpenAIChatCompletionsModel`` over the real
``openai`` client to the scripted server; a custom ``Model`` subclass); handoffs become
sub-agents; guardrails run as recorded checks; what has no mapping is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from agents import (
    Agent as SDKAgent,
)
from agents import (
    GuardrailFunctionOutput,
    ModelResponse,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    Usage,
    WebSearchTool,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from pydantic import BaseModel

from chainlab import Toolbox
from chainlab.errors import AgentConversionError
from chainlab.integrations.openai_agents import OpenAIAgentsClient, from_openai_agents
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Ledger, one_step, start, turn_of

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)  # no network but the scripted model's
INSTRUCTIONS = "You help customers with their orders."


def chat_model(server: FakeOpenAI) -> OpenAIChatCompletionsModel:
    return OpenAIChatCompletionsModel("fake-model", AsyncOpenAI(
        base_url=server.base_url, api_key="test", max_retries=0))


def support_agent(model: Any, ledger: Ledger, **kw: Any) -> SDKAgent[Any]:
    @function_tool
    def lookup_order(order_id: int) -> dict[str, Any]:
        """Look an order up (reads only)."""
        ledger.write("lookup_order", order_id=order_id)
        return {"order_id": order_id, "status": "delivered", "total": 40}

    @function_tool(needs_approval=True)
    def refund(order_id: int, amount: int) -> dict[str, Any]:
        """Refund an amount of an order to the customer."""
        ledger.write("refund", order_id=order_id, amount=amount)
        return {"order_id": order_id, "refunded": amount}

    return SDKAgent(name="Support agent", instructions=INSTRUCTIONS, model=model,
                    tools=[lookup_order, refund], **kw)


def shop_model(request: RecordedRequest) -> Any:
    """The scripted model, by turn: lookup and refund, then an answer."""
    if turn_of(request) == 1:
        return tool_calls(Call("lookup_order", {"order_id": 7}, "c1"),
                          Call("refund", {"order_id": 7, "amount": 15}, "c2"))
    return "Refunded 15 on order 7."


@pytest.fixture
async def shop_server() -> AsyncIterator[FakeOpenAI]:
    with FakeOpenAI([shop_model] * 50) as fake:
        yield fake


READ_ONLY = {"lookup_order": {"side_effects": False}}


# --------------------------------------------------------------------------- conversion


async def test_the_conversion_keeps_instructions_tools_and_the_model(
        shop_server: FakeOpenAI, ledger: Ledger) -> None:
    native = support_agent(chat_model(shop_server), ledger)
    agent = from_openai_agents(native, tools=READ_ONLY)
    assert agent.name == "support_agent" and agent.instructions == INSTRUCTIONS
    assert agent.tools == ["support_agent.lookup_order", "support_agent.refund"]
    tools = {t.name: t for t in agent.own_tools}
    for sdk_tool in native.tools:  # the JSON Schemas, unchanged
        assert tools[f"support_agent.{sdk_tool.name}"].input_schema() == \
            sdk_tool.params_json_schema
    assert isinstance(agent.client, OpenAIAgentsClient) and agent.client.model is native.model
    refund = tools["support_agent.refund"]
    assert (refund.side_effects, refund.idempotent, refund.requires_confirmation) == \
        (True, False, True)  # needs_approval; nobody described it: unsafe


async def test_needs_approval_waits_for_a_person_and_the_original_still_runs_natively(
        shop_server: FakeOpenAI, ledger: Ledger) -> None:
    native = support_agent(chat_model(shop_server), ledger)
    tools_before = list(native.tools)
    toolbox = Toolbox("shop")
    toolbox.add_agent(from_openai_agents(native, tools=READ_ONLY))
    runtime, run = await start(toolbox, one_step("support_agent"))
    with anyio.fail_after(20):
        await run.wait()
        assert run.waiting() == {"help/1.2": "waiting_confirmation"}
        assert ledger.tools() == ["lookup_order"]
        # an approval is bound to the exact args: edited args run, and the model is told
        await run.approve("help/1.2", args={"order_id": 7, "amount": 10})
        result = await run.wait()
    assert result.status == "succeeded" and result.outputs["help"] == "Refunded 15 on order 7."
    assert ledger.lines[-1] == ("refund", {"order_id": 7, "amount": 10})
    told = [m["content"] for m in shop_server.completions[-1].messages if m["role"] == "tool"]
    assert told[1].startswith("(a person changed the arguments before approving")
    assert [r for r in shop_server.completions if turn_of(r) == 1] == \
        shop_server.completions[:1]  # turn 1 asked once
    await runtime.aclose()
    # the SDK's own objects are untouched, and the agent runs natively: it stops at refund
    assert native.tools == tools_before and native.tools[1].needs_approval is True
    outcome = await Runner.run(native, "order 7 arrived broken, refund 15")
    assert [i.raw_item.name for i in outcome.interruptions] == ["refund"]


async def test_handoffs_become_sub_agents(ledger: Ledger) -> None:
    def model(request: RecordedRequest) -> Any:
        turn, system = turn_of(request), request.messages[0]["content"]
        if system == "You handle billing.":
            return tool_calls(Call("lookup_order", {"order_id": 7}, "b1")) if turn == 1 \
                else "billing: order 7 was paid"
        if turn == 1:
            names = [t["function"]["name"] for t in request.tools or ()]
            assert names == ["lookup_order", "refund", "agent__billing"]
            return tool_calls(Call("agent__billing", {"request": "was order 7 paid?"}, "h1"))
        return "Order 7 was paid."

    with FakeOpenAI([model] * 20) as server:
        billing = support_agent(chat_model(server), ledger)
        billing = billing.clone(name="Billing", instructions="You handle billing.",
                                handoff_description="Answers billing questions.",
                                tools=billing.tools[:1])
        native = support_agent(chat_model(server), ledger, handoffs=[billing])
        agent = from_openai_agents(native, tools=READ_ONLY)
        assert agent.tools == ["support_agent.lookup_order", "support_agent.refund",
                               "agent:billing"]
        toolbox = Toolbox("shop")
        toolbox.add_agent(agent)  # (registers the sub-agent and its tool too)
        assert {"agent:billing", "billing.lookup_order"} <= set(toolbox.names())
        runtime, run = await start(toolbox, one_step("support_agent", "was 7 paid?"))
        with anyio.fail_after(20):
            result = await run.wait()
        await runtime.aclose()
    assert result.status == "succeeded", result
    assert result.outputs["help/1.1"] == "billing: order 7 was paid"
    assert result.outputs["help"] == "Order 7 was paid."
    assert run.state.steps["help/1.1/1.1"].status == "succeeded"  # the sub-agent's call
    spec = agent.offers(toolbox, {})["agent__billing"].spec()["function"]
    assert spec["description"] == "Answers billing questions."


async def test_guardrails_run_once_as_recorded_checks(ledger: Ledger, tmp_path: Any) -> None:
    runs: list[str] = []

    @input_guardrail
    def polite(ctx: RunContextWrapper[Any], agent: Any, text: Any) -> GuardrailFunctionOutput:
        runs.append("input")
        return GuardrailFunctionOutput(output_info={"rude": False, "shop": ctx.context},
                                       tripwire_triggered=False)

    @output_guardrail
    def no_secrets(ctx: RunContextWrapper[Any], agent: Any, out: Any
                   ) -> GuardrailFunctionOutput:
        runs.append("output")
        return GuardrailFunctionOutput(output_info="clean", tripwire_triggered="secret" in out)

    with FakeOpenAI([shop_model] * 20) as server:
        native = support_agent(chat_model(server), ledger, input_guardrails=[polite],
                               output_guardrails=[no_secrets])

        def toolbox() -> Toolbox:
            box = Toolbox("shop")
            box.add_agent(from_openai_agents(native, tools=READ_ONLY,
                                             context=lambda: "north"))
            return box

        first = Runtime(toolbox(), SQLiteStore(tmp_path / "runs.db"))
        run = await first.start(one_step("support_agent"))
        await run.wait()
        assert runs == ["input"]  # before the first turn
        await first.aclose()
        second = Runtime(toolbox(), SQLiteStore(tmp_path / "runs.db"))
        again = await second.resume(run.run_id)  # another process, the refund waiting
        await again.approve("help/1.2")
        with anyio.fail_after(20):
            result = await again.wait()
        await second.aclose()
    assert result.status == "succeeded"
    assert runs == ["input", "output"]  # the input guardrail's verdict came from the log
    turns = [e.payload for e in again.event_list() if e.step_id == "help"
             and e.kind in ("steps_added", "step_succeeded")]
    assert turns[0]["answer"]["checks"] == [{"guardrail": "polite", "stage": "input",
                                             "tripped": False,
                                             "info": {"rude": False, "shop": "north"}}]
    assert turns[-1]["answer"]["checks"] == [{"guardrail": "no_secrets", "stage": "output",
                                              "tripped": False, "info": "clean"}]


async def test_a_tripwire_fails_the_step_with_its_reason(ledger: Ledger) -> None:
    @input_guardrail
    def no_refunds(ctx: RunContextWrapper[Any], agent: Any, text: Any
                   ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info={"why": "refunds are closed today"},
                                       tripwire_triggered="refund" in str(text))

    with FakeOpenAI([shop_model] * 5) as server:
        native = support_agent(chat_model(server), ledger, input_guardrails=[no_refunds])
        toolbox = Toolbox("shop")
        toolbox.add_agent(from_openai_agents(native))
        runtime, run = await start(toolbox, one_step("support_agent"))
        result = await run.wait()
        await runtime.aclose()
        assert server.completions == []  # the model was never asked
    assert result.status == "failed" and ledger.lines == []
    step = run.state.steps["help"]
    assert step.error_kind == "permanent" and step.attempts == 1  # not retried
    assert "the input guardrail 'no_refunds' tripped" in step.error
    assert "refunds are closed today" in step.error


async def test_a_structured_output_type_and_a_custom_model(ledger: Ledger) -> None:
    class Verdict(BaseModel):
        refunded: int
        note: str

    class Scripted(Model):  # a custom provider's Model: chainlab asks it like the SDK does
        def __init__(self) -> None:
            self.asked: list[Any] = []

        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                               tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                               **kw: Any) -> ModelResponse:
            self.asked.append((system_instructions, output_schema.name()))
            text = json.dumps({"refunded": 15, "note": "done"})
            message = ResponseOutputMessage(
                id="m1", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
            return ModelResponse(output=[message], usage=Usage(requests=1, input_tokens=9,
                                                               output_tokens=4),
                                 response_id=None)

        def stream_response(self, *args: Any, **kw: Any) -> Any:  # pragma: no cover
            raise NotImplementedError

    model = Scripted()
    native = SDKAgent(name="judge", instructions="Decide.", model=model, output_type=Verdict)
    agent = from_openai_agents(native)
    assert agent.output_json_schema == Verdict.model_json_schema()
    toolbox = Toolbox("t")
    toolbox.add_agent(agent)
    runtime, run = await start(toolbox, one_step("judge", "decide"))
    result = await run.wait()
    await runtime.aclose()
    assert result.outputs["help"] == {"refunded": 15, "note": "done"}
    assert model.asked == [("Decide.", "Verdict")]
    [turn] = run.transcript("help")
    assert turn["usage"]["tokens"] == 13


async def test_a_context_factory_and_a_tool_context(ledger: Ledger) -> None:
    seen: list[tuple[Any, str, str]] = []

    @function_tool
    def where(ctx: RunContextWrapper[Any], order_id: int) -> str:
        """Where an order is."""
        seen.append((ctx.context, ctx.tool_call_id, ctx.tool_name))  # type: ignore[attr-defined]
        return f"order {order_id} is at {ctx.context['shop']}"

    def model(request: RecordedRequest) -> Any:
        if turn_of(request) == 1:
            return tool_calls(Call("where", {"order_id": 1}, "w1"),
                              Call("where", {"order_id": 2}, "w2"))
        return "both at north"

    made: list[int] = []
    with FakeOpenAI([model] * 5) as server:
        native = SDKAgent(name="desk", instructions="Find orders.", model=chat_model(server),
                          tools=[where])
        toolbox = Toolbox("desk")
        toolbox.add_agent(from_openai_agents(
            native, tools={"where": {"side_effects": False}},
            context=lambda: made.append(1) or {"shop": "north"}))
        runtime, run = await start(toolbox, one_step("desk", "where?"))
        result = await run.wait()
        await runtime.aclose()
    assert result.status == "succeeded" and made == [1]
    assert seen == [({"shop": "north"}, "help/1.1", "where"),
                    ({"shop": "north"}, "help/1.2", "where")]


@pytest.mark.parametrize("described,status", [(True, "failed"), (False, "in_doubt")])
async def test_a_tools_error_fails_a_safe_step_and_leaves_an_unsafe_call_in_doubt(
        described: bool, status: str) -> None:
    """A tool described effect-free that raises is retried (safe), then fails and the model
    reads the error; a tool nobody described may have changed the world before it raised:
    in doubt for a person, never repeated."""
    @function_tool
    def archive(order_id: int) -> str:
        """Archive an order."""
        raise RuntimeError(f"order {order_id} is locked")

    def model(request: RecordedRequest) -> Any:
        return tool_calls(Call("archive", {"order_id": 3}, "a1")) if turn_of(request) == 1 \
            else "could not archive"

    with FakeOpenAI([model] * 5) as server:
        native = SDKAgent(name="clerk", instructions="Archive.", model=chat_model(server),
                          tools=[archive])
        toolbox = Toolbox("t")
        toolbox.add_agent(from_openai_agents(
            native, tools={"archive": {"side_effects": False}} if described else None))
        runtime, run = await start(toolbox, one_step("clerk", "archive 3"))
        with anyio.fail_after(20):
            result = await run.wait()
        step = run.state.steps["help/1.1"]
        assert step.status == status and step.attempts == (2 if described else 1)
        assert "order 3 is locked" in step.error
        if described:
            told = [m["content"] for m in server.completions[-1].messages
                    if m["role"] == "tool"]
            assert "order 3 is locked" in told[0] and result.status == "succeeded"
        else:
            assert run.waiting() == {"help/1.1": "in_doubt"} and len(server.completions) == 1
        await runtime.aclose()


# --------------------------------------------------------------------------- bad input


def test_an_object_that_is_not_an_agents_sdk_agent_is_refused() -> None:
    from pydantic_ai import Agent as PydanticAgent

    for thing in (object(), PydanticAgent(None, name="x")):
        with pytest.raises(AgentConversionError, match="not an OpenAI Agents SDK Agent"):
            from_openai_agents(thing)


def test_a_version_outside_the_supported_range_is_named(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    import agents

    monkeypatch.setattr(agents, "__version__", "0.26.0")
    with pytest.raises(AgentConversionError) as info:
        from_openai_agents(SDKAgent(name="x"))
    assert "OpenAI Agents SDK 0.26.0" in str(info.value) and ">=0.25,<0.26" in str(info.value)


def test_two_tools_of_one_name_are_refused(ledger: Ledger) -> None:
    native = support_agent("gpt-4o", ledger)
    twice = native.clone(tools=[native.tools[0], native.tools[0]])
    with pytest.raises(AgentConversionError, match="two tools are named 'lookup_order'"):
        from_openai_agents(twice)


def test_handoffs_in_a_circle_are_refused(ledger: Ledger) -> None:
    a = SDKAgent(name="a", instructions="A.", model="gpt-4o")
    b = SDKAgent(name="b", instructions="B.", model="gpt-4o", handoffs=[a])
    a.handoffs = [b]
    with pytest.raises(AgentConversionError, match=r"a -> b -> a"):
        from_openai_agents(a)


def _as_tool() -> Any:
    inner = SDKAgent(name="inner", instructions="I.", model="gpt-4o")
    return inner.as_tool(tool_name="inner", tool_description="ask inner")


@function_tool(needs_approval=lambda ctx, args, call_id: True)  # type: ignore[arg-type,return-value]
def _dynamic_approval(x: int) -> int:
    """x."""
    return x


@pytest.mark.parametrize("build,feature", [
    (lambda: SDKAgent(name="x", instructions=lambda ctx, agent: "now", model="gpt-4o"),
     "instructions are made by a function"),
    (lambda: SDKAgent(name="x", instructions="I.", model="gpt-4o", tools=[WebSearchTool()]),
     "its tool WebSearchTool is hosted"),
    (lambda: SDKAgent(name="x", instructions="I.", model="gpt-4o", tools=[_as_tool()]),
     "is an agent run as a tool"),
    (lambda: SDKAgent(name="x", instructions="I.", model="gpt-4o",
                      tools=[_dynamic_approval]), "needs_approval as a function"),
    (lambda: SDKAgent(name="x", instructions="I.", model="gpt-4o",
                      tool_use_behavior="stop_on_first_tool"), "tool_use_behavior"),
    (lambda: SDKAgent(name="x", instructions="I.", model="gpt-4o",
                      handoffs=[_handoff_object()]), "is a Handoff object"),
    (lambda: SDKAgent(name="!!", instructions="I.", model="gpt-4o"), "has no name"),
])
def test_features_with_no_mapping_are_refused_naming_them(build: Any, feature: str) -> None:
    with pytest.raises(AgentConversionError) as info:
        from_openai_agents(build())
    assert feature in str(info.value), str(info.value)
    assert info.value.fix


def _handoff_object() -> Any:
    from agents import handoff

    target = SDKAgent(name="t", instructions="T.", model="gpt-4o")
    return handoff(target, on_handoff=lambda ctx: None)


def test_tool_descriptions_are_checked(ledger: Ledger) -> None:
    native = support_agent("gpt-4o", ledger)
    with pytest.raises(AgentConversionError, match="did you mean 'lookup_order'"):
        from_openai_agents(native, tools={"lookup_ordr": {"side_effects": False}})
    with pytest.raises(AgentConversionError, match="requires approval in its own SDK"):
        from_openai_agents(native, tools={"refund": {"requires_confirmation": False}})
    agent = from_openai_agents(native, tools={"support_agent.lookup_order": {
        "side_effects": False}})  # a tool named with its agent's name
    assert not agent.own_tools[0].side_effects


@pytest.mark.parametrize("status,kind,asked", [(503, "transient", 3), (400, "permanent", 1)])
async def test_a_provider_that_raises_is_classified_naming_provider_and_model(
        status: int, kind: str, asked: int, ledger: Ledger) -> None:
    with FakeOpenAI([status] * 5) as server:
        toolbox = Toolbox("t")
        toolbox.add_agent(from_openai_agents(support_agent(chat_model(server), ledger)))
        runtime = Runtime(toolbox, MemoryStore())
        run = await runtime.start(one_step("support_agent"))
        with anyio.fail_after(30):
            result = await run.wait()
        assert len(server.completions) == asked
        await runtime.aclose()
    assert result.status == "failed"
    step = run.state.steps["help"]
    assert step.error_kind == kind
    assert "OpenAI Agents SDK OpenAIChatCompletionsModel model 'fake-model'" in step.error
    assert f"HTTP {status}" in step.error
