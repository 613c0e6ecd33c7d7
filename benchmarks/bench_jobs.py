"""What a remote job costs (issue 27, item 8).

    .venv/bin/python benchmarks/bench_jobs.py [--quick]

* 1,000 jobs waiting at once (one run, max_concurrency 8, an in-memory backend whose jobs
  stay running): Python heap per waiting job (tracemalloc, the run's state, events and
  waiter task included) and RSS per job; then, while they wait with ``poll_every_s`` =
  0.5, the CPU the process spends per poll (and per tick: one poll of every job), measured
  with ``time.process_time`` over a window.
* per-step overhead of a job against a plain tool: N independent steps of an async tool
  that returns at once, against N jobs whose first poll says succeeded (``poll_every_s`` =
  1 ms), on a MemoryStore and a SQLite file; wall and CPU per step, and the ratio.

Printed, never asserted. The numbers depend on the machine and its load (2 shared cores
here): read the ratios.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chainlab import CallContext, Chain, JobStatus, Toolbox  # noqa: E402
from chainlab.runtime import Runtime  # noqa: E402
from chainlab.store import MemoryStore, SQLiteStore  # noqa: E402


class Backend:
    def __init__(self, finish_at_first_poll: bool = False):
        self.finish = finish_at_first_poll
        self.polls = 0
        self.release = False

    def register(self, tb: Toolbox, poll_every_s: float) -> None:
        backend = self

        class Job:
            async def submit(self, n: int, ctx: CallContext) -> dict:
                return {"id": ctx.idempotency_key[:8]}

            async def poll(self, handle: dict) -> JobStatus:
                backend.polls += 1
                if backend.finish or backend.release:
                    return JobStatus.succeeded(1)
                return JobStatus.running()

        tb.job(Job, name="job", poll_every_s=poll_every_s, output_type=int)


def _rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def waiting(n: int, window_s: float) -> dict[str, float]:
    tb = Toolbox()
    backend = Backend()
    backend.register(tb, poll_every_s=0.5)
    chain = Chain.from_dict({"name": "wait", "options": {"max_concurrency": 8},
                             "steps": [{"id": f"j{i}", "tool": "job", "args": {"n": i}}
                                       for i in range(n)]})
    runtime = Runtime(tb, MemoryStore())
    gc.collect()
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]
    rss0 = _rss_kb()
    run = await runtime.start(chain)
    while sum(1 for st in run.steps.values()
              if st.job is not None and st.job["phase"] == "waiting") < n:
        await anyio.sleep(0.01)
    await anyio.sleep(0.6)  # every waiter armed and polled once
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - heap0
    tracemalloc.stop()
    rss = _rss_kb() - rss0
    polls0, cpu0, wall0 = backend.polls, time.process_time(), time.perf_counter()
    await anyio.sleep(window_s)
    polls, cpu = backend.polls - polls0, time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    backend.release = True
    await run.wait()
    await runtime.aclose()
    return {"jobs": n, "heap_kb_per_job": heap / 1024 / n, "rss_kb_per_job": rss / n,
            "polls": polls, "cpu_us_per_poll": cpu / max(polls, 1) * 1e6,
            "cpu_ms_per_tick": cpu / max(polls / n, 1e-9) * 1e3,
            "cpu_share": cpu / wall}


async def per_step(n: int, store_kind: str, kind: str) -> tuple[float, float]:
    tb = Toolbox()
    Backend(finish_at_first_poll=True).register(tb, poll_every_s=0.001)

    @tb.tool(side_effects=True)
    async def plain(n: int, ctx: CallContext) -> int:
        return 1

    chain = Chain.from_dict({"name": kind, "options": {"max_concurrency": 8},
                             "steps": [{"id": f"s{i}", "tool": kind, "args": {"n": i}}
                                       for i in range(n)]})
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if store_kind == "memory" else SQLiteStore(Path(tmp) / "b.db")
        runtime = Runtime(tb, store)
        run = await runtime.start(chain)  # warm-up run (imports, compile cache)
        await run.wait()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        run = await runtime.start(chain)
        result = await run.wait()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        assert result.status == "succeeded", result.status
        await runtime.aclose()
    return wall / n * 1e6, cpu / n * 1e6


async def main(quick: bool) -> None:
    n_wait = 200 if quick else 1000
    w = await waiting(n_wait, 2.0 if quick else 5.0)
    print(f"\n{w['jobs']} jobs waiting at once (poll_every_s=0.5, MemoryStore)")
    print(f"  {'python heap per waiting job':34} {w['heap_kb_per_job']:8.1f} KB")
    print(f"  {'RSS per waiting job':34} {w['rss_kb_per_job']:8.1f} KB")
    print(f"  {'polls in the window':34} {w['polls']:8d}")
    print(f"  {'CPU per poll':34} {w['cpu_us_per_poll']:8.1f} us")
    print(f"  {'CPU per tick (every job polled)':34} {w['cpu_ms_per_tick']:8.1f} ms")
    print(f"  {'CPU share while waiting':34} {w['cpu_share'] * 100:8.1f} %")
    n = 200 if quick else 1000
    print(f"\nper-step overhead, {n} independent steps, max_concurrency 8")
    print(f"  {'store':8} {'plain wall us':>14} {'job wall us':>12} {'ratio':>6}"
          f" {'plain cpu us':>13} {'job cpu us':>11} {'ratio':>6}")
    for store_kind in ("memory", "sqlite"):
        pw, pc = await per_step(n, store_kind, "plain")
        jw, jc = await per_step(n, store_kind, "job")
        print(f"  {store_kind:8} {pw:14.0f} {jw:12.0f} {jw / pw:6.2f} {pc:13.0f} {jc:11.0f}"
              f" {jc / pc:6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    anyio.run(main, parser.parse_args().quick)
