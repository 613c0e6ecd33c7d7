"""Spans from a run's events (DESIGN §24): one trace per run, the root ``run CHAIN``, a span
per step attempt, ``chat MODEL`` / ``execute_tool NAME`` for an agent's turns and calls (the
GenAI conventions), span events for decisions, in_doubt, compensations and budget stops;
contents only with ``capture_content``, through the redaction seam."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from opentelemetry.trace import StatusCode

from chainlab import Chain, PermanentError, Toolbox
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from chainlab.tracing import run_trace
from tests.agent.conftest import Shop, agent_chain

from .conftest import Traced, attrs, parent_id

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def chain_of(*steps: dict[str, Any], name: str = "orders") -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps)})


def toolbox() -> Toolbox:
    tb = Toolbox("t")
    state = {"flaky": 0}

    @tb.tool
    def fetch(n: int) -> int:
        """Fetch a number."""
        return n * 2

    @tb.tool(retry={"max_attempts": 3, "delay_s": 0})
    def flaky(n: int) -> int:
        """Fails once, then works."""
        state["flaky"] += 1
        if state["flaky"] == 1:
            raise ValueError("not yet")
        return n

    @tb.tool
    def broken(n: int) -> int:
        """Always fails."""
        raise PermanentError(f"secret-free failure for {n}")

    @tb.tool(side_effects=True, requires_confirmation=True, idempotent=True,
             compensate=("undo", {"n": "{{ input.n }}"}))
    def pay(n: int) -> str:
        """Pay (a person approves)."""
        return f"paid {n}"

    @tb.tool(side_effects=True, idempotent=True)
    def undo(n: int) -> None:
        """Take a payment back."""

    return tb


async def test_one_trace_per_run_with_a_span_per_attempt_under_the_root(
        traced: Traced) -> None:
    runtime = Runtime(toolbox(), MemoryStore(), tracer_provider=traced.provider)
    run = await runtime.start(chain_of(
        {"id": "a", "tool": "fetch", "args": {"n": 2}},
        {"id": "b", "tool": "flaky", "args": {"n": "{{ steps.a.output }}"}}))
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    root = traced.one("run orders")
    assert root.parent is None and root.status.status_code == StatusCode.OK
    assert attrs(root)["chainlab.run.id"] == run.run_id
    assert attrs(root)["chainlab.run.status"] == "succeeded"
    assert {s.context.trace_id for s in traced.spans()} == {root.context.trace_id}
    a = traced.one("step a")
    assert parent_id(a) == root.context.span_id
    assert attrs(a)["chainlab.step.id"] == "a" and attrs(a)["chainlab.tool"] == "fetch"
    assert attrs(a)["chainlab.attempt"] == 1 and len(attrs(a)["chainlab.args_hash"]) > 8
    assert "chainlab.args" not in attrs(a)  # never the args unless allowed
    first, second = sorted(traced.named("step b"), key=lambda s: attrs(s)["chainlab.attempt"])
    assert first.status.status_code == StatusCode.ERROR
    assert attrs(first)["error.type"] == "execution_failed"
    assert second.status.status_code == StatusCode.OK and attrs(second)["chainlab.attempt"] == 2
    # the root spans its children, with the run's recorded start
    assert root.start_time <= a.start_time and root.end_time >= second.end_time
    assert root.start_time == int(run.record.created_at * 1e9)


async def test_decisions_compensations_and_failures_are_span_events_of_the_root(
        traced: Traced) -> None:
    runtime = Runtime(toolbox(), MemoryStore(), tracer_provider=traced.provider)
    run = await runtime.start(chain_of(
        {"id": "pay", "tool": "pay", "args": {"n": 3}},
        {"id": "boom", "tool": "broken", "args": {"n": 1}, "depends_on": ["pay"]}))
    assert (await run.wait()).status == RunStatus.SUSPENDED
    await run.approve("pay", by="ana")
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    await runtime.aclose()
    root = traced.one("run orders")
    assert root.status.status_code == StatusCode.ERROR
    marks = [(e.name, dict(e.attributes or {})) for e in root.events]
    assert ("chainlab.decision", {"chainlab.step.id": "pay", "chainlab.decision": "approved",
                                  "chainlab.decision.by": "ana"}) in marks
    assert ("chainlab.compensation", {"chainlab.step.id": "pay",
                                      "chainlab.outcome": "succeeded"}) in marks
    comp = traced.one("compensate pay")
    assert parent_id(comp) == root.context.span_id and attrs(comp)["chainlab.tool"] == "undo"
    boom = traced.one("step boom")
    assert attrs(boom)["error.type"] == "permanent"
    assert "secret-free failure for 1" in (boom.status.description or "")


async def agent_run(traced: Traced, redact: Any = None) -> None:
    """The shop's agent looks order 7 up, then answers (contents captured with ``redact``)."""
    shop = Shop()
    with FakeOpenAI() as server:
        shop.agent(server)
        server.add(tool_calls(Call("lookup", {"order": 7}, "call-1")), "Order 7 is delivered.")
        runtime = Runtime(shop.toolbox, MemoryStore(), tracer_provider=traced.provider,
                          capture_content=redact is not None)
        assert runtime.host.tracing is not None
        runtime.host.tracing.redact = redact
        run = await runtime.start(agent_chain())
        assert (await run.wait()).status == RunStatus.SUCCEEDED
        await runtime.aclose()


