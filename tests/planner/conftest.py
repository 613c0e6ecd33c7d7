"""Shared fixtures: a project toolbox whose side effects are recorded, a scripted
OpenAI-compatible server, planners pointed at it, and an in-memory runtime."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from chainlab import Chain, Toolbox
from chainlab.planner.openai import OpenAIPlanner
from chainlab.planner.output import forget_modes
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock
from chainlab.testing.openai_server import FakeOpenAI

REQUEST = ("plan an approval system, estimate effort, build a timeline, "
           "put the tasks into the current table")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's OPENAI_* variables must never reach a test (or a real endpoint)."""
    for name in ("OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _fresh_mode_memory() -> Iterator[None]:
    """Each test negotiates from scratch: a port the OS hands out again must not inherit
    the output mode another test's server took."""
    forget_modes()
    yield
    forget_modes()


class Task(BaseModel):
    name: str
    days: float = 1.0


class Draft(BaseModel):
    title: str
    tasks: list[Task]


class Project:
    """The toolbox of the issue's example; every call is recorded in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.toolbox = tb = Toolbox("project")
        calls = self.calls

        @tb.tool
        def draft_plan(goal: str) -> Draft:
            """Draft a project plan (phases and tasks) for a goal."""
            calls.append(("draft_plan", {"goal": goal}))
            return Draft(title=goal[:40], tasks=[Task(name="design"), Task(name="build")])

        @tb.tool
        def estimate_effort(tasks: list[Task]) -> list[Task]:
            """Estimate the effort of each task in days."""
            calls.append(("estimate_effort", {"tasks": [t.name for t in tasks]}))
            return [Task(name=t.name, days=2.0 + i) for i, t in enumerate(tasks)]

        @tb.tool
        def build_timeline(estimates: list[Task], start: str = "2025-01-06") -> list[dict]:
            """Build a timeline from effort estimates."""
            calls.append(("build_timeline", {"estimates": len(estimates), "start": start}))
            return [{"task": t.name, "days": t.days, "start": start} for t in estimates]

        @tb.tool(side_effects=True,
                 compensate=("remove_rows", {"table_id": "{{ input.table_id }}"}))
        def add_rows(table_id: str, rows: list[dict]) -> dict:
            """Put rows into a table."""
            calls.append(("add_rows", {"table_id": table_id, "rows": rows}))
            return {"table_id": table_id, "added": len(rows)}

        @tb.tool(side_effects=True, idempotent=True)
        def remove_rows(table_id: str) -> int:
            """Remove the rows added to a table."""
            calls.append(("remove_rows", {"table_id": table_id}))
            return 0

        @tb.tool(side_effects=True)
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            calls.append(("send_email", {"to": to, "body": body}))
            return "sent"

    def called(self, tool: str) -> list[dict[str, Any]]:
        return [args for name, args in self.calls if name == tool]

    def runtime(self, **kw: Any) -> Runtime:
        return Runtime(self.toolbox, MemoryStore(), clock=ManualClock(), **kw)


@pytest.fixture
def project() -> Project:
    return Project()


def valid_plan() -> dict[str, Any]:
    """What a good model answers for REQUEST."""
    return {
        "name": "approval-system",
        "description": "Draft, estimate, schedule, then store the tasks.",
        "steps": [
            {"id": "draft", "tool": "draft_plan", "args": {"goal": "an approval system"}},
            {"id": "estimate", "tool": "estimate_effort",
             "args": {"tasks": "{{ steps.draft.output.tasks }}"}},
            {"id": "timeline", "tool": "build_timeline",
             "args": {"estimates": "{{ steps.estimate.output }}"}},
            {"id": "store", "tool": "add_rows",
             "args": {"table_id": "{{ context.table_id }}", "rows": "{{ steps.timeline.output }}"}},
        ],
    }


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeOpenAI]]:
    """``fake(*script)`` starts a FakeOpenAI closed at teardown."""
    servers: list[FakeOpenAI] = []

    def start(*script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script=script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def planner_for(server: FakeOpenAI, **kw: Any) -> OpenAIPlanner:
    """A planner on the fake server: short timeout, no client retries."""
    kw.setdefault("timeout", 0.5)
    kw.setdefault("max_retries", 0)
    return OpenAIPlanner(model="fake-model", base_url=server.base_url, api_key="test-key", **kw)


def chain_args(chain: Chain) -> dict[str, dict[str, Any]]:
    return {s.id: s.args for s in chain.steps}
