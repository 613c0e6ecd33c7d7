"""Every figure of issues 38 and 49 in one table: each beside its floor and its previous
value, all measured in ONE run (ratios on one machine, never asserted).

    .venv/bin/python benchmarks/bench_costs.py [--reps 5] [--quick] [--no-pg] [--no-widget]
        [--kernel-only] [--no-fleet] [--fleet-runs 400] [--procrastinate-python PY]
        [--save FILE] [--previous FILE]

Rows (floor = what the same work costs without chainlab, or the run's own cost):
  start N        ``runtime.start`` of a chain never started before (new step ids, a fresh
                 runtime: nothing cached) of N steps, each taking one whole reference to the
                 previous step's output (``whole``) or to the root's (``fan-out``); floor: the
                 run's own cost, start to end, of the same chain with no-op tools. Target:
                 under 200 ms at 10,000 steps, under the floor at 1,000.
  kernel W1/W2   us per step of a 1,000-step chain / fan-out on a MemoryStore; floor: a stdlib
                 asyncio + graphlib scheduler (benchmarks/bench_scheduler.py). Target 2x.
  durable W4     us per step of a 1,000-step chain of side-effecting, NOT idempotent no-ops on
                 SQLiteStore / PostgresStore (each call waits for its write-ahead commit);
                 floor: one INSERT + COMMIT per step on the same database. Targets 1.5x / 2x.
  memory         bytes per step a finished 10,000-step fan-out keeps (tracemalloc, after gc):
                 its first run (compiled chain, run, events in the MemoryStore, the learned
                 durations) and a second run of the same chain; floor: what the asyncio floor
                 allocates at its peak for the same fan-out. Target: under 4 KB.
  widget open    opening the run widget (``RunWidget``) on a stored run of 10,000 events (a
                 3,333-step chain in SQLite); no floor. Target 0.5 s.
  fleet          runs/s of 400 runs of 3 steps (the middle one unsafe) drained by 1, 2 and 4
                 ``chainlab worker`` processes on one PostgreSQL; floor: Procrastinate, one
                 job per run (the three calls in one job: no step record; a crash repeats
                 them all), same server, same run (benchmarks/bench_workers.py, its venv at
                 /work/venvs/procrastinate or --procrastinate-python). Target: at least the
                 floor. And one claim's latency at a backlog of 10,000 queued runs beside
                 the server's floor, one INSERT + COMMIT.
  agent turn 50  chainlab's own cost of turn 50 of an agent whose tool returns 2 KB (its model
                 in-process: benchmarks/bench_agent.py's long agent) on SQLite; floor: the
                 same on a MemoryStore. Targets: 1.5x the floor, and the floor <= 300 us.
  first open     the same open in a fresh process with an empty layout cache (bench_history's
                 3,332-step run; benchmarks/bench_first_open.py has the breakdown and
                 Graphviz's figure): wall time and the process's CPU time. Target 0.5 s.
Each cell is the median of --reps runs (rows interleaved per repetition); ``min`` beside it
is the least disturbed run. ``previous`` comes from --previous (a --save of an earlier run),
by default benchmarks/costs-baseline.json: this script run on the commit before issue 49's
work, on this machine (its note says how).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_scheduler import asyncio_floor
from bench_store import chainlab as durable_run
from bench_store import raw_floor
from workloads import as_chain, chain_workload, fanout_workload, node_toolbox, retained

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore

BASELINE = Path(__file__).resolve().parent / "costs-baseline.json"
Timed = Callable[[], Awaitable[float]]


# ---------------------------------------------------------------------------- start-up
def start_toolbox() -> Toolbox:
    tb = Toolbox("start")

    @tb.tool
    async def node(x: int = 0) -> int:
        return x + 1

    return tb


def start_chain(shape: str, n: int, tag: str) -> Chain:
    """A chain no runtime has seen (``tag`` makes its step ids, hence its templates, new)."""
    if shape == "whole":
        steps = [{"id": f"{tag}s{i}", "tool": "node",
                  "args": {"x": f"{{{{ steps.{tag}s{i - 1}.output }}}}"} if i else {}}
                 for i in range(n)]
    else:
        steps = [{"id": f"{tag}r", "tool": "node", "args": {}}]
        steps += [{"id": f"{tag}c{i}", "tool": "node",
                   "args": {"x": f"{{{{ steps.{tag}r.output }}}}"}} for i in range(n - 1)]
    return Chain.from_dict({"name": f"start-{shape}-{n}", "steps": steps})


def start_case(shape: str, n: int) -> Callable[[int], Awaitable[tuple[float, float]]]:
    async def go(rep: int) -> tuple[float, float]:
        chain = start_chain(shape, n, f"r{rep}x{time.time_ns() % 10**6}")
        runtime = Runtime(start_toolbox(), MemoryStore())
        gc.collect()
        t0 = time.perf_counter()
        run = await runtime.start(chain)
        t1 = time.perf_counter()
        result = await run.wait()
        t2 = time.perf_counter()
        assert result.ok, result.errors
        await runtime.aclose()
        return t1 - t0, t2 - t1

    return go


# ---------------------------------------------------------------------------- kernel
def kernel_case(wl: Any) -> tuple[Timed, Timed]:
    chain = as_chain(wl, 8)
    floor = asyncio_floor(wl, 8)

    async def ours() -> float:
        runtime = Runtime(node_toolbox(0.0), MemoryStore())
        await (await runtime.start(chain)).wait()  # compiled, durations learned
        gc.collect()
        t0 = time.perf_counter()
        result = await (await runtime.start(chain)).wait()
        elapsed = time.perf_counter() - t0
        assert result.ok
        await runtime.aclose()
        return elapsed

    async def base() -> float:
        gc.collect()
        t0 = time.perf_counter()
        assert await floor() == wl.expected
        return time.perf_counter() - t0

    return ours, base


# ---------------------------------------------------------------------------- memory
async def memory_case() -> dict[str, float]:
    wl = fanout_workload(10_000 - 2)
    chain = as_chain(wl, 8)
    runtime = Runtime(node_toolbox(0.0), MemoryStore())
    await (await runtime.start(as_chain(chain_workload(10), 8))).wait()  # imports, warm code
    out: dict[str, float] = {}
    for which in ("first run", "again"):
        kept, peak = await retained(runtime, chain)
        out[which], out[f"{which} peak"] = kept / wl.nodes, peak / wl.nodes
    await runtime.aclose()
    floor = asyncio_floor(wl, 8)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await floor()
    out["floor peak"] = (tracemalloc.get_traced_memory()[1] - before) / wl.nodes
    tracemalloc.stop()
    return out


# ---------------------------------------------------------------------------- widget
def widget_case(folder: Path, reps: int) -> list[float] | None:
    try:
        from chainlab.jupyter.run_widget.widget import RunWidget
    except ImportError:
        return None
    store = SQLiteStore(folder / "widget.db")

    async def make() -> str:
        runtime = Runtime(node_toolbox(0.0), store)
        run = await runtime.start(as_chain(chain_workload(3_333), 8))
        assert (await run.wait()).ok
        await runtime.aclose()
        return run.run_id

    run_id = anyio.run(make)
    times = []
    for _ in range(reps + 1):
        runtime = Runtime(node_toolbox(0.0), store)
        gc.collect()
        t0 = time.perf_counter()
        RunWidget(runtime.get_run(run_id))
        times.append(time.perf_counter() - t0)
    store.close()
    return times[1:]


def first_open_case(folder: Path, reps: int) -> list[dict[str, float]]:
    """``RunWidget`` on a stored 10,000-event run in ``reps`` fresh processes, each with an
    empty layout cache (seconds: ``open`` wall, ``cpu``)."""
    from bench_first_open import build_run, first_open

    path, run_id = build_run(folder, 10_000)
    return first_open(path, run_id, reps)


# ---------------------------------------------------------------------------- postgres
PG = tuple[Timed, Timed, Callable[[], None], str]  # ours, floor, close, the server's URL


def pg_cases(n: int) -> PG | None:
    try:
        import bench_postgres

        from tests.pg import Cluster, Unavailable
    except ImportError:
        return None
    cluster = Cluster(fsync=True)
    try:
        cluster.start()
    except Unavailable:
        return None
    from chainlab.store.postgres import PostgresStore

    dsn = cluster.base_dsn()
    store = PostgresStore(bench_postgres.schema_dsn(dsn, "bench_costs"))
    floor = bench_postgres.raw_floor(bench_postgres.schema_dsn(dsn, "bench_costs_floor"), n)
    ours = bench_postgres.chainlab(store, n, True, idempotent=False)

    def close() -> None:
        store.close()
        cluster.stop()

    return ours, floor, close, cluster.url()


# ---------------------------------------------------------------------------- fleet
def fleet_case(url: str, peer: str, runs: int) -> dict[str, Any]:
    """Runs/s of chainlab workers and of Procrastinate's job per run (1, 2, 4 processes),
    and the claim latency at a backlog of 10,000 beside the commit floor (milliseconds)."""
    import bench_workers as bw

    folder = Path(tempfile.mkdtemp(prefix="chainlab-bench-fleet-"))
    missing = bw.peer_missing(peer)
    out: dict[str, Any] = {"runs": runs, "peer": missing or peer}
    for workers in (1, 2, 4):
        row = {"chainlab": runs / bw.chainlab_row(url, workers, runs, folder)}
        if missing is None:
            row["floor"] = runs / bw.peer_row(peer, url, "job per run", workers, runs, folder)
        out[f"fleet {workers}"] = row
    template = anyio.run(bw.one_record, url)
    out["claim"] = {"p50": statistics.median(bw.claims_at(url, template, 10_000)),
                    "floor": statistics.median(bw.commit_floor(url))}
    return out


# ---------------------------------------------------------------------------- the run
async def measure(args: argparse.Namespace, folder: Path, pg: PG | None) -> dict[str, Any]:
    sizes = (100, 1_000) if args.quick else (100, 1_000, 10_000)
    n = 200 if args.quick else 1_000
    if args.kernel_only:
        sizes, n = (), 1_000
    starts = {(shape, size): start_case(shape, size) for shape in ("whole", "fan-out")
              for size in sizes}
    kernels = {"W1": kernel_case(chain_workload(n)), "W2": kernel_case(fanout_workload(n))}
    durable: dict[str, tuple[Timed, Timed]] = {} if args.kernel_only else {
        "sqlite": (durable_run(SQLiteStore(folder / "w4.db"), n, True, idempotent=False),
                   raw_floor(folder / "floor.db", n))}
    if pg is not None:
        durable["postgres"] = (pg[0], pg[1])
    found: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.reps + 1):  # the first round warms up
        for (shape, size), go in starts.items():
            got = await go(rep)
            if rep:
                found.setdefault(f"start {shape} {size}", []).append(got)
        for name, (ours, base) in {**kernels, **durable}.items():
            a, b = await ours(), await base()
            if rep:
                found.setdefault(name, []).append((a, b))
    out: dict[str, Any] = {"n": n}
    for key, pairs in found.items():
        steps = int(key.rsplit(" ", 1)[1]) if key.startswith("start") else n
        per = 1e3 if key.startswith("start") else 1e6 / steps  # ms per start, else us/step
        out[key] = {"median": statistics.median(a for a, _ in pairs) * per,
                    "min": min(a for a, _ in pairs) * per,
                    "floor": statistics.median(b for _, b in pairs) * per,
                    "floor min": min(b for _, b in pairs) * per}
    if not args.kernel_only:
        out["memory"] = await memory_case()
        out["agent turn 50"] = await agent_turn_case(folder, args.reps)
    return out


async def agent_turn_case(folder: Path, reps: int) -> dict[str, float]:
    """Turn 50's own cost (us) on SQLite against the same on a MemoryStore."""
    from bench_agent import long_once

    sqlite, memory = [], []
    for rep in range(reps):
        store = SQLiteStore(folder / f"agent{rep}.db")
        sqlite.append((await long_once(50, store))[0][48] * 1e6)
        store.close()
        memory.append((await long_once(50, MemoryStore()))[0][48] * 1e6)
    return {"median": statistics.median(sqlite), "min": min(sqlite),
            "floor": statistics.median(memory), "floor min": min(memory)}