async def test_an_agent_is_invoke_agent_with_chat_turns_and_execute_tool_calls(
        traced: Traced) -> None:
    await agent_run(traced)
    root = traced.one("run help")
    agent = traced.one("invoke_agent support")
    assert parent_id(agent) == root.context.span_id
    assert attrs(agent)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(agent)["gen_ai.agent.name"] == "support"
    assert attrs(agent)["chainlab.step.id"] == "help"
    chats = sorted(traced.named("chat fake-model"), key=lambda s: s.start_time)
    assert len(chats) == 2 and {parent_id(c) for c in chats} == {agent.context.span_id}
    first = attrs(chats[0])
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "fake-model"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert isinstance(first["gen_ai.usage.input_tokens"], int)
    assert isinstance(first["gen_ai.usage.output_tokens"], int)
    assert "gen_ai.input.messages" not in first  # contents only when asked
    tool = traced.one("execute_tool lookup")
    assert parent_id(tool) == agent.context.span_id
    assert attrs(tool)["gen_ai.tool.name"] == "lookup"
    assert attrs(tool)["gen_ai.tool.call.id"] == "call-1"
    assert chats[0].end_time <= tool.start_time <= tool.end_time <= chats[1].start_time
    assert agent.start_time == chats[0].start_time and agent.end_time == chats[1].end_time


