"""Time travel's cost: folding a stored 10,000-event history up to an arbitrary event k
(``run.state_at(k)``, DESIGN §11).

    .venv/bin/python benchmarks/bench_history.py [--events 10000] [--reps 7]

The history is a REAL run on SQLiteStore: a chain of effect-free steps with fan-in (each step
depends on the one before and, every tenth, on one far back), so every step contributes
step_ready / step_started / step_succeeded and the run has ~10,000 events. Rows:

  load all      store.load_events (SQLite read + JSON decode of every payload)
  fold k        RunState.from_events over the first k events already in memory
  open+first    runtime.get_run (parses the 3,332-step chain) + its first state_at(k)
  state_at(k)   the same call again, after a first call at k (a finished run's log is
                read once per handle; state_at folds from the nearest snapshot of
                chainlab.events.snapshots: what a scrubber pays per position)
Each cell is the median (and p90) of --reps calls, in milliseconds; gc runs between calls
(open+first: one call on a fresh handle).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Toolbox
from chainlab.events import RunState
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from tests.render.scenarios import history_chain  # the chain's shape, shared with the tests


def build(path: Path, events: int) -> str:
    """Write one run with about ``events`` events; returns its id."""
    n = max(1, (events - 2) // 3)
    tb = Toolbox("bench")
    tb.tool(lambda i: i, name="noop")
    chain = history_chain(n, max_concurrency=8)

    async def main() -> str:
        store = SQLiteStore(path)
        rt = Runtime(tb, store)
        run = await rt.start(chain)
        await run.wait()
        await rt.aclose()
        store.close()
        return run.run_id

    return anyio.run(main)


def timed(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    samples = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.9 * len(samples)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.db"
        t0 = time.perf_counter()
        run_id = build(path, args.events)
        built = time.perf_counter() - t0
        store = SQLiteStore(path)
        run = Runtime(Toolbox("bench"), store).get_run(run_id)
        run.state_at(0)  # this handle reads (and keeps) the finished run's log once
        events = store.load_events(run_id)
        total = len(events)
        step_ids = [s["id"] for s in run.record.chain["steps"]]
        print(f"history: {total} events, {len(step_ids)} steps, written in {built:.1f} s "
              f"(SQLite, {path.stat().st_size / 1e6:.1f} MB)")
        rng = random.Random(7)
        ks = [1, total // 4, total // 2, 3 * total // 4, total, rng.randint(1, total)]
        print(f"{'k':>8}  {'load all ms':>12}  {'fold k ms':>10}  {'open+first ms':>13}"
              f"  {'state_at(k) ms':>15}  {'p90 state_at':>12}")
        load_med, _ = timed(lambda: store.load_events(run_id), args.reps)
        for k in ks:
            prefix = events[:k]
            fold_med, _ = timed(lambda p=prefix: RunState.from_events(run_id, p, step_ids),
                                args.reps)
            first, _ = timed(lambda k=k: Runtime(Toolbox("b"), store).get_run(run_id)
                             .state_at(k), 1)
            run.state_at(k)  # the first call at k folds up to it (snapshots): not timed
            at_med, at_p90 = timed(lambda k=k: run.state_at(k), args.reps)
            print(f"{k:>8}  {load_med:>12.1f}  {fold_med:>10.1f}  {first:>13.1f}"
                  f"  {at_med:>15.1f}  {at_p90:>12.1f}")
        state = run.state_at(total)
        assert state.last_seq == total and str(state.status) == "succeeded"
        store.close()


if __name__ == "__main__":
    main()