TARGETS = {"start whole 10000": "< 200 ms", "start fan-out 10000": "< 200 ms",
           "start whole 1000": "< floor", "start fan-out 1000": "< floor",
           "W1": "<= 2x", "W2": "<= 2x", "sqlite": "<= 1.5x", "postgres": "<= 2x",
           "memory": "< 4096 B", "widget": "< 0.5 s", "first open": "< 0.5 s",
           "fleet": ">= 1x", "agent turn 50": "<= 1.5x, floor <= 300 us"}
LABELS = {"W1": "kernel W1 chain", "W2": "kernel W2 fan-out",
          "sqlite": "durable W4 sqlite", "postgres": "durable W4 postgres"}


def report(out: dict[str, Any], previous: dict[str, Any], source: str) -> None:
    print(f"costs against their floors (python {sys.version.split()[0]}); previous: {source}")
    print(f"{'row':<22}{'unit':>6}{'median':>9}{'min':>9}{'floor':>9}{'x floor':>9}"
          f"{'previous':>10}{'prev x':>8}   target")
    for key, row in out.items():
        if not isinstance(row, dict) or "median" not in row:
            continue
        unit = "ms" if key.startswith("start") else \
            "us/tn" if key.startswith("agent") else "us/st"
        prev = previous.get(key, {})
        p_med = f"{prev['median']:>10.1f}" if prev else f"{'-':>10}"
        p_x = f"{prev['median'] / prev['floor']:>8.2f}" if prev else f"{'-':>8}"
        print(f"{LABELS.get(key, key):<22}{unit:>6}{row['median']:>9.1f}{row['min']:>9.1f}"
              f"{row['floor']:>9.1f}{row['median'] / row['floor']:>9.2f}{p_med}{p_x}   "
              f"{TARGETS.get(key, '')}")
    if "memory" not in out:
        return
    mem, prev_mem = out["memory"], previous.get("memory", {})
    print(f"\nmemory, 10,000-step fan-out, bytes per step (floor: the asyncio floor's peak "
          f"{mem['floor peak']:.0f})")
    for which in ("first run", "again"):
        prev = f"{prev_mem[which]:>8.0f}" if which in prev_mem else f"{'-':>8}"
        print(f"  {which:<10} kept {mem[which]:>7.0f}  peak {mem[which + ' peak']:>7.0f}  "
              f"previous kept {prev}   target {TARGETS['memory']}")
    if out.get("widget"):
        w, prev = out["widget"], previous.get("widget")
        was = f"{statistics.median(prev):.2f} s" if prev else "-"
        print(f"\nwidget open, a stored run of 10,000 events: {statistics.median(w):.2f} s "
              f"(min {min(w):.2f}); previous {was}   target {TARGETS['widget']}")
    if out.get("first open"):
        first = out["first open"]
        print(f"widget first open, fresh process and layout cache: "
              f"{statistics.median(f['open'] for f in first):.2f} s (min "
              f"{min(f['open'] for f in first):.2f}, CPU "
              f"{statistics.median(f['cpu'] for f in first):.2f}); previous 8.7 s (Graphviz) "
              f"  target {TARGETS['first open']}")
    if out.get("fleet"):
        report_fleet(out["fleet"], previous.get("fleet", {}))


