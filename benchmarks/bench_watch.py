"""How soon a watcher in another process sees a run's events (DESIGN §13: ``chainlab watch``,
``%chain watch``; both follow ``runtime.watch`` through a WatchedRun).

    .venv/bin/python benchmarks/bench_watch.py [--n 100] [--dsn URL]

Process A (this file with ``--drive``) drives a chain of N steps in a row, each sleeping
``--step-ms`` (so events come spaced, as in a real run). Process B (this one) follows the run
with ``runtime.watch_run(run_id)`` from right after it starts and records, for every event
that B did not find already stored, the time it was applied to B's state minus the event's
timestamp (when A emitted it, so A's commit is included; both processes on this host's
clock): the watch lag. Also checked: B saw every stored event once, in order.

Stores: a SQLite file (B polls by seq every 0.05 s, the default) and PostgreSQL (B waits for
the commit's NOTIFY; a throwaway server on a unix socket as tests/pg.py starts it, fsync on;
or ``--dsn postgresql://...``). Median, p90 and max lag per store; printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.errors import RunNotFoundError
from chainlab.events import Event
from chainlab.runtime import Runtime
from chainlab.store import open_store
from tests.pg import server_url

RUN_ID = "watched"


def toolbox(step_s: float) -> Toolbox:
    tb = Toolbox("watched")

    @tb.tool
    async def work(i: int) -> int:
        """Effect-free; takes a moment, like a call to an API."""
        await anyio.sleep(step_s)
        return i

    return tb


def chain(n: int) -> Chain:
    steps = [{"id": f"s{i}", "tool": "work", "args": {"i": i},
              **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(n)]
    return Chain.from_dict({"name": "watched", "steps": steps})


async def drive(url: str, n: int, step_s: float) -> int:
    """Process A: drive the chain to its end."""
    store = open_store(url)
    try:
        async with Runtime(toolbox(step_s), store) as runtime:
            run = await runtime.start(chain(n), {}, run_id=RUN_ID)
            return 0 if (await run.wait()).ok else 1
    finally:
        store.close()


async def follow(url: str) -> list[tuple[Event, float | None]]:
    """Process B: wait for the run to exist, then follow it to its end. Each event with the
    time it reached B's state (None: it was already stored when B first looked)."""
    store = open_store(url)
    seen: list[tuple[Event, float | None]] = []
    try:
        async with Runtime(Toolbox("none"), store) as runtime:
            while True:
                try:
                    run = runtime.watch_run(RUN_ID)
                    break
                except RunNotFoundError:
                    await anyio.sleep(0.005)
            seen += [(ev, None) for ev in run.history()]  # committed before B looked
            run.subscribe(lambda ev: seen.append((ev, time.time())))
            await run.wait()
    finally:
        store.close()
    return seen


def measure(url: str, n: int, step_s: float) -> tuple[list[float], str]:
    open_store(url).close()  # the schema exists before A starts
    a = subprocess.Popen([sys.executable, __file__, "--drive", url, "--n", str(n),
                          "--step-ms", str(step_s * 1000)])
    try:
        seen = anyio.run(follow, url)
        a.wait(timeout=120)
        stored = open_store(url).load_events(RUN_ID)
        same = [ev for ev, _ in seen] == stored
        lags = [at - ev.ts for ev, at in seen if at is not None]
        return lags, f"{len(stored)} events, each seen once in order: {same}"
    finally:
        if a.poll() is None:
            a.kill()


def row(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    p90 = statistics.quantiles(ms, n=10, method="inclusive")[-1] if len(ms) > 1 else ms[0]
    return f"{name:<12} {statistics.median(ms):>9.1f} {p90:>9.1f} {max(ms):>9.1f} {len(ms):>6}"


def main(args: argparse.Namespace) -> None:
    step_s = args.step_ms / 1000
    rows: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        lags, note = measure(str(Path(tmp) / "runs.db"), args.n, step_s)
        rows.append(row("sqlite", lags))
        notes.append(f"sqlite: {note}")
    with server_url(args.dsn) as (url, why_not):
        if url is None:
            notes.append(f"postgres: skipped ({why_not})")
        else:
            lags, note = measure(url, args.n, step_s)
            rows.append(row("postgres", lags))
            notes.append(f"postgres: {note}")
    print(f"watch lag, driver A -> watcher B: a chain of {args.n} steps of {args.step_ms:g} ms "
          "(event emitted by A -> applied in B's state)")
    print(f"{'':<12} {'median ms':>9} {'p90 ms':>9} {'max ms':>9} {'events':>6}")
    for line in rows:
        print(line)
    for line in notes:
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--dsn", default=None, help="a postgresql:// URL of an existing server")
    parser.add_argument("--drive", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive is not None:
        sys.exit(anyio.run(drive, args.drive, args.n, args.step_ms / 1000))
    main(args)
