"""How fast a decision taken in one process reaches the process that drives the run
(DESIGN §13; issue 17: "a decision taken in process B reaches the driving process A within
one second").

    .venv/bin/python benchmarks/bench_decisions.py [--n 20] [--dsn URL]

Process A (this file with ``--drive``) drives a chain of N steps in a row, each waiting for
confirmation, with the Runtime's default liveness settings (heartbeat 2 s, mailbox read
every 0.15 s on SQLite, LISTEN/NOTIFY on PostgreSQL). Process B (this one) waits until step
i waits, then calls ``runtime.decide(run, step i, "approve")``. Per decision:

  to step start   from the call of decide() in B to the ``step_started`` event of that step
                  in A (its timestamp; both processes on this host's clock)
  decide() call   how long decide() took to return "applied" (A's answer seen by B)

Stores: a SQLite file (WAL, synchronous=FULL) and PostgreSQL (a throwaway server on a unix
socket, fsync on, as tests/pg.py starts it; or ``--dsn postgresql://...``). Median and p90
of N decisions each; printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.events import EventKind, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import open_store
from tests.pg import server_url

RUN_ID = "decisions"


def toolbox() -> Toolbox:
    tb = Toolbox("gates")

    @tb.tool(requires_confirmation=True)
    async def gate(i: int) -> int:
        """Waits for a person, then does nothing."""
        return i

    return tb


def chain(n: int) -> Chain:
    steps: list[dict[str, Any]] = [{"id": "g0", "tool": "gate", "args": {"i": 0}}]
    steps += [{"id": f"g{i}", "tool": "gate", "args": {"i": i}, "depends_on": [f"g{i - 1}"]}
              for i in range(1, n)]
    return Chain.from_dict({"name": "gates", "steps": steps})


async def drive(url: str, n: int) -> int:
    """Process A: drive the chain until it ends (decisions come through the store)."""
    store = open_store(url)
    try:
        async with Runtime(toolbox(), store) as runtime:
            run = await runtime.start(chain(n), {}, run_id=RUN_ID)
            result = await run.wait()
            while result.suspended:
                await anyio.sleep(0.05)
                result = await run.wait()
            return 0 if result.ok else 1
    finally:
        store.close()


async def decide_all(url: str, n: int) -> tuple[list[float], list[float]]:
    """Process B: approve g0..g{n-1} one by one as each starts waiting."""
    store = open_store(url)
    to_start: list[float] = []
    calls: list[float] = []
    try:
        async with Runtime(toolbox(), store) as runtime:
            seen = 0
            for i in range(n):
                step = f"g{i}"
                while True:  # step i waits, and A's heartbeat says it is alive
                    events = store.load_events(RUN_ID, seen) if _exists(store) else []
                    waiting = any(e.kind == EventKind.STEP_WAITING_CONFIRMATION
                                  and e.step_id == step for e in events)
                    if waiting and store.driver_of(RUN_ID) is not None:
                        break
                    await anyio.sleep(0.01)
                t0 = time.time()
                assert await runtime.decide(RUN_ID, step, "approve") == "applied"
                calls.append(time.time() - t0)
                while True:
                    started = [e for e in store.load_events(RUN_ID, seen)
                               if e.kind == EventKind.STEP_STARTED and e.step_id == step]
                    if started:
                        to_start.append(started[0].ts - t0)
                        seen = started[0].seq
                        break
                    await anyio.sleep(0.005)
                assert not runtime.get_run(RUN_ID).active  # A applied it, B did not take over
    finally:
        store.close()
    return to_start, calls


def _exists(store: Any) -> bool:
    try:
        store.get_run(RUN_ID)
    except KeyError:
        return False
    return True


def measure(url: str, n: int) -> tuple[list[float], list[float]]:
    open_store(url).close()  # the schema exists before A starts
    a = subprocess.Popen([sys.executable, __file__, "--drive", url, "--n", str(n)])
    try:
        result = anyio.run(decide_all, url, n)
        a.wait(timeout=60)
        status = open_store(url).get_run(RUN_ID).status
        if a.returncode != 0 or status != RunStatus.SUCCEEDED:
            raise RuntimeError(f"driver exited {a.returncode}, run {status}")
        return result
    finally:
        if a.poll() is None:
            a.kill()


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]  # (never above the max)


def row(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"{name:<30} {statistics.median(ms):>9.1f} {p90(ms):>9.1f} {max(ms):>9.1f} "
            f"{len(ms):>5}")


def main(args: argparse.Namespace) -> None:
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        to_start, calls = measure(str(Path(tmp) / "runs.db"), args.n)
        rows += [row("sqlite: to step start", to_start), row("sqlite: decide() call", calls)]
    with server_url(args.dsn) as (url, why_not):
        if url is None:
            rows.append(f"postgres: skipped ({why_not})")
        else:
            to_start, calls = measure(url, args.n)
            rows += [row("postgres: to step start", to_start),
                     row("postgres: decide() call", calls)]
    print(f"decision latency, process B -> driver A, {args.n} decisions per store "
          "(default liveness settings; target: within one second)")
    print(f"{'':<30} {'median ms':>9} {'p90 ms':>9} {'max ms':>9} {'n':>5}")
    for line in rows:
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--dsn", default=None, help="a postgresql:// URL of an existing server")
    parser.add_argument("--drive", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive is not None:
        sys.exit(anyio.run(drive, args.drive, args.n))
    main(args)
