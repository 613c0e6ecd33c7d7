"""W5: release order on heterogeneous durations, side by side in ONE process (ratios to the
lower bound, never asserted in tests).

    .venv/bin/python benchmarks/bench_release.py [--reps 3]

Workloads (every step sleeps its own duration; concurrency 4):
  W5a  40 steps: 30 short independent steps declared first, a chain of 10 long steps last
  W5b  LLM-compiler-shaped plans: 5 fan-outs of 2-4 parallel lookups of different durations,
       each joined, then a final join; the fan-outs with the slowest lookups declared last
Contenders:
  asyncio        graphlib.TopologicalSorter + a task per node + Semaphore (insertion order)
  declaration    chainlab, release in declaration order
  critical_path  chainlab, longest estimated remaining path first, after one warm-up run
                 (the estimates come from that run's recorded durations)
  what-if        chainlab.whatif of the declaration run under critical_path (virtual time)
  ... nominal    the policy on the real Scheduler with the nominal durations (virtual time):
                 the order alone, without the sleeps' real length and the dispatch
Lower bound (LB) = max(critical path, total work / concurrency) with the nominal durations.
"optimum" = the shortest makespan of ANY schedule of the nominal durations with no overhead
(benchmarks/optimum.py: exact branch and bound, idle slots allowed): on W5b it is 1.053 x LB,
so no scheduler can reach 1.05 x LB there. "x opt" = makespan / optimum.
"""

from __future__ import annotations

import argparse
import asyncio
import graphlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from chainlab import Chain, RunOptions, Toolbox, whatif
from chainlab.runtime import Runtime
from chainlab.runtime.history.whatif import simulate
from chainlab.store import MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent))

from optimum import optimum

CONC = 4


def w5a() -> tuple[list[tuple[str, float, list[str]]], str]:
    steps = [(f"s{i}", 0.02, []) for i in range(30)]
    steps += [(f"l{i}", 0.04, [f"l{i - 1}"] if i else []) for i in range(10)]
    return steps, "W5a 40 steps"


def w5b(seed: int = 5) -> tuple[list[tuple[str, float, list[str]]], str]:
    rng = random.Random(seed)
    groups = []
    for _ in range(5):
        k = rng.randint(2, 4)
        groups.append([rng.choice([0.01, 0.02, 0.04, 0.08]) for _ in range(k)])
    groups.sort(key=max)  # adversarial: the slowest fan-outs are declared last
    steps: list[tuple[str, float, list[str]]] = []
    joins = []
    for g, durations in enumerate(groups):
        ids = [f"g{g}q{i}" for i in range(len(durations))]
        steps += [(sid, d, []) for sid, d in zip(ids, durations, strict=True)]
        steps.append((f"g{g}join", 0.005, ids))
        joins.append(f"g{g}join")
    steps.append(("answer", 0.005, joins))
    return steps, "W5b LLM-compiler"


def lower_bound(steps: list[tuple[str, float, list[str]]]) -> float:
    finish: dict[str, float] = {}
    for sid, d, deps in steps:
        finish[sid] = d + max((finish[x] for x in deps), default=0.0)
    return max(max(finish.values()), sum(d for _, d, _ in steps) / CONC)


def toolbox() -> Toolbox:
    tb = Toolbox("w5")

    @tb.tool(name="work")
    async def work(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    return tb


def chain(steps: list[tuple[str, float, list[str]]], priority: str) -> Chain:
    return Chain.from_dict({"name": "w5", "options": {"max_concurrency": CONC,
                                                      "priority": priority},
                            "steps": [{"id": s, "tool": "work", "depends_on": deps,
                                       "args": {"seconds": d}} for s, d, deps in steps]})


async def asyncio_floor(steps: list[tuple[str, float, list[str]]]) -> float:
    deps = {s: deps for s, _, deps in steps}
    dur = {s: d for s, d, _ in steps}
    ts = graphlib.TopologicalSorter(deps)
    ts.prepare()
    sem = asyncio.Semaphore(CONC)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    tasks: set[Any] = set()

    async def node(n: str) -> None:
        async with sem:
            await asyncio.sleep(dur[n])
        ts.done(n)
        if ts.is_active():
            spawn()
        elif not done.done():
            done.set_result(None)

    def spawn() -> None:
        for n in ts.get_ready():
            t = loop.create_task(node(n))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

    t0 = time.perf_counter()
    spawn()
    await done
    return time.perf_counter() - t0


async def chainlab_run(runtime: Runtime, c: Chain, priority: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    run = await runtime.start(c, options=RunOptions(priority=priority))  # type: ignore[arg-type]
    result = await run.wait()
    took = time.perf_counter() - t0
    assert result.ok, result
    return took, run


async def main(reps: int) -> None:
    print(f"concurrency {CONC}, reps {reps} (median makespan)\n")
    header = f"{'workload':<18} {'contender':<22} {'makespan ms':>12} {'x LB':>7} {'x opt':>7}"
    print(header)
    print("-" * len(header))
    for steps, label in (w5a(), w5b()):
        lb = lower_bound(steps)
        best = optimum(steps, CONC)
        assert best.proven, f"{label}: the optimum search ran out of budget"
        opt = best.makespan
        c = chain(steps, "declaration")
        runtime = Runtime(toolbox(), MemoryStore())
        await chainlab_run(runtime, c, "declaration")  # warm-up: durations are now known
        rows: dict[str, list[float]] = {"asyncio": [], "declaration": [], "critical_path": [],
                                        "what-if": []}
        for _ in range(reps):
            rows["asyncio"].append(await asyncio_floor(steps))
            took, run = await chainlab_run(runtime, c, "declaration")
            rows["declaration"].append(took)
            rows["what-if"].append(whatif(run, priority="critical_path").makespan)
            took, run = await chainlab_run(runtime, c, "critical_path")
            rows["critical_path"].append(took)
        # the release policies themselves, on the REAL scheduler with the nominal durations
        # (no sleep, no dispatch): what is left between these and the measured rows is time
        graph, _ = run.compiled()
        nominal = {sid: d for sid, d, _ in steps}
        for policy in ("declaration", "critical_path"):
            slots = simulate(graph.nodes, graph.top, nominal, max_concurrency=CONC,
                             priority=policy)
            rows[f"{policy} nominal"] = [max(slot.end for slot in slots)]
        for name, values in rows.items():
            med = statistics.median(values)
            print(f"{label:<18} {name:<22} {med * 1e3:>12.1f} {med / lb:>7.3f} {med / opt:>7.3f}")
        print(f"{label:<18} {'optimum':<22} {opt * 1e3:>12.1f} {opt / lb:>7.3f} {1.0:>7.3f}"
              "   (exact, any schedule, nominal durations, no overhead)")
        print(f"{label:<18} {'lower bound':<22} {lb * 1e3:>12.1f} {1.0:>7.3f} {lb / opt:>7.3f}")
        await runtime.aclose()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    anyio.run(main, ap.parse_args().reps)
