"""An experiment's cost (DESIGN §22, issue 47): replaying recorded runs of a 20-step chain of
effect-free tools, answered from the recording (``recorded=True``), against driving the same
runs fresh; and the experiment's memory as the number of runs grows.

    .venv/bin/python benchmarks/bench_experiments.py [--runs 100] [--steps 20] [--reps 3]

Both sides use one SQLiteStore file and the same concurrency (4): ``fresh`` starts the runs
(4 at a time) and waits for each; ``experiment`` is ``runtime.experiment(ids,
recorded=True, concurrency=4)`` over the runs ``fresh`` recorded: the checks, one fork plan
per run, the replays (every step answered from the recording), the table read back and the
experiment stored. Target: experiment <= 2x fresh.

Memory: ``tracemalloc`` peak of the experiment call alone over 25, 50 and 100 recorded runs
(target: flat in the number of runs; the table itself is one small row per run).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore


def toolbox() -> Toolbox:
    tb = Toolbox("bench")

    @tb.tool
    def step(x: int, i: int) -> int:
        return x + i

    return tb


def chain(steps: int) -> Chain:
    return Chain.from_dict({"name": "twenty", "steps": [
        {"id": f"s{i}", "tool": "step",
         "args": {"x": "{{ context.x }}" if i == 0 else f"{{{{ steps.s{i - 1}.output }}}}",
                  "i": i}} for i in range(steps)]})


async def fresh(runtime: Runtime, c: Chain, n: int) -> list[str]:
    ids: list[str] = []
    limiter = anyio.CapacityLimiter(4)

    async def one(x: int) -> None:
        async with limiter:
            run = await runtime.start(c, {"x": x})
            await run.wait()
            ids.append(run.run_id)

    async with anyio.create_task_group() as tg:
        for x in range(n):
            tg.start_soon(one, x)
    return ids


def measure(runs: int, steps: int, *, trace: bool) -> tuple[float, float, int]:
    """(fresh seconds, experiment seconds, experiment tracemalloc peak bytes: 0 unless
    ``trace``, which slows allocation-heavy code several times, so timings are taken
    without it)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        c = chain(steps)

        async def main() -> tuple[float, float, int]:
            async with Runtime(toolbox(), store) as runtime:
                gc.collect()
                t0 = time.perf_counter()
                ids = await fresh(runtime, c, runs)
                t_fresh = time.perf_counter() - t0
                gc.collect()
                if trace:
                    tracemalloc.start()
                t0 = time.perf_counter()
                exp = await runtime.experiment(ids, recorded=True, concurrency=4)
                t_exp = time.perf_counter() - t0
                peak = tracemalloc.get_traced_memory()[1] if trace else 0
                tracemalloc.stop()
                assert [r["outcome"] for r in exp.rows()] == ["same"] * runs
                return t_fresh, t_exp, peak

        out = anyio.run(main)
        store.close()
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = [measure(args.runs, args.steps, trace=False) for _ in range(args.reps)]
    f = statistics.median(r[0] for r in rows)
    e = statistics.median(r[1] for r in rows)
    print(f"{args.runs} recorded runs of a {args.steps}-step chain (effect-free, SQLite, "
          f"concurrency 4), median of {args.reps}")
    print(f"{'':<34}{'seconds':>9}{'ms/run':>9}")
    print(f"{'fresh: the runs driven':<34}{f:>9.2f}{f / args.runs * 1000:>9.1f}")
    print(f"{'experiment (recorded=True)':<34}{e:>9.2f}{e / args.runs * 1000:>9.1f}")
    print(f"{'ratio experiment / fresh':<34}{e / f:>9.2f}   (target <= 2.00: "
          f"{'met' if e / f <= 2 else 'NOT met'})")
    print()
    print("tracemalloc peak of the experiment call")
    print(f"{'runs':>6}{'peak KiB':>10}{'KiB/run':>9}")
    for n in (25, 50, 100):
        _, _, peak = measure(n, args.steps, trace=True)
        print(f"{n:>6}{peak / 1024:>10.0f}{peak / 1024 / n:>9.1f}")


if __name__ == "__main__":
    main()
