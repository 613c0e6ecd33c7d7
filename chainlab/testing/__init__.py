"""Test doubles for chains and your own tools: an injected clock, flaky/slow/recording tools,
an event recorder, (in :mod:`chainlab.testing.hostile`) a hypothesis strategy of hostile
JSON values to push through a door, with its oracle, (in
:mod:`chainlab.testing.openai_server`) a scripted OpenAI-compatible HTTP server for
planner tests and demos (its script items in :mod:`chainlab.testing.openai_script`), and (in
:mod:`chainlab.testing.mcp_server`, ``python -m chainlab.testing.mcp_server``) a real MCP
server whose tools cover every annotation case, (in :mod:`chainlab.testing.job_server`) a
real job backend for remote jobs (``JobServer``; the server process itself in
:mod:`chainlab.testing.job_backend`), and (in :mod:`chainlab.testing.replay`
and :mod:`chainlab.testing.export`) the replay of a recorded run and its export as a
pytest regression test. They are product code (tested like
it) because users need them too; nothing outside tests and demos uses them.

    from chainlab.testing import FlakyTool, ManualClock, RecordingTool
    flaky = FlakyTool(failures=2).register(toolbox, "fetch")
    runtime = Runtime(toolbox, MemoryStore(), clock=ManualClock())
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from chainlab.errors import TransientError
from chainlab.events import Event
from chainlab.tools import Tool, Toolbox

__all__ = ["EventRecorder", "FakeOpenAI", "FlakyTool", "JobServer", "ManualClock", "RecordingTool",
           "SlowTool"]


def __getattr__(name: str) -> Any:
    if name == "FakeOpenAI":  # an HTTP server: loaded only when asked for
        from chainlab.testing.openai_server import FakeOpenAI

        return FakeOpenAI
    if name == "JobServer":  # likewise (a subprocess)
        from chainlab.testing.job_server import JobServer

        return JobServer
    raise AttributeError(f"module 'chainlab.testing' has no attribute {name!r}")


class ManualClock:
    """A clock that moves only when told (or when the runtime sleeps on it).

    ``sleep(s)`` advances time by ``s`` at once and yields to the loop, so back-off waits are
    exact and instant in tests. Timeouts (``timeout_s``) still use the loop's real clock.
    """

    def __init__(self, start: float = 1_800_000_000.0):
        self._t = float(start)
        self.slept: list[float] = []

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        self._t += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._t += seconds
        await anyio.sleep(0)


class _FakeTool:
    """Shared by the fakes: registers itself in a toolbox with the given metadata."""

    def register(self, toolbox: Toolbox, name: str, **meta: Any) -> Tool:
        """Register this fake in ``toolbox`` as tool ``name`` with the given metadata."""
        return toolbox.add(Tool(self.__call__, name=name, **meta))

    async def __call__(self, **kwargs: Any) -> Any:  # overridden by every fake
        raise NotImplementedError


class FlakyTool(_FakeTool):
    """Fails ``failures`` times (raising ``error``), then returns ``result`` (default: the
    kwargs it got). ``calls`` counts every call."""

    def __init__(
        self, failures: int = 1, *, error: BaseException | None = None, result: Any = None
    ):
        self.failures = failures
        self.error = error if error is not None else TransientError("flaky failure")
        self.result = result
        self.calls = 0

    async def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return dict(kwargs) if self.result is None else self.result


class SlowTool(_FakeTool):
    """Takes ``seconds`` (anyio sleep), or waits until ``gate`` is set when given."""

    def __init__(
        self, seconds: float = 0.01, *, gate: anyio.Event | None = None, result: Any = "done"
    ):
        self.seconds = seconds
        self.gate = gate
        self.result = result
        self.calls = 0

    async def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        else:
            await anyio.sleep(self.seconds)
        return self.result


@dataclass(frozen=True, slots=True)
class Call:
    """One call seen by a RecordingTool: ``start``/``end`` are positions on one shared
    logical timeline (a counter), so overlap checks are exact and timing-independent."""

    tool: str
    args: Mapping[str, Any]
    start: int
    end: int | None


class RecordingTool(_FakeTool):
    """Records every call's args and its start/end on a logical timeline shared by all
    RecordingTools built with the same ``timeline``; sleeps ``seconds`` in between."""

    _default_timeline = itertools.count()

    def __init__(
        self,
        seconds: float = 0.0,
        *,
        result: Callable[..., Any] | Any = None,
        timeline: itertools.count[int] | None = None,
        name: str = "recording",
    ):
        self.seconds = seconds
        self.result = result
        self.timeline = timeline if timeline is not None else RecordingTool._default_timeline
        self.name = name
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    async def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            index = len(self.calls)
            self.calls.append(Call(self.name, dict(kwargs), next(self.timeline), None))
        await anyio.sleep(self.seconds)
        with self._lock:
            c = self.calls[index]
            self.calls[index] = Call(c.tool, c.args, c.start, next(self.timeline))
        if callable(self.result):
            return self.result(**kwargs)
        return dict(kwargs) if self.result is None else self.result

    @staticmethod
    def overlapping(a: Call, b: Call) -> bool:
        a_end = a.end if a.end is not None else float("inf")
        b_end = b.end if b.end is not None else float("inf")
        return a.start < b_end and b.start < a_end


class EventRecorder:
    """A subscriber that keeps every event: ``run.subscribe(recorder)``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self, step_id: str | None = None) -> list[str]:
        return [e.kind for e in self.events if step_id is None or e.step_id == step_id]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def started(self) -> list[str]:
        """Step ids in the order their attempts started."""
        return [e.step_id for e in self.events if e.kind == "step_started" and e.step_id]
