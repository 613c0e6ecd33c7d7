"""What checking a pooled PostgreSQL connection before use costs a read, and what it buys
after a server restart (issue 44: each stale pooled connection raised StoreServerError once).

    .venv/bin/python benchmarks/bench_pg_pool.py [--n 2000] [--reps 5] [--dsn DSN]

Without ``--dsn`` it starts a throwaway server of its own (tests/pg.py's, fsync on, unix
socket); with one, a schema of its own there (no restart rows then: the server is not
ours). Three ways the store may borrow a connection, same store, same reads:

  plain             ``pool.connection()``, no check (what it was before)
  pool check=       psycopg_pool's own ``check=ConnectionPool.check_connection``
  lend              ``chainlab.store.postgres.pool.lend`` (as shipped): one empty query
                    before use; a dead one makes the pool check all idle ones at once

Rows: per read kind (get_run, load_events of 20 events, list_runs of 20) the median us per
read; then, on our own server, a restart with 4 pooled connections: how many of the next 8
reads failed and how long the first one took. Each cell is the median of --reps runs of
--n reads after a warm-up, the three ways interleaved per repetition; printed, never
asserted.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psycopg_pool import ConnectionPool

import chainlab.store.postgres.store as store_module
from chainlab.errors import StoreServerError
from chainlab.events import Event, EventKind
from chainlab.store.base import RunRecord
from chainlab.store.postgres import PostgresStore
from chainlab.store.postgres.pool import lend
from tests.pg import Cluster, Unavailable


def filled(dsn: str) -> PostgresStore:
    store = PostgresStore(dsn, pool_size=4)
    for i in range(50):
        run_id = f"r{i:03d}"
        store.create_run(RunRecord(run_id, "bench", "succeeded", 1, 100.0 + i, 100.0 + i,
                                   {"name": "bench", "steps": []}),
                         events=[Event(run_id, seq, 100.0 + i, 1, EventKind.RUN_STARTED
                                       if seq == 1 else EventKind.STEP_READY,
                                       None if seq == 1 else f"s{seq}", None, {})
                                 for seq in range(1, 21)])
    return store


def per_read_us(read: Callable[[], Any], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        read()
    return (time.perf_counter() - t0) / n * 1e6


def borrowing(store: PostgresStore, way: str) -> None:
    """Make ``store`` borrow connections ``way`` (see the module docstring)."""
    store_module.lend = lend if way == "lend" else (lambda pool: pool.connection())
    store._pool._check = ConnectionPool.check_connection if way == "pool check=" else None


def after_restart(cluster: Cluster, store: PostgresStore) -> tuple[int, float]:
    """(failed reads of the next 8, the first read's ms) after a restart."""
    held = [store._pool.getconn() for _ in range(4)]
    for conn in held:
        store._pool.putconn(conn)
    cluster.restart()
    failed, first = 0, 0.0
    for i in range(8):
        t0 = time.perf_counter()
        try:
            store.get_run("r001")
        except StoreServerError:
            failed += 1
        if i == 0:
            first = (time.perf_counter() - t0) * 1000
    return failed, first


WAYS = ("plain", "pool check=", "lend")


def main(args: argparse.Namespace) -> None:
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # (its "discarding" lines)
    cluster: Cluster | None = None
    dsn = args.dsn
    if dsn is None:
        try:
            cluster = Cluster(fsync=True).start()
        except Unavailable as exc:
            print(f"skipped: {exc}")
            return
        dsn = cluster.dsn("bench_pool")
    try:
        store = filled(dsn)
        reads: dict[str, Callable[[], Any]] = {
            "get_run": lambda: store.get_run("r001"),
            "load_events": lambda: store.load_events("r001"),
            "list_runs 20": lambda: store.list_runs(20),
        }
        times: dict[tuple[str, str], list[float]] = {}
        for name, read in reads.items():
            for way in WAYS:  # warm-up
                borrowing(store, way)
                per_read_us(read, min(args.n, 200))
            for _ in range(args.reps):
                for way in WAYS:
                    borrowing(store, way)
                    times.setdefault((name, way), []).append(per_read_us(read, args.n))
        print(f"PostgresStore reads over a unix socket, median of {args.reps} x {args.n} "
              "(us per read)")
        print(f"{'read':<14}" + "".join(f"{way:>13}" for way in WAYS) + f"{'lend +us':>10}")
        for name in reads:
            med = [statistics.median(times[(name, way)]) for way in WAYS]
            print(f"{name:<14}" + "".join(f"{m:>13.1f}" for m in med)
                  + f"{med[2] - med[0]:>10.1f}")
        if cluster is not None:
            print("after a restart with 4 pooled connections (the next 8 reads):")
            print(f"{'way':<14} {'failed':>7} {'first ms':>9}")
            for way in WAYS:
                borrowing(store, way)
                failed, first = after_restart(cluster, store)
                print(f"{way:<14} {failed:>7} {first:>9.1f}")
        borrowing(store, "lend")
        store.close()
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dsn", default=None, help="a postgresql:// URL of an existing server")
    main(parser.parse_args())
