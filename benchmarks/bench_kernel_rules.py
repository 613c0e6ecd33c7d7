"""What each rule costs the kernel: W1 and W2 (1,000 no-op steps on a MemoryStore) against
the asyncio floor, with every rule, and with one rule dropped at a time, in ONE process
(issue 49 item 3: the target is 2x the floor; this shows which rules stand between).

    .venv/bin/python benchmarks/bench_kernel_rules.py [--reps 25]

The rules are dropped HERE, by patching the running process for one row (a prototype behind
this benchmark, not a switch chainlab ships):
  checked values   a call's args validated against its tool's input model, its output
                   checked against its return annotation (``Tool.validate_args``,
                   ``Tool.check_output`` made identities)
  event log        every event appended to the store (``MemoryStore.append`` a no-op: the
                   fold still runs, nothing is kept)
  content key      a start finds its compiled chain by the chain's content (serialised at
                   each start, so a chain changed in place is compiled again); dropped: by
                   the chain object's identity
  all three        together
Each cell is the median of --reps runs (rows interleaved with the floor's); the floor is
bench_scheduler's asyncio + graphlib scheduler. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_scheduler import asyncio_floor
from workloads import Workload, as_chain, chain_workload, fanout_workload, node_toolbox

import chainlab.runtime.preparing as preparing
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.tools import Tool


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def without(rule: str) -> Iterator[None]:
    """The process with ``rule`` dropped for the block."""
    if rule == "checked values":
        with patched(Tool, "validate_args", lambda self, args: dict(args)), \
                patched(Tool, "check_output", lambda self, value: value):
            yield
    elif rule == "event log":
        with patched(MemoryStore, "append", lambda self, *a, **k: None):
            yield
    elif rule == "content key":
        compile_ = preparing.Prepared.compile
        seen: dict[tuple[int, int], tuple[Any, Any]] = {}

        def by_identity(self: Any, chain: Any, opts: Any, context: Any, toolbox: Any,
                        chains: Any) -> Any:
            key = (id(chain), id(toolbox))
            if key not in seen:  # (the chain is kept: its id cannot be reused meanwhile)
                seen[key] = (chain, compile_(self, chain, opts, context, toolbox, chains))
            return seen[key][1]

        with patched(preparing.Prepared, "compile", by_identity):
            yield
    elif rule == "all three":
        with without("checked values"), without("event log"), without("content key"):
            yield
    else:
        yield


RULES = ("", "checked values", "event log", "content key", "all three")


async def per_step(wl: Workload, rule: str, reps: int) -> tuple[float, float]:
    """Median us per step of chainlab (with ``rule`` dropped) and of the floor."""
    chain = as_chain(wl, 8)
    floor = asyncio_floor(wl, 8)
    ours: list[float] = []
    base: list[float] = []
    with without(rule):
        runtime = Runtime(node_toolbox(0.0), MemoryStore())
        await (await runtime.start(chain)).wait()  # compiled, durations learned
        for _ in range(reps):
            gc.collect()
            t0 = time.perf_counter()
            result = await (await runtime.start(chain)).wait()
            ours.append(time.perf_counter() - t0)
            assert result.ok
            gc.collect()
            t0 = time.perf_counter()
            assert await floor() == wl.expected
            base.append(time.perf_counter() - t0)
        await runtime.aclose()
    return (statistics.median(ours) / wl.nodes * 1e6,
            statistics.median(base) / wl.nodes * 1e6)


async def main(reps: int) -> None:
    print(f"kernel per step, 1,000 steps, MemoryStore, median of {reps} (python "
          f"{sys.version.split()[0]})")
    print(f"{'rules':<24}{'W1 us':>8}{'floor':>8}{'x':>7}{'W2 us':>8}{'floor':>8}{'x':>7}")
    for rule in RULES:
        cells = []
        for wl in (chain_workload(1_000), fanout_workload(1_000)):
            ours, base = await per_step(wl, rule, reps)
            cells.append(f"{ours:>8.1f}{base:>8.1f}{ours / base:>7.2f}")
        print(f"{('without ' + rule) if rule else 'every rule':<24}{''.join(cells)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=25)
    asyncio.run(main(parser.parse_args().reps))
