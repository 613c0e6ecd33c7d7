"""The tools and chain of the trace-across-processes tests: ``fetch`` (quick), ``wait``
(blocks while the file named by ``CHAINLAB_TRACE_HOLD`` exists: the window in which the test
SIGKILLs the process that runs it), as ``tests.tracing.tracedtools:toolbox``; and a driver
(``python -m tests.tracing.tracedtools DB URL start TRACEPARENT`` / ``... resume RUN_ID``)
that sends its spans to the OTLP/HTTP receiver at URL through :func:`configure_otlp`."""

from __future__ import annotations

import os
import sys
import time

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.tracing.otlp import configure_otlp

toolbox = Toolbox("traced")


@toolbox.tool
def fetch(n: int) -> int:
    """Fetch a number."""
    return n * 2


@toolbox.tool
def wait(n: int) -> int:
    """Wait while the hold file exists."""
    hold = os.environ.get("CHAINLAB_TRACE_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.02)
    return n + 1


@toolbox.tool(side_effects=True, requires_confirmation=True, idempotent=True)
def pay(n: int) -> str:
    """Pay (a person approves)."""
    return f"paid {n}"


CHAIN = Chain.from_dict({"name": "traced", "steps": [
    {"id": "a", "tool": "fetch", "args": {"n": 2}},
    {"id": "b", "tool": "wait", "args": {"n": "{{ steps.a.output }}"}},
    {"id": "c", "tool": "fetch", "args": {"n": "{{ steps.b.output }}"}}]})


async def main(db: str, what: str, arg: str) -> None:
    async with Runtime(toolbox, SQLiteStore(db)) as runtime:
        if what == "start":
            run = await runtime.start(CHAIN, meta={"traceparent": arg})
            print(run.run_id, flush=True)
        else:
            run = await runtime.resume(arg, force=True)
        print((await run.wait()).status, flush=True)


if __name__ == "__main__":
    db, url, what, arg = sys.argv[1:5]
    provider = configure_otlp(url, schedule_delay_millis=20)
    anyio.run(main, db, what, arg)
    assert provider is not None
    provider.shutdown()  # the spans still queued leave now
