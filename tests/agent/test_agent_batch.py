"""A model's turn may call ordinary tools, a sub-chain (``chain:NAME``), another agent
(``agent:NAME``) and a remote job: one batch, each run as the same kind it is in a chain.
And an agent is validated with the chain that uses it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from chainlab import Agent, CallContext, Chain, JobStatus, PlanError
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import Shop, agent_chain, start, tool_messages

pytestmark = pytest.mark.anyio
K = EventKind

ESCALATE = Chain.from_dict({
    "name": "escalate", "description": "Open a ticket and tell the team.",
    "inputs": {"order": {"type": "integer"}, "why": {"type": "string", "default": "unsaid"}},
    "output": "{{ steps.ticket.output }}",
    "steps": [{"id": "look", "tool": "lookup", "args": {"order": "{{ context.order }}"}},
              {"id": "ticket", "tool": "label", "args": {
                  "order": "{{ context.order }}", "text": "escalated: {{ context.why }}"}}]})


def add_job(shop: Shop) -> dict[str, int]:
    """A remote job (``audit``) that ends at its second poll; counts submissions."""
    submitted: dict[str, int] = {}
    polls = itertools.count(1)

    class Audit:
        async def submit(self, order: int, ctx: CallContext) -> dict[str, Any]:
            submitted[ctx.idempotency_key] = submitted.get(ctx.idempotency_key, 0) + 1
            return {"job": f"audit-{order}"}

        async def poll(self, handle: dict[str, Any]) -> JobStatus:
            if next(polls) % 2 == 0:
                return JobStatus.succeeded({"audited": handle["job"]})
            return JobStatus.running(progress=0.5)

    shop.toolbox.job(Audit, name="audit", poll_every_s=0.01, side_effects=True)
    return submitted


def billing_answers(request: RecordedRequest) -> Any:
    """The sub-agent: one lookup, then its answer."""
    if any(m.get("role") == "tool" for m in request.messages):
        return "billing: order 7 was paid by card"
    return Call("lookup", {"order": 7}, "b-look")


async def test_tools_a_sub_chain_a_sub_agent_and_a_job_run_as_one_batch(shop: Shop) -> None:
    submitted = add_job(shop)
    shop.toolbox.add_chain(ESCALATE)
    with FakeOpenAI() as billing_server, FakeOpenAI() as server:
        billing_server.add(billing_answers, billing_answers)
        shop.toolbox.add_agent(Agent("billing", "You answer billing questions.", ["lookup"],
                                     model="m", base_url=billing_server.base_url))
        shop.agent(server, tools=["lookup", "chain:escalate", "agent:billing", "audit"])
        server.add(tool_calls(Call("lookup", {"order": 7}, "c1"),
                              Call("chain__escalate", {"order": 7, "why": "broken"}, "c2"),
                              Call("agent__billing", {"request": "how was order 7 paid?"},
                                   "c3"),
                              Call("audit", {"order": 7}, "c4")),
                   "Escalated; paid by card; audited.")
        runtime, run = await start(shop, agent_chain())
        result = await run.wait()
        assert result.status == RunStatus.SUCCEEDED, result.errors
        # the functions the model saw: a name OpenAI allows for each
        offered = [t["function"]["name"] for t in server.completions[0].tools or []]
        assert offered == ["lookup", "chain__escalate", "agent__billing", "audit"]
        escalate = server.completions[0].tools[1]["function"]  # type: ignore[index]
        assert escalate["description"] == "Open a ticket and tell the team."
        assert escalate["parameters"]["required"] == ["order"]
        # each call ran as its kind: a sub-chain's steps under its call, the sub-agent's
        # calls under its own, the job submitted once
        steps = run.steps
        assert {s: str(steps[s].status) for s in ("help/1.1", "help/1.2", "help/1.3",
                                                  "help/1.4")} == dict.fromkeys(
            ("help/1.1", "help/1.2", "help/1.3", "help/1.4"), "succeeded")
        assert steps["help/1.2/ticket"].output == "labelled 7"
        assert steps["help/1.2"].args == {"order": 7, "why": "broken"}
        assert steps["help/1.3/1.1"].output["order"] == 7
        assert steps["help/1.3"].output == "billing: order 7 was paid by card"
        assert steps["help/1.4"].output == {"audited": "audit-7"}
        assert list(submitted.values()) == [1]
        assert [m for _, m in tool_messages(server.completions[1])] == [
            '{"order":7,"status":"delivered","total":40}', '"labelled 7"',
            '"billing: order 7 was paid by card"', '{"audited":"audit-7"}']
        assert len(billing_server.completions) == 2
        await runtime.aclose()


async def test_a_failing_step_inside_a_called_sub_chain_goes_back_as_that_calls_error(
        shop: Shop, server: FakeOpenAI) -> None:
    shop.toolbox.add_chain(Chain.from_dict({"name": "archive", "steps": [
        {"id": "gone", "tool": "broken", "args": {"order": "{{ context.order }}"}},
        {"id": "after", "tool": "lookup", "args": {"order": "{{ context.order }}"},
         "depends_on": ["gone"]}]}))
    shop.agent(server, tools=["chain:archive", "lookup"])
    server.add(tool_calls(Call("chain__archive", {"order": 3}), Call("lookup", {"order": 3})),
               "Could not archive it.")
    runtime, run = await start(shop, agent_chain())
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED  # a contained failure: not the run's
    assert run.steps["help/1.1"].status == StepStatus.FAILED
    assert run.steps["help/1.1/after"].status == StepStatus.SKIPPED
    assert run.steps["help/1.2"].status == StepStatus.SUCCEEDED
    told = tool_messages(server.completions[1])[0][1]
    assert told == "error (execution_failed): sub-chain steps did not succeed: " \
        "help/1.1/gone, help/1.1/after"
    await runtime.aclose()


def test_an_agent_naming_an_unknown_tool_is_a_validation_problem(shop: Shop) -> None:
    shop.toolbox.add_agent(Agent("support", "help", ["lookup", "refnd", "chain:nope"],
                                 model="m"))
    with pytest.raises(PlanError) as info:
        agent_chain().validate(shop.toolbox)
    problems = [(p.code, p.step_id, p.field, p.message) for p in info.value.problems]
    assert problems == [
        ("unknown_tool", "help", "tool", "agent 'support' names unknown tool 'refnd'; did you "
         "mean 'refund'?; register it in toolbox 'shop' or fix the agent's tools"),
        ("unknown_tool", "help", "tool", "agent 'support' names unknown sub-chain 'nope'; "
         "register it with toolbox.add_chain(chain) or fix the agent's tools")]


def test_agents_that_call_each_other_in_a_circle_are_a_validation_problem(shop: Shop) -> None:
    shop.toolbox.add_agent(Agent("support", "help", ["agent:billing"], model="m"))
    shop.toolbox.add_agent(Agent("billing", "bill", ["lookup", "agent:support"], model="m"))
    with pytest.raises(PlanError) as info:
        agent_chain().validate(shop.toolbox)
    assert [(p.code, p.message) for p in info.value.problems] == [
        ("recursive_chain", "agent recursion support -> billing -> support: an agent may not "
         "call itself through its tools")]


def test_an_agent_step_needs_its_request(shop: Shop) -> None:
    shop.toolbox.add_agent(Agent("support", "help", ["lookup"], model="m"))
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "help", "tool": "agent:support", "args": {"question": "x"}}]})
    with pytest.raises(PlanError) as info:
        chain.validate(shop.toolbox)
    assert sorted(p.message for p in info.value.problems) == [
        "missing required arg 'request' for tool 'agent:support'",
        "tool 'agent:support' has no parameter 'question'; did you mean 'request'?"]


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"instructions": ""}, "instructions must be a non-empty text"),
    ({"tools": "lookup"}, "tools must be a list of names"),
    ({"tools": ["lookup", "lookup"]}, "tools ['lookup'] are named twice"),
    ({"max_turns": 0}, "max_turns must be an int from 1 to 10000"),
    ({"max_calls_per_turn": True}, "max_calls_per_turn must be an int"),
    ({"temperature": 3}, "temperature must be a number from 0 to 2"),
    ({"output_schema": "json"}, "output_schema must be a JSON Schema (a dict) or a pydantic"),
    ({"output_schema": {"type": "nonsense"}}, "output_schema is not a valid JSON Schema"),
])
def test_a_badly_defined_agent_is_refused_naming_the_setting(kwargs: dict[str, Any],
                                                             says: str) -> None:
    from chainlab import ToolDefinitionError

    args: dict[str, Any] = {"name": "a", "instructions": "help", "tools": [], **kwargs}
    with pytest.raises(ToolDefinitionError, match=says.replace("[", r"\[").replace(
            "(", r"\(").replace(")", r"\)")):
        Agent(**args)


def test_the_planner_can_plan_agent_steps(shop: Shop) -> None:
    shop.toolbox.add_agent(Agent("support", "Help customers.", ["lookup"], model="m"))
    schema = Chain.json_schema(shop.toolbox)
    variants = {v["properties"]["tool"]["const"]: v for v in schema["$defs"]["Step"]["anyOf"]}
    step = variants["agent:support"]
    assert step["description"] == "Help customers."
    assert step["properties"]["args"]["required"] == ["request"]
