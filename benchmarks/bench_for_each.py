"""A graph that grows against the same graph written out (DESIGN §17), in ONE process.

    .venv/bin/python benchmarks/bench_for_each.py [--reps 3] [--sizes 1000,10000]

Two chains do the same work on a MemoryStore with a no-op async tool:

* ``for_each``: ``split`` returns N items, ``each`` runs once per item (``for_each``), its
  instances made at run time by one ``steps_added`` event;
* ``written``: ``split``, then N steps written out in the chain, each reading its item
  from the split's output by position (``{{ steps.split.output[i] }}``: what a user wrote by
  hand before for_each existed).

Per size: start-to-end milliseconds (``runtime.start`` to ``run.wait()``; the chain already
compiled once, as a notebook's second run), microseconds per step, the ratio
for_each / written (the issue's goal: within 1.2x), and memory per step retained by the
finished run (tracemalloc's growth while its handle is kept, the chain compiled by an earlier
run) and, apart, for one cold run with its chain (from the chain's data to the run's end:
the chain model and its compiled graph count too, as they do for a chain run once).
``expand`` is the time of the growth alone per item at each size (O(items): the per-item
figure stays flat).
Each cell is the fastest of ``--reps`` rounds, the two chains interleaved.

Then the DAG: drawing a finished run whose for_each step has 10 instances and one whose step
has 10,000 (``run_dot``: the DOT text with every status and badge; ``run_svg``: laid out by
Graphviz), the fastest of ``--reps``: the step is one node with its instances counted, so
both cost the same.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.events import EventKind
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore


def toolbox() -> Toolbox:
    tb = Toolbox("bench")

    @tb.tool
    async def split(n: int) -> list[int]:
        return list(range(n))

    @tb.tool
    async def work(x: int) -> int:
        return x

    return tb


def grown(n: int) -> Chain:
    return Chain.from_dict({"name": f"grown-{n}", "options": {"max_concurrency": 8}, "steps": [
        {"id": "split", "tool": "split", "args": {"n": n}},
        {"id": "each", "tool": "work", "for_each": "{{ steps.split.output }}",
         "args": {"x": "{{ item }}"}}]})


def written(n: int) -> Chain:
    steps: list[dict[str, Any]] = [{"id": "split", "tool": "split", "args": {"n": n}}]
    steps += [{"id": f"s{i}", "tool": "work", "args": {"x": f"{{{{ steps.split.output[{i}] }}}}"}}
              for i in range(n)]
    return Chain.from_dict({"name": f"written-{n}", "options": {"max_concurrency": 8},
                            "steps": steps})


async def timed(runtime: Runtime, chain: Chain) -> tuple[float, float, Any]:
    """(seconds start to end, seconds of the growth event's making, the run)."""
    t0 = time.perf_counter()
    run = await runtime.start(chain)
    result = await run.wait()
    took = time.perf_counter() - t0
    assert result.status == "succeeded", result.status
    events = run.event_list()
    grew = [e for e in events if e.kind == EventKind.STEPS_ADDED]
    expand = 0.0
    if grew:  # from the split's end to the first instance's start: the growth itself
        split_end = next(e.ts for e in events if e.kind == EventKind.STEP_SUCCEEDED
                         and e.step_id == "split")
        expand = grew[0].ts - split_end
    return took, expand, run


async def retained(make: Any, n: int, tb: Toolbox, *, cold: bool) -> float:
    """Bytes tracemalloc sees grow while one finished run is kept (its state, its events in
    the store); ``cold``: the chain is made from its data and compiled inside the count."""
    runtime = Runtime(tb, MemoryStore())
    chain = None if cold else make(n)
    if chain is not None:
        await (await runtime.start(chain)).wait()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    chain = chain or make(n)
    run = await runtime.start(chain)
    await run.wait()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del run
    await runtime.aclose()
    return float(after - before)


async def main(sizes: list[int], reps: int) -> None:
    tb = toolbox()
    print(f"for_each against the same steps written out; MemoryStore, no-op async tool, "
          f"max_concurrency 8; fastest of {reps} rounds, interleaved")
    header = (f"{'N':>6}  {'for_each ms':>11}  {'written ms':>10}  {'us/step fe':>10}  "
              f"{'us/step wr':>10}  {'ratio':>6}  {'expand us/item':>14}  "
              f"{'B/step fe':>9}  {'B/step wr':>9}  {'mem ratio':>9}  "
              f"{'cold B fe':>9}  {'cold B wr':>9}  {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for n in sizes:
        chains = {"fe": grown(n), "wr": written(n)}
        best: dict[str, float] = {"fe": float("inf"), "wr": float("inf")}
        expand = float("inf")
        runtimes = {k: Runtime(tb, MemoryStore()) for k in chains}
        for key, chain in chains.items():  # compile once (the written chain: N steps)
            await timed(runtimes[key], chain)
        for _ in range(reps):
            for key, chain in chains.items():
                runtimes[key] = Runtime(tb, MemoryStore())  # a fresh store: no older events
                await timed(runtimes[key], chain)
                gc.collect()
                took, grow, _ = await timed(runtimes[key], chain)
                best[key] = min(best[key], took)
                if key == "fe":
                    expand = min(expand, grow)
        makers = {"fe": grown, "wr": written}
        mem = {key: await retained(makers[key], n, tb, cold=False) / (n + 1) for key in chains}
        cold = {key: await retained(makers[key], n, tb, cold=True) / (n + 1) for key in chains}
        print(f"{n:>6,}  {best['fe'] * 1e3:>11.1f}  {best['wr'] * 1e3:>10.1f}  "
              f"{best['fe'] / n * 1e6:>10.1f}  {best['wr'] / n * 1e6:>10.1f}  "
              f"{best['fe'] / best['wr']:>5.2f}x  {expand / n * 1e6:>14.2f}  "
              f"{mem['fe']:>9,.0f}  {mem['wr']:>9,.0f}  {mem['fe'] / mem['wr']:>8.2f}x  "
              f"{cold['fe']:>9,.0f}  {cold['wr']:>9,.0f}  {cold['fe'] / cold['wr']:>5.2f}x")
        for rt in runtimes.values():
            await rt.aclose()
    await dag_cost(tb, reps)


async def dag_cost(tb: Toolbox, reps: int) -> None:
    from chainlab.render import run_dot, run_svg

    print("\nthe DAG of a finished run: one node for the for_each step, whatever its instances")
    print(f"{'instances':>9}  {'run_dot ms':>10}  {'run_svg ms':>10}  {'DOT bytes':>9}")
    for n in (10, 10_000):
        runtime = Runtime(tb, MemoryStore())
        run = await runtime.start(grown(n))
        await run.wait()
        dot_ms = svg_ms = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            dot = run_dot(run)
            dot_ms = min(dot_ms, (time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            run_svg(run)
            svg_ms = min(svg_ms, (time.perf_counter() - t0) * 1e3)
        print(f"{n:>9,}  {dot_ms:>10.2f}  {svg_ms:>10.1f}  {len(dot):>9,}")
        await runtime.aclose()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", default="1000,10000")
    ns = p.parse_args()
    anyio.run(main, [int(s) for s in ns.sizes.split(",")], ns.reps)
