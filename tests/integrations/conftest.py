"""Agents written with other SDKs converted to chainlab agents (issue 45): the real SDK
packages, their own test models (Pydantic AI's ``FunctionModel`` / ``TestModel``) or their
OpenAI model classes over HTTP through the real ``openai`` client to the tests' scripted
server (:class:`~chainlab.testing.openai_server.FakeOpenAI`), and a runtime on a store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import Run, Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import RecordedRequest
from chainlab.testing.openai_server import FakeOpenAI

# the agent tests' own fixtures: asyncio, and no OPENAI_* variable of the host reaches a test
from tests.agent.conftest import _no_openai_env, anyio_backend

__all__ = ["_no_openai_env", "anyio_backend"]

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


class Ledger:
    """What the shop's tools did, in order: ``(tool, args)`` (the effects a test counts)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def write(self, tool: str, **args: Any) -> None:
        self.lines.append((tool, args))

    def tools(self) -> list[str]:
        return [tool for tool, _ in self.lines]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def one_step(agent: str, request: str = "order 7 arrived broken, refund 15",
             step: str = "help", **args: Any) -> Chain:
    return Chain.from_dict({"name": "help", "steps": [
        {"id": step, "tool": f"agent:{agent}", "args": {"request": request, **args}}]})


async def start(toolbox: Toolbox, chain: Chain, store: Any = None) -> tuple[Runtime, Run]:
    runtime = Runtime(toolbox, store if store is not None else MemoryStore())
    return runtime, await runtime.start(chain)


def turn_of(request: RecordedRequest) -> int:
    """Which turn a request asks for: 1 + the model's answers it carries."""
    return 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
