"""What durability costs on PostgreSQL: chainlab's per-step overhead on ``PostgresStore``
against the raw PostgreSQL floor, in ONE process, same server (ratios, not absolute claims).

    .venv/bin/python benchmarks/bench_postgres.py [--n 500] [--reps 5] [--dsn DSN]

Without ``--dsn`` it starts a throwaway server of its own (Debian's postgresql package, a
temp dir, unix socket, fsync ON, as tests/pg.py does); with one, it uses a schema of its own
there. Rows (W1 of workloads.py: a chain of N no-op steps, concurrency 8):
  raw floor            one INSERT + COMMIT per step over one psycopg connection: the least a
                       durable-per-step engine can cost on this server
  W1 postgres          effect-free steps, full event log (group-committed)
  side-effects pg      every step a side-effecting IDEMPOTENT no-op (start group-committed)
                       (target <= 1.5x)
  unsafe pg            side-effecting, NOT idempotent: each call waits for its write-ahead
                       flush, so every step costs at least one commit, like the floor
  store only           the unsafe row's store traffic with no kernel: a step's three events
                       appended and one await flush per step (so unsafe - store only = the
                       kernel's share)
  langgraph pg sync    (with --langgraph-python) LangGraph's PostgresSaver on the same server,
  langgraph pg async   durability="sync" (a checkpoint committed per step before the next) and
                       "async" (its default), run in that interpreter by langgraph_pg.py
Each cell is the median of --reps runs after one warm-up (rows interleaved per repetition).
``commits/step`` and ``events/step`` come from one extra, instrumented run. Never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from workloads import CommitCounter, as_chain, chain_workload, node_toolbox, store_only

from chainlab.runtime import Runtime
from chainlab.store.postgres import PostgresStore

Timed = Callable[[], Awaitable[float]]


def raw_floor(dsn: str, n: int) -> Timed:
    conn = psycopg.connect(dsn)  # a transaction per step: BEGIN (implicit), INSERT, COMMIT
    conn.execute("CREATE TABLE IF NOT EXISTS floor_steps (run INTEGER, step INTEGER, "
                 "value TEXT, PRIMARY KEY (run, step))")
    conn.commit()
    runs = iter(range(1_000_000))

    async def go() -> float:
        run = next(runs)
        t0 = time.perf_counter()
        value = 0
        for step in range(n):
            value = 1 + value
            conn.execute("INSERT INTO floor_steps VALUES (%s, %s, %s)",
                         (run, step, json.dumps(value)))
            conn.commit()
        return time.perf_counter() - t0

    return go


def chainlab(store: PostgresStore, n: int, side_effects: bool,
             idempotent: bool = True) -> Timed:
    wl = chain_workload(n)
    chain = as_chain(wl, 8)
    runtime = Runtime(node_toolbox(0.0, side_effects=side_effects, idempotent=idempotent),
                      store)

    async def go() -> float:
        t0 = time.perf_counter()
        run = await runtime.start(chain)
        result = await run.wait()  # returns once the end of the run is durable
        elapsed = time.perf_counter() - t0
        assert result.ok and result.outputs[wl.order[-1]] == n, result.errors
        return elapsed

    return go


def schema_dsn(dsn: str, schema: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{dsn} options='-csearch_path={schema}'"


def langgraph_rows(python: str | None, dsn: str, n: int, reps: int
                   ) -> tuple[dict[str, float], str]:
    """Median seconds per run of LangGraph's PostgresSaver (durability sync and async), run by
    ``python`` (a virtualenv with langgraph) in a subprocess against the same server."""
    if not python:
        return {}, "langgraph pg: not run (pass --langgraph-python PATH; see langgraph_pg.py)"
    import subprocess

    script = Path(__file__).with_name("langgraph_pg.py")
    out: dict[str, float] = {}
    note = ""
    for durability in ("sync", "async"):
        proc = subprocess.run(
            [python, str(script), "--dsn", schema_dsn(dsn, f"bench_lg_{durability}"),
             "--n", str(n), "--reps", str(reps), "--durability", durability],
            capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            return out, f"langgraph pg: failed ({proc.stderr.strip().splitlines()[-1:]})"
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        out[f"langgraph pg {durability}"] = data["median_s"]
        note = (f"langgraph {data['langgraph']}, langgraph-checkpoint-postgres "
                f"{data['checkpoint_postgres']}")
    return out, note


async def main(dsn: str, n: int, reps: int, langgraph_python: str | None = None) -> None:
    stores = {name: PostgresStore(schema_dsn(dsn, f"bench_{i}"))
              for i, name in enumerate(("W1 postgres", "side-effects pg", "unsafe pg",
                                        "store only"))}
    rows: dict[str, Timed] = {
        "raw floor": raw_floor(schema_dsn(dsn, "bench_floor"), n),
        "W1 postgres": chainlab(stores["W1 postgres"], n, False),
        "side-effects pg": chainlab(stores["side-effects pg"], n, True),
        "unsafe pg": chainlab(stores["unsafe pg"], n, True, idempotent=False),
        "store only": store_only(stores["store only"], n),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for rep in range(reps + 1):
        for name, go in rows.items():
            gc.collect()
            elapsed = await go()
            if rep:  # the first round is the warm-up
                times[name].append(elapsed)
    extra: dict[str, tuple[float, float]] = {"raw floor": (1.0, 1.0)}
    for name, store in stores.items():
        before = sum(len(store.load_events(r.run_id)) for r in store.list_runs())
        with CommitCounter(store) as counter:
            await rows[name]()
        events = sum(len(store.load_events(r.run_id)) for r in store.list_runs()) - before
        extra[name] = (counter.commits / n, events / n)
    peers, peers_note = langgraph_rows(langgraph_python, dsn, n, reps)
    with psycopg.connect(dsn) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    floor = statistics.median(times["raw floor"]) / n * 1e6
    print(f"PostgresStore overhead, W1 chain of N={n} steps, median of {reps} runs "
          f"(python {sys.version.split()[0]}, PostgreSQL {version[0] if version else '?'}, "
          f"unix socket, fsync={fsync[0] if fsync else '?'}, psycopg {psycopg.__version__})")
    print(f"{'row':<20}{'us/step':>10}{'x floor':>9}{'commits/step':>14}{'events/step':>13}"
          f"{'events/s':>11}")
    for name, ts in times.items():
        med = statistics.median(ts) / n * 1e6
        commits, events = extra[name]
        print(f"{name:<20}{med:>10.1f}{med / floor:>9.2f}{commits:>14.3f}{events:>13.2f}"
              f"{events * 1e6 / med:>11.0f}")
    for name, seconds in peers.items():  # their commits and events are their own business
        med = seconds / n * 1e6
        print(f"{name:<20}{med:>10.1f}{med / floor:>9.2f}{'':>14}{'':>13}{'':>11}")
    fx = statistics.median(times["side-effects pg"]) / n * 1e6
    verdict = "meets" if fx <= 1.5 * floor else "misses"
    print(f"\nside-effects pg = {fx / floor:.2f} x the raw floor per step ({verdict} the "
          "<= 1.5 x target). events/s of the W1 row = effect-free throughput.")
    alone = statistics.median(times["store only"]) / n * 1e6
    unsafe = statistics.median(times["unsafe pg"]) / n * 1e6
    print(f"store only = {alone / floor:.2f} x: the unsafe row's commits and hand-offs without "
          f"the kernel, which adds {unsafe - alone:.0f} us per step on top.")
    print(peers_note)
    if peers:
        lg = peers["langgraph pg sync"] / n * 1e6
        unsafe = statistics.median(times["unsafe pg"]) / n * 1e6
        print(f"per step, langgraph pg sync costs {lg / unsafe:.2f} x unsafe pg (a durable "
              f"start per step) and {lg / fx:.1f} x side-effects pg")
    for store in stores.values():
        store.close()


def run(args: argparse.Namespace) -> None:
    if args.dsn:
        anyio.run(main, args.dsn, args.n, args.reps, args.langgraph_python)
        return
    from tests.pg import Cluster, Unavailable

    cluster = Cluster(fsync=True)
    try:
        cluster.start()
    except Unavailable as exc:
        print(f"skipped: {exc}")
        cluster.stop()
        return
    try:
        anyio.run(main, cluster.base_dsn(), args.n, args.reps, args.langgraph_python)
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dsn", default=None, help="an existing server (libpq conninfo)")
    parser.add_argument("--langgraph-python", default=None,
                        help="python of a virtualenv with langgraph and "
                             "langgraph-checkpoint-postgres: adds its rows (langgraph_pg.py)")
    run(parser.parse_args())