def report_fleet(fleet: dict[str, Any], previous: dict[str, Any]) -> None:
    print(f"\nfleet, {fleet['runs']} runs of 3 steps on one PostgreSQL, runs/s (floor: "
          "Procrastinate, one job per run)")
    print(f"{'workers':<22}{'runs/s':>9}{'floor':>9}{'x floor':>9}{'previous':>10}   target")
    for workers in (1, 2, 4):
        row, prev = fleet[f"fleet {workers}"], previous.get(f"fleet {workers}", {})
        floor = row.get("floor")
        x = f"{row['chainlab'] / floor:>9.2f}" if floor else f"{'-':>9}"
        was = f"{prev['chainlab']:>10.0f}" if prev else f"{'-':>10}"
        print(f"{workers:<22}{row['chainlab']:>9.0f}{floor or 0:>9.0f}{x}{was}   "
              f"{TARGETS['fleet']}")
    if not fleet[f"fleet {1}"].get("floor"):
        print(f"  (no floor: {fleet['peer']})")
    claim = fleet["claim"]
    print(f"claim at a backlog of 10,000 queued runs: p50 {claim['p50']:.2f} ms; floor (one "
          f"INSERT + COMMIT) {claim['floor']:.2f} ms: {claim['p50'] / claim['floor']:.2f} x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N=200, no 10,000 rows, 2 reps")
    ap.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL row")
    ap.add_argument("--no-widget", action="store_true", help="skip the widget row")
    ap.add_argument("--kernel-only", action="store_true",
                    help="only the kernel rows (W1, W2 at N=1,000; --reps as given)")
    ap.add_argument("--no-fleet", action="store_true", help="skip the fleet rows")
    ap.add_argument("--fleet-runs", type=int, default=400)
    ap.add_argument("--procrastinate-python", default="/work/venvs/procrastinate/bin/python")
    ap.add_argument("--save", type=Path, help="write this run's figures as JSON")
    ap.add_argument("--previous", type=Path, default=BASELINE)
    args = ap.parse_args()
    if args.quick:
        args.reps = 2
    folder = Path(tempfile.mkdtemp(prefix="chainlab-bench-costs-"))
    pg = None if args.no_pg or args.quick or args.kernel_only else pg_cases(1_000)
    try:
        out = asyncio.run(measure(args, folder, pg))
        if pg is not None and not args.no_fleet:
            out["fleet"] = fleet_case(pg[3], args.procrastinate_python, args.fleet_runs)
    finally:
        if pg is not None:
            pg[2]()
    if not args.no_widget and not args.quick and not args.kernel_only:
        out["widget"] = widget_case(folder, args.reps)
        out["first open"] = first_open_case(folder, args.reps)
    previous = json.loads(args.previous.read_text()) if args.previous.is_file() else {}
    report(out, previous, str(args.previous) if previous else "none")
    if args.save:
        args.save.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
