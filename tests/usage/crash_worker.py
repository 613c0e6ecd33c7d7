"""A process that starts (``start``) or resumes (``resume``) the paid chain of the usage crash
test on a SQLite file. In ``start`` mode the second step reports its usage, says so in
``MARKER`` and then hangs until the parent kills the process with SIGKILL.

    python -m tests.usage.crash_worker DB start|resume RUN_ID MARKER

A RUN_ID starting with ``unsafe`` runs the UNSAFE chain: its second step is a
non-idempotent side effect, so the resumed run leaves it in doubt for a person.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from chainlab import CallContext, Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

MODE = sys.argv[2] if len(sys.argv) > 2 else "resume"
MARKER = Path(sys.argv[4]) if len(sys.argv) > 4 else Path("marker")

toolbox = Toolbox("paid")


@toolbox.tool
def first(ctx: CallContext) -> str:
    ctx.report_usage(input_tokens=100, output_tokens=10, cost=0.01)
    return "one"


@toolbox.tool
def second(previous: str, ctx: CallContext) -> str:
    ctx.report_usage(input_tokens=200, output_tokens=20, cost=0.02)
    if MODE == "start":
        MARKER.write_text("second is running")
        time.sleep(600)  # the parent kills this process here
    return previous + " two"


@toolbox.tool(side_effects=True)
def send(text: str) -> str:
    """Not idempotent: a crash during it leaves the step in doubt."""
    if MODE == "start":
        MARKER.write_text("send is running")
        time.sleep(600)
    return "sent " + text


UNSAFE = Chain.from_dict({"name": "unsafe", "steps": [
    {"id": "a", "tool": "first"},
    {"id": "b", "tool": "send", "args": {"text": "{{ steps.a.output }}"}},
]})

CHAIN = Chain.from_dict({"name": "paid", "steps": [
    {"id": "a", "tool": "first"},
    {"id": "b", "tool": "second", "args": {"previous": "{{ steps.a.output }}"}},
]})


async def main(db: str, run_id: str) -> None:
    async with Runtime(toolbox, SQLiteStore(db)) as runtime:
        if MODE == "start":
            chain = UNSAFE if run_id.startswith("unsafe") else CHAIN
            run = await runtime.start(chain, run_id=run_id)
        else:
            run = await runtime.resume(run_id)
        result = await run.wait()
        print(result.status, flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[3])
