"""How the kernel's per-step cost scales with the run's size, and what a finished step costs in
memory (ratios in ONE process; never asserted in tests).

    .venv/bin/python benchmarks/bench_kernel_scale.py [--reps 5]

Rows: W1 (a chain of no-op async steps) at N = 100, 1,000 and 10,000 on a MemoryStore, for
chainlab and for the asyncio + graphlib floor; ``x floor`` is chainlab / floor per step,
``x N=1000`` the per-step cost against the N=1,000 run (a fixed per-run cost shows as N=100
above 1; a cost that grows with the run as N=10,000 above 1). Each cell is the fastest of
``--reps`` rounds, chainlab and the floor interleaved (on a shared machine the fastest run is
the least disturbed one). Memory: tracemalloc's growth while a finished 10,000-step run's
handle (state, events in the MemoryStore) is kept, per step.

"record only": what the event contract alone costs per step, with no scheduling, no argument
resolution and no awaiting: the step's three events (ready, started, succeeded) built, folded
into a RunState and appended to a MemoryStore, its args and output validated by the tool. It
is the part of ``x floor`` no scheduling can take away.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scheduler import asyncio_floor
from workloads import as_chain, chain_workload, node_toolbox, retained

from chainlab.events import Event, EventKind, RunState
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.store.base import RunRecord


async def per_step(sizes: tuple[int, ...], reps: int) -> dict[int, tuple[float, float]]:
    """us/step of chainlab and of the floor per size, the fastest of ``reps`` rounds; each
    round runs every size, floor and chainlab back to back (a machine that speeds up or slows
    down during the benchmark moves every cell alike). Each chainlab run gets a fresh
    MemoryStore, warmed by two untimed runs (compiled chain, learned durations), so the events
    of earlier runs do not grow the heap the garbage collector walks. A cell times a batch of
    max(1, 2000 // N) runs."""
    toolbox = node_toolbox(0.0)
    cases = {n: (as_chain(chain_workload(n), 8), asyncio_floor(chain_workload(n), 8))
             for n in sizes}
    ours: dict[int, list[float]] = {n: [] for n in sizes}
    base: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps):
        for n, (chain, floor) in cases.items():
            runtime = Runtime(toolbox, MemoryStore())
            for _ in range(2):  # a runtime's first runs compile the chain and learn durations
                await (await runtime.start(chain)).wait()
            await floor()
            batch = max(1, 2_000 // n)  # time several short runs together: less jitter
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(batch):
                await floor()
            base[n].append((time.perf_counter() - t0) / batch)
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(batch):
                result = await (await runtime.start(chain)).wait()
                assert result.ok
            ours[n].append((time.perf_counter() - t0) / batch)
            await runtime.aclose()
            del runtime, result
    return {n: (min(ours[n]) / n * 1e6, min(base[n]) / n * 1e6) for n in sizes}


def record_only(n: int, k: int) -> float:
    """Seconds to record ``n`` steps' events (see the module docstring), no scheduling."""
    tool = node_toolbox(0.0).get("node")
    store = MemoryStore()
    run_id = f"record-{k}"
    store.create_run(RunRecord(run_id, "w1", "running", 1, 0.0, 0.0, {}))
    ids = [f"n{i}" for i in range(n)]
    state = RunState(run_id, ids)
    now, new, seq, prev = time.time, tuple.__new__, 0, 0
    ready, started, succeeded = (EventKind.STEP_READY, EventKind.STEP_STARTED,
                                 EventKind.STEP_SUCCEEDED)
    t0 = time.perf_counter()
    for i, step_id in enumerate(ids):
        args = {"xs": [prev] if i else []}
        for kind, payload in ((ready, {}), (started, {"args": args, "tool": "node",
                                                      "idempotency_key": None, "code": ""})):
            seq += 1
            ev = new(Event, (run_id, seq, now(), 1, kind, step_id, 1, payload))
            state.apply(ev)
            store.append(run_id, 1, (ev,))
        prev = tool.check_output(1 + sum(tool.validate_args(args)["xs"]))
        seq += 1
        ev = new(Event, (run_id, seq, now(), 1, succeeded, step_id, 1, {"output": prev}))
        state.apply(ev)
        store.append(run_id, 1, (ev,))
    return time.perf_counter() - t0


async def record_only_per_step(n: int, reps: int) -> tuple[float, float]:
    floor = asyncio_floor(chain_workload(n), 8)
    ours: list[float] = []
    base: list[float] = []
    for k in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        await floor()
        base.append(time.perf_counter() - t0)
        gc.collect()
        ours.append(record_only(n, k))
    return min(ours) / n * 1e6, min(base) / n * 1e6


async def memory_per_step(n: int) -> float:
    wl = chain_workload(n)
    chain = as_chain(wl, 8)
    runtime = Runtime(node_toolbox(0.0), MemoryStore())
    await (await runtime.start(chain)).wait()  # warm caches (compiled chain, history)
    kept, _ = await retained(runtime, chain)
    await runtime.aclose()
    return kept / n


async def main(reps: int) -> None:
    rows = await per_step((100, 1_000, 10_000), reps)
    mid = rows[1_000][0]
    print(f"W1 chain, MemoryStore, fastest of {reps} interleaved rounds "
          f"(python {sys.version.split()[0]})")
    print(f"{'N':>7} {'chainlab us/step':>17} {'floor us/step':>14} {'x floor':>8} "
          f"{'x N=1000':>9}")
    for n, (ours, base) in rows.items():
        print(f"{n:>7} {ours:>17.1f} {base:>14.1f} {ours / base:>8.2f} {ours / mid:>9.2f}")
    rec, base = await record_only_per_step(1_000, reps)
    print(f"{'record':>7} {rec:>17.1f} {base:>14.1f} {rec / base:>8.2f}"
          "            (record only, N=1000: see the docstring)")
    print(f"\nmemory per finished step (a 10,000-step run kept, events in the MemoryStore): "
          f"{await memory_per_step(10_000) / 1024:.2f} KiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    anyio.run(main, ap.parse_args().reps)
