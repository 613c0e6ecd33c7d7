"""Per-step overhead of the Dask executor: W2 fan-out (root -> N no-op children -> join).

    .venv/bin/python benchmarks/bench_dask.py [--n 1000] [--reps 5] [--processes] [--quick]

Rows (same workload as ../shared/bench/peers.py W2; MemoryStore, so the store costs nothing):
  local async      chainlab, default executor, async tool on the event loop (the floor)
  local sync       chainlab, default executor, sync tool in worker threads
  dask threads     chainlab + DaskExecutor on LocalCluster(processes=False, 1 worker x 4
                   threads): every sync body is a Dask task (pickled both ways)
  dask processes   the same on LocalCluster(2 worker processes x 1 thread) (--processes)
  raw dask         the same N+2 tasks submitted straight to that cluster with
                   client.submit (what Dask itself costs, without chainlab)
at run concurrency 8 and 64 (steps in flight). Each cell is the median of --reps runs
after one warm-up; us/node = run time / (N + 2). Timing claims live here, not in tests.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import Workload, as_chain, fanout_workload, node_toolbox

from chainlab import Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore


def node(xs: list[int]) -> int:
    """The W2 node, sync: 1 + the sum of its dependencies' values."""
    return 1 + sum(xs)


def sync_toolbox() -> Toolbox:
    toolbox = Toolbox("bench-sync")
    toolbox.tool(node, name="node")
    return toolbox


def chainlab_runner(toolbox: Toolbox, wl: Workload, concurrency: int,
                    executor: Any = None) -> Callable[[], int]:
    chain = as_chain(wl, concurrency)
    runtime = Runtime(toolbox, MemoryStore(), executor=executor)

    def run() -> int:
        result = runtime.run_sync(chain)
        assert result.ok, result.errors
        return sum(result.outputs[s] for s in wl.sinks)

    return run


def raw_dask_runner(client: Any, wl: Workload) -> Callable[[], int]:
    def run() -> int:
        futures: dict[str, Any] = {}
        for n in wl.order:
            futures[n] = client.submit(_raw_node, *[futures[d] for d in wl.deps[n]],
                                       pure=False)
        return sum(client.gather([futures[s] for s in wl.sinks]))

    return run


def _raw_node(*values: int) -> int:
    return 1 + sum(values)


def measure(run: Callable[[], int], expected: int, reps: int) -> list[float]:
    assert run() == expected  # warm-up (and check)
    times = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - t0)
        assert value == expected
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="fan-out width N (default 1000)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--processes", action="store_true",
                    help="also a LocalCluster of worker processes")
    ap.add_argument("--quick", action="store_true", help="N=200, 2 reps (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.n, args.reps = 200, 2

    import distributed

    from chainlab.dask import DaskExecutor

    wl = fanout_workload(args.n)
    rows: list[tuple[str, int, list[float]]] = []

    def add(name: str, concurrency: int, run: Callable[[], int]) -> None:
        times = measure(run, wl.expected, args.reps)
        rows.append((name, concurrency, times))
        print(f"  {name:<16} c={concurrency:<3} {statistics.median(times):8.3f} s",
              file=sys.stderr)

    clusters: list[tuple[str, dict[str, Any]]] = [
        ("dask threads", {"processes": False, "n_workers": 1, "threads_per_worker": 4})]
    if args.processes:
        clusters.append(("dask processes",
                         {"processes": True, "n_workers": 2, "threads_per_worker": 1}))
    print(f"W2 fan-out N={args.n} ({wl.nodes} nodes), {args.reps} reps", file=sys.stderr)
    for concurrency in (8, 64):
        add("local async", concurrency, chainlab_runner(node_toolbox(0.0), wl, concurrency))
        add("local sync", concurrency, chainlab_runner(sync_toolbox(), wl, concurrency))
    for label, kwargs in clusters:
        with distributed.LocalCluster(dashboard_address=":0", **kwargs) as cluster, \
                distributed.Client(cluster) as client:
            executor = DaskExecutor(client)
            for concurrency in (8, 64):
                add(label, concurrency,
                    chainlab_runner(sync_toolbox(), wl, concurrency, executor))
            add(f"raw {label.split()[0]} ({label.split()[1]})", 0, raw_dask_runner(client, wl))

    base = {c: statistics.median(t) for name, c, t in rows if name == "local sync"}
    print(f"\nW2 fan-out/fan-in, N={args.n} ({wl.nodes} nodes), median of {args.reps} runs\n")
    print("| executor | concurrency | median s | min s | us/node | x local sync |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, concurrency, times in rows:
        med = statistics.median(times)
        ratio = f"{med / base[concurrency]:.1f}" if concurrency in base else ""
        print(f"| {name} | {concurrency or '-'} | {med:.3f} | {min(times):.3f} | "
              f"{med / wl.nodes * 1e6:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