async def test_contents_only_with_capture_content_and_always_redacted(
        traced: Traced) -> None:
    def redact(value: Any) -> Any:  # the seam redaction (48c) fills: masks every 7
        if isinstance(value, dict):
            return {k: redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [redact(v) for v in value]
        if isinstance(value, str):
            return value.replace("7", "#")
        return "#" if value == 7 else value

    await agent_run(traced, redact)
    chat = sorted(traced.named("chat fake-model"), key=lambda s: s.start_time)
    sent = json.loads(attrs(chat[0])["gen_ai.input.messages"])
    assert sent[-1]["role"] == "user" and "order # arrived broken" in sent[-1]["content"]
    assert "Order # is delivered" in attrs(chat[1])["gen_ai.output.messages"]
    tool = traced.one("execute_tool lookup")
    assert json.loads(attrs(tool)["gen_ai.tool.call.arguments"]) == {"order": "#"}
    assert "#" in attrs(tool)["gen_ai.tool.call.result"]
    every = json.dumps([attrs(s) for s in traced.spans()], default=str)
    assert '"order": 7' not in every and "order 7" not in every


async def test_a_redactor_that_raises_keeps_the_content_out(traced: Traced,
                                                            caplog: Any) -> None:
    runtime = Runtime(toolbox(), MemoryStore(), tracer_provider=traced.provider,
                      capture_content=True)
    assert runtime.host.tracing is not None

    def broken(value: Any) -> Any:
        raise RuntimeError("redactor down")

    runtime.host.tracing.redact = broken
    run = await runtime.start(chain_of({"id": "a", "tool": "fetch", "args": {"n": 2}}))
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    a = traced.one("step a")
    assert "chainlab.args" not in attrs(a) and "chainlab.output" not in attrs(a)
    assert "redactor down" in caplog.text


async def test_without_a_provider_nothing_is_traced_and_false_turns_the_global_off(
        traced: Traced) -> None:
    assert Runtime(toolbox(), MemoryStore()).host.tracing is None
    assert Runtime(toolbox(), MemoryStore(), tracer_provider=False).host.tracing is None


async def test_a_run_taken_up_by_another_runtime_continues_its_trace_and_agent_span(
        traced: Traced, tmp_path: Any) -> None:
    """Two runtimes on one SQLite store (as two processes would be; the SIGKILL version is
    tests/tracing/test_processes.py): the first approves a refund and sees the agent's first
    turn, then stops driving mid-call; the second resumes. One root, one invoke_agent (both
    emitted by the second, with their recorded starts), the first turn's chat span from the
    first runtime under the same agent span id, the decision on the root."""
    from chainlab.store import SQLiteStore

    shop = Shop()
    chain = Chain.from_dict({"name": "help", "steps": [
        {"id": "refund", "tool": "refund", "args": {"order": 7, "amount": 15}},
        {"id": "help", "tool": "agent:support", "depends_on": ["refund"],
         "args": {"request": "where is order 7?"}}]})
    with FakeOpenAI() as server:
        shop.agent(server)
        server.add(tool_calls(Call("slow", {"order": 7}, "call-1")), "It is in aisle 4.")
        first = Runtime(shop.toolbox, SQLiteStore(tmp_path / "runs.db"),
                        tracer_provider=traced.provider)
        run = await first.start(chain)
        assert (await run.wait()).status == RunStatus.SUSPENDED
        await run.approve("refund", by="ana")
        with anyio.fail_after(10):
            while run.state.steps.get("help/1.1") is None or \
                    run.state.steps["help/1.1"].status != "running":
                await anyio.sleep(0.01)
        await first.aclose()  # stops driving: the call in flight is left to the next
        assert [s.name for s in traced.spans()] == ["step refund", "chat fake-model"]
        second = Runtime(shop.toolbox, SQLiteStore(tmp_path / "runs.db"),
                         tracer_provider=traced.provider)
        shop.gate.set()
        again = await second.resume(run.run_id, force=True)
        assert (await again.wait()).status == RunStatus.SUCCEEDED
        await second.aclose()
    root = traced.one("run help")
    agent = traced.one("invoke_agent support")
    chats = sorted(traced.named("chat fake-model"), key=lambda s: s.start_time)
    tool = traced.one("execute_tool slow")
    assert {s.context.trace_id for s in traced.spans()} == {root.context.trace_id}
    assert parent_id(agent) == root.context.span_id
    assert [parent_id(c) for c in chats] == [agent.context.span_id] * 2
    assert parent_id(tool) == agent.context.span_id
    assert agent.start_time == chats[0].start_time  # the first turn's recorded start
    assert root.start_time == int(run.record.created_at * 1e9)
    marks = [(e.name, dict(e.attributes or {})) for e in root.events]
    assert ("chainlab.decision", {"chainlab.step.id": "refund",
                                  "chainlab.decision": "approved",
                                  "chainlab.decision.by": "ana"}) in marks


async def test_another_providers_tracer_gets_the_spans_through_the_api(traced: Traced) -> None:
    """A provider that is not the SDK's: spans go through ``start_span``, in the run's trace;
    such a tracer cannot give the root the derived id the children name, so the root hangs
    under that id too (documented)."""

    class ApiOnly:  # a provider whose tracer is not the SDK's class
        def __init__(self, inner: Any):
            self.inner = inner

        def get_tracer(self, *args: Any, **kw: Any) -> Any:
            tracer = self.inner.get_tracer(*args, **kw)

            class Wrapped:
                def start_span(self, *a: Any, **k: Any) -> Any:
                    return tracer.start_span(*a, **k)

            return Wrapped()

    runtime = Runtime(toolbox(), MemoryStore(), tracer_provider=ApiOnly(traced.provider))
    run = await runtime.start(chain_of({"id": "a", "tool": "fetch", "args": {"n": 2}}))
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    root, a = traced.one("run orders"), traced.one("step a")
    derived = run_trace(run.run_id, run.record.meta)
    assert a.context.trace_id == root.context.trace_id == derived.trace_id
    assert parent_id(a) == parent_id(root) == derived.root_span_id != root.context.span_id


async def test_a_run_the_sampler_leaves_out_makes_no_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(toolbox(), MemoryStore(), tracer_provider=provider)
    run = await runtime.start(chain_of({"id": "a", "tool": "fetch", "args": {"n": 2}}))
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    assert list(exporter.get_finished_spans()) == []


async def test_an_unsafe_call_in_doubt_and_a_persons_resolution_are_span_events(
        traced: Traced) -> None:
    tb = Toolbox("t")

    @tb.tool(side_effects=True)
    async def charge(n: int) -> int:
        """Charge (not idempotent): too slow for its timeout, so in doubt."""
        await anyio.sleep(5)
        return n

    runtime = Runtime(tb, MemoryStore(), tracer_provider=traced.provider)
    run = await runtime.start(chain_of({"id": "x", "tool": "charge", "args": {"n": 1},
                                        "timeout_s": 0.05}))
    assert (await run.wait()).status == RunStatus.SUSPENDED
    await run.resolve("x", output=1, by="bob", note="it went through")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    await runtime.aclose()
    x = traced.one("step x")
    assert attrs(x)["error.type"] == "timeout" and attrs(x)["chainlab.outcome"] == "step_in_doubt"
    assert [e.name for e in x.events] == ["chainlab.timed_out"]
    root = traced.one("run orders")
    marks = {e.name: dict(e.attributes or {}) for e in root.events}
    assert marks["chainlab.in_doubt"]["error.type"] == "timeout"
    assert marks["chainlab.decision"] == {"chainlab.step.id": "x",
                                          "chainlab.decision": "resolved:succeeded",
                                          "chainlab.decision.by": "bob"}


async def test_a_budget_stop_is_a_span_event_of_the_root(traced: Traced) -> None:
    from chainlab.plan.schema import RunOptions

    shop = Shop()
    with FakeOpenAI() as server:
        shop.agent(server)
        server.add(*[tool_calls(Call("lookup", {"order": i}, f"c{i}")) for i in range(4)])
        runtime = Runtime(shop.toolbox, MemoryStore(), tracer_provider=traced.provider)
        run = await runtime.start(agent_chain(), options=RunOptions.model_validate(
            {"budget": {"max_tokens": 60}}))
        assert (await run.wait()).status == RunStatus.SUSPENDED
        assert run.steps["help"].reason == "budget_exceeded"
        await run.reject("help", reason="too costly", by="carol")
        await run.wait()
        await runtime.aclose()
    root = traced.one("run help")
    names = [e.name for e in root.events]
    assert names.index("chainlab.budget_stop") < names.index("chainlab.decision")
    decision = next(e for e in root.events if e.name == "chainlab.decision")
    assert dict(decision.attributes or {})["chainlab.decision.by"] == "carol"
    agent = traced.one("invoke_agent support")
    assert attrs(agent)["error.type"] and agent.status.status_code == StatusCode.ERROR
