"""Agent steps over real HTTP: the real ``openai`` client against a scripted
OpenAI-compatible server (:class:`~chainlab.testing.openai_server.FakeOpenAI`), a shop's
tools whose calls are recorded, and a runtime on an in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest

from chainlab import Agent, CallContext, Chain, PermanentError, Toolbox
from chainlab.agent.modes import forget_modes
from chainlab.runtime import Run, RunResult, Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import RecordedRequest
from chainlab.testing.openai_server import FakeOpenAI

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The host's OPENAI_* variables must never reach a test (or a real endpoint)."""
    for name in ("OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    forget_modes()
    yield
    forget_modes()


class Shop:
    """A shop's tools; every call (and compensation) is recorded in ``calls`` as
    ``(step_id, tool, args)``; ``gate`` holds ``slow`` until set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.gate = anyio.Event()
        self.toolbox = tb = Toolbox("shop")

        def note(ctx: CallContext, tool: str, **args: Any) -> None:
            self.calls.append((ctx.step_id, tool, args))

        @tb.tool
        def lookup(order: int, ctx: CallContext) -> dict[str, Any]:
            """Find an order."""
            note(ctx, "lookup", order=order)
            return {"order": order, "status": "delivered", "total": 40}

        @tb.tool(side_effects=True, requires_confirmation=True,
                 compensate=("unrefund", {"order": "{{ input.order }}"}),
                 preview=lambda args: f"refund {args['amount']} on order {args['order']}")
        def refund(order: int, amount: int, ctx: CallContext) -> dict[str, Any]:
            """Refund an order (a person approves it)."""
            note(ctx, "refund", order=order, amount=amount)
            return {"order": order, "refunded": amount}

        @tb.tool(side_effects=True, idempotent=True)
        def unrefund(order: int, ctx: CallContext) -> None:
            """Take a refund back (the compensation of refund)."""
            note(ctx, "unrefund", order=order)

        @tb.tool(side_effects=True, idempotent=True,
                 compensate=("unlabel", {"order": "{{ input.order }}"}))
        def label(order: int, text: str, ctx: CallContext) -> str:
            """Label an order."""
            note(ctx, "label", order=order, text=text)
            return f"labelled {order}"

        @tb.tool(side_effects=True, idempotent=True)
        def unlabel(order: int, ctx: CallContext) -> None:
            note(ctx, "unlabel", order=order)

        @tb.tool
        async def slow(order: int, ctx: CallContext) -> str:
            """Check the warehouse (slow)."""
            await self.gate.wait()
            note(ctx, "slow", order=order)
            return f"warehouse has {order}"

        @tb.tool
        def broken(order: int, ctx: CallContext) -> str:
            """Always fails."""
            note(ctx, "broken", order=order)
            raise PermanentError(f"order {order} is archived")

    def agent(self, server: FakeOpenAI, tools: list[str] | None = None, *,
              name: str = "support", **kw: Any) -> Agent:
        agent = Agent(name, "You help customers with their orders.",
                      tools=tools if tools is not None else ["lookup", "refund", "label",
                                                              "slow", "broken"],
                      model="fake-model", base_url=server.base_url, api_key="test", **kw)
        self.toolbox.add_agent(agent)
        return agent

    def tools_called(self) -> list[tuple[str, str]]:
        return [(step_id, tool) for step_id, tool, _ in self.calls]


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def agent_chain(request: str = "order 7 arrived broken, please refund 15",
                agent: str = "support", **step: Any) -> Chain:
    return Chain.from_dict({"name": "help", "steps": [
        {"id": "help", "tool": f"agent:{agent}", "args": {"request": request}, **step}]})


async def start(shop: Shop, chain: Chain, **kw: Any) -> tuple[Runtime, Run]:
    runtime = Runtime(shop.toolbox, MemoryStore())
    run = await runtime.start(chain, **kw)
    return runtime, run


async def run_agent(shop: Shop, server: FakeOpenAI, *answers: Any, chain: Chain | None = None,
                    **agent: Any) -> tuple[Runtime, Run, RunResult]:
    """Register the shop's agent (``agent``: its settings) on ``server``, script the model's
    ``answers``, start ``chain`` (default: :func:`agent_chain`) and wait for the run."""
    shop.agent(server, **agent)
    server.add(*answers)
    runtime, run = await start(shop, chain or agent_chain())
    return runtime, run, await run.wait()


def tool_messages(request: RecordedRequest) -> list[tuple[str, str]]:
    """(tool_call_id, content) of the tool results a request carries, in order."""
    return [(m["tool_call_id"], m["content"]) for m in request.messages
            if m.get("role") == "tool"]


def by_turn(*answers: Any) -> Callable[[RecordedRequest], Any]:
    """A script item that answers by the request's turn (1 + the assistant messages it
    carries), whatever how often a turn is asked: the same answer again."""
    def answer(request: RecordedRequest) -> Any:
        turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
        return answers[turn - 1]
    return answer
