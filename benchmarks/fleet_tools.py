"""The tools of bench_workers.py's chainlab workers (``--tools fleet_tools:toolbox``, with
this directory on PYTHONPATH): the 3-step chain's bodies, each writing one line ``time run
step`` to ``BENCH_OUT`` (the same line, by the same code, as the Procrastinate peer's tasks,
so both are timed from the same record); ``BENCH_SLEEP`` seconds of work per step (the
takeover runs use long steps)."""

from __future__ import annotations

import os
import time

import anyio

from chainlab import Chain, Toolbox

__all__ = ["CHAIN", "line", "toolbox"]

OUT = os.environ.get("BENCH_OUT", os.devnull)
SLEEP = float(os.environ.get("BENCH_SLEEP", "0"))

#: three steps in a row; the middle one changes the world (not idempotent)
CHAIN = Chain.from_dict({"name": "bench3", "steps": [
    {"id": "a", "tool": "prepare", "args": {"run": "{{ context.run }}"}},
    {"id": "b", "tool": "record", "args": {"run": "{{ context.run }}",
                                           "x": "{{ steps.a.output }}"}},
    {"id": "c", "tool": "finish", "args": {"run": "{{ context.run }}",
                                           "x": "{{ steps.b.output }}"}},
]})


def line(run: int, step: str) -> None:
    """One record line ``time run step`` (O_APPEND: lines from many processes interleave
    whole)."""
    fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {run} {step}\n".encode())
    finally:
        os.close(fd)


toolbox = Toolbox("bench3")


@toolbox.tool
async def prepare(run: int) -> int:
    line(run, "a")
    if SLEEP:
        await anyio.sleep(SLEEP)
    return run * 2 + 1


@toolbox.tool(side_effects=True)
async def record(run: int, x: int) -> int:
    line(run, "b")  # the side effect
    if SLEEP:
        await anyio.sleep(SLEEP)
    return x + 1


@toolbox.tool
async def finish(run: int, x: int) -> int:
    line(run, "c")
    return x
