"""Bugs found in layers this package builds on (not owned here): minimal failing tests."""

from __future__ import annotations

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


async def test_wait_after_a_requested_rollback_waits_for_it() -> None:
    import asyncio

    tb = Toolbox("t")
    tb.tool(lambda what: "ref-" + what, name="book", side_effects=True,
            compensate=("unbook", {"ref": "{{ output }}"}))
    tb.tool(lambda ref: "ok", name="unbook", side_effects=True, idempotent=True)
    chain = Chain.from_dict({"name": "t", "steps": [
        {"id": "a", "tool": "book", "args": {"what": "x"}}]})
    runtime = Runtime(tb, MemoryStore())
    try:
        run = await runtime.start(chain)
        assert (await run.wait()).status == RunStatus.SUCCEEDED
        requested = asyncio.ensure_future(run.rollback())
        await asyncio.sleep(0)  # rollback() has started: the request is made
        with anyio.fail_after(1):
            result = await run.wait()
        await requested
        assert result.status == RunStatus.ROLLED_BACK
    finally:
        await runtime.aclose()
