"""Agents written with other SDKs converted to chainlab agents (issue 45): the real SDK
packages, their own test models (Pydantic AI's ``FunctionModel`` / ``TestModel``) or their
OpenAI model classes over HTTP through the real ``openai`` client to the tests' scripted
server (:class:`~chainlab.testing.openai_server.FakeOpenAI`), and a runtime on a store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.agent.modes import forget_modes
from chainlab.runtime import Run, Runtime
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
