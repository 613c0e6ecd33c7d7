"""What recording usage costs per step, side by side in ONE process (ratios, not claims).

    .venv/bin/python benchmarks/bench_usage.py [--steps 1000] [--reps 7]

A chain of N effect-free steps on Runtime(MemoryStore); each row's tool differs only in
what it tells about its usage:
  silent     returns an int, reports nothing (the path every run had before usage existed)
  context    takes the call context and reports nothing (what a context alone costs: the
             idempotency key it carries is derived for it)
  reported   ctx.report_usage(input_tokens=, output_tokens=, cost=, model=) once per call
  response   returns an OpenAI-style dict with a `usage` field (recorded automatically)
  budget     `reported`, under options.budget (checked before every step)
Each cell is the median of --reps runs after one warm-up; gc runs between runs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import anyio

from chainlab import CallContext, Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

tools = Toolbox("bench-usage")


@tools.tool
def silent(i: int) -> int:
    return i


@tools.tool
def context(i: int, ctx: CallContext) -> int:
    return i


@tools.tool
def reported(i: int, ctx: CallContext) -> int:
    ctx.report_usage(input_tokens=100, output_tokens=20, cost=0.0001, model="m")
    return i


@tools.tool
def response(i: int) -> dict[str, Any]:
    return {"model": "m", "usage": {"prompt_tokens": 100, "completion_tokens": 20}}


def chain_of(tool: str, n: int, budget: bool = False) -> Chain:
    steps = [{"id": f"s{i}", "tool": tool, "args": {"i": i},
              **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(n)]
    options = {"budget": {"max_cost": 1e9}} if budget else {}
    return Chain.from_dict({"name": f"{tool}-{n}", "steps": steps, "options": options})


async def once(chain: Chain) -> float:
    runtime = Runtime(tools, MemoryStore())
    t0 = time.perf_counter()
    run = await runtime.start(chain)
    result = await run.wait()
    took = time.perf_counter() - t0
    assert result.status == "succeeded", result.status
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    opts = ap.parse_args()
    rows = [("silent", chain_of("silent", opts.steps)),
            ("context", chain_of("context", opts.steps)),
            ("reported", chain_of("reported", opts.steps)),
            ("response", chain_of("response", opts.steps)),
            ("budget", chain_of("reported", opts.steps, budget=True))]
    medians: dict[str, float] = {}
    for name, chain in rows:
        anyio.run(once, chain)  # warm-up
        times = []
        for _ in range(opts.reps):
            gc.collect()
            times.append(anyio.run(once, chain))
        medians[name] = statistics.median(times)
    base = medians["silent"]
    print(f"chain of {opts.steps} steps, reps={opts.reps}\n")
    print(f"{'tool':<10} {'median ms':>10} {'us/step':>9} {'x silent':>9}")
    print("-" * 41)
    for name, took in medians.items():
        print(f"{name:<10} {took * 1e3:>10.2f} {took / opts.steps * 1e6:>9.1f} "
              f"{took / base:>9.2f}")


if __name__ == "__main__":
    main()
