from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import EventRecorder, ManualClock


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def chain_of(*steps: dict[str, Any], name: str = "t", **options: Any) -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps), "options": options})


def S(step_id: str, deps: Sequence[str] = (), tool: str = "work", **extra: Any) -> dict[str, Any]:
    """A step dict whose tool gets ``tag=step_id`` (so tracked tools log which step ran)."""
    return {
        "id": step_id,
        "tool": tool,
        "depends_on": list(deps),
        "args": {"tag": step_id, **extra.pop("args", {})},
        **extra,
    }


class Harness:
    """A toolbox + in-memory runtime + recorder, for scheduler tests."""

    def __init__(self) -> None:
        self.toolbox = Toolbox("test")
        self.clock = ManualClock()
        self.store = MemoryStore()
        self.runtime = Runtime(self.toolbox, self.store, clock=self.clock)
        self.timeline = itertools.count()
        self.active = 0
        self.max_active = 0
        self.log: list[tuple[str, str]] = []  # ("start"|"end", step_id) in order

    def tracked(
        self, name: str, *, seconds: float = 0.0, yields: int = 1, result: Any = None, **meta: Any
    ) -> None:
        """A tool that logs start/end (by its `tag` arg), tracks concurrency, yields to the
        loop `yields` times (or sleeps `seconds`), and returns `result` or its args."""
        h = self

        async def fn(tag: str = "", **kwargs: Any) -> Any:
            h.active += 1
            h.max_active = max(h.max_active, h.active)
            h.log.append(("start", tag))
            try:
                if seconds:
                    await anyio.sleep(seconds)
                for _ in range(yields):
                    await anyio.sleep(0)
            finally:
                h.active -= 1
                h.log.append(("end", tag))
            return {"tag": tag, **kwargs} if result is None else result

        fn.__name__ = name
        self.toolbox.tool(fn, name=name, **meta)

    def starts(self) -> list[str]:
        return [tag for kind, tag in self.log if kind == "start"]

    async def run(self, chain: Chain, context: dict[str, Any] | None = None, **kw: Any):
        rec = EventRecorder()
        run = await self.runtime.start(chain, context, **kw)
        run.subscribe(rec)
        result = await run.wait()
        return run, result, rec


@pytest.fixture
def h() -> Harness:
    return Harness()
