"""The worker fleet on PostgreSQL (issue 39): throughput with 1, 2 and 4 worker processes
next to Procrastinate on the same server in the same run, the time from a worker's SIGKILL
(or SIGSTOP) to its runs moving on, and the claim's latency at a backlog of 10,000 runs.

    .venv/bin/python benchmarks/bench_workers.py [--runs 400] [--url URL]
        [--procrastinate-python /work/venvs/procrastinate/bin/python] [--skip-takeover]
        [--only throughput|takeover|claims]

The peer is NOT a dependency of chainlab: install it in a venv of its own (the script prints
what is missing and goes on without its rows)::

    python3 -m venv /work/venvs/procrastinate
    /work/venvs/procrastinate/bin/pip install procrastinate

Without ``--url`` a throwaway PostgreSQL server is started (fsync ON, unix socket; tests/pg.py);
every row gets a schema of its own. The workload: ``--runs`` runs of a chain of 3 steps in a
row whose middle step changes the world (chainlab: side_effects, not idempotent, so its start
is durable before the call); every step body writes one line ``time run step`` to a file and
a row's time is the last line minus the first (the same code, the same measure, for both
systems: process start-up is not counted). Procrastinate is measured two ways: one job per
run (the three calls inside one job: a crash repeats all three), and one job per step (each
job defers the next: durable per step, the nearest to a chain). Every worker process runs 8
at once. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import psycopg  # noqa: E402
from fleet_tools import CHAIN, toolbox  # noqa: E402

from chainlab.runtime import Runtime  # noqa: E402
from chainlab.store.postgres import PostgresStore  # noqa: E402
from tests.pg import server_url  # noqa: E402

PEER_PYTHON = "/work/venvs/procrastinate/bin/python"
CONCURRENCY = 8
_schemas = iter(range(1, 10_000))


def schema_url(url: str) -> tuple[str, str]:
    """A new empty schema on the server: (its URL, a libpq conninfo with the same path)."""
    name = f"bw{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={name}')}", name


def span(path: Path, expected: int) -> float:
    """Seconds from the first step line to the last (all ``expected`` lines written)."""
    times = [float(line.split()[0]) for line in path.read_text().splitlines()]
    assert len(times) == expected, f"{path}: {len(times)} lines, expected {expected}"
    return max(times) - min(times)


def wait_lines(path: Path, expected: int, procs: list[subprocess.Popen[bytes]],
               timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or path.read_text().count("\n") < expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {path} has not {expected} lines")
        if all(p.poll() is not None for p in procs):
            raise SystemExit(f"every worker exited before {path} had {expected} lines")
        time.sleep(0.05)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


# ---------------------------------------------------------------------- chainlab
def worker_argv(url: str, name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "chainlab", "worker", "--db", url, "--tools",
            "fleet_tools:toolbox", "--name", name, "--concurrency", str(CONCURRENCY),
            "--poll", "0.05", "-q", *extra]


def worker_env(out: Path, sleep: float = 0.0) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{HERE}:{ROOT}", "BENCH_OUT": str(out),
            "BENCH_SLEEP": str(sleep)}


def enqueue(url: str, runs: int, **context: Any) -> list[str]:
    async def main() -> list[str]:
        store = PostgresStore(url)
        async with Runtime(toolbox, store) as runtime:
            ids = [await runtime.enqueue(CHAIN, {"run": i, **context}) for i in range(runs)]
        store.close()
        return ids

    return anyio.run(main)


def chainlab_row(url: str, workers: int, runs: int, folder: Path) -> float:
    run_url, _ = schema_url(url)
    enqueue(run_url, runs)
    out = folder / f"chainlab-{workers}.txt"
    procs = [subprocess.Popen(worker_argv(run_url, f"w{i}"), env=worker_env(out), cwd=HERE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(workers)]
    try:
        wait_lines(out, 3 * runs, procs)
        with PostgresStore(run_url) as store:  # every run ended (the last line is its end)
            deadline = time.monotonic() + 60
            while any(d.in_progress or d.queued for d in store.queue_depths()) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        stop(procs)
    return span(out, 3 * runs)


# ---------------------------------------------------------------------- procrastinate
PEER_APP = textwrap.dedent('''
    import os, time
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=os.environ["BENCH_DSN"]))
    OUT = os.environ.get("BENCH_OUT", os.devnull)

    def line(run, step):
        fd = os.open(OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.6f} {run} {step}\\n".encode())
        finally:
            os.close(fd)

    @app.task(queue="bench")
    async def whole(run: int):  # one job per run: the three calls inside it
        line(run, "a"); x = run * 2 + 1
        line(run, "b"); x = x + 1
        line(run, "c")

    @app.task(queue="bench")
    async def step_a(run: int):  # one job per step: each defers the next
        line(run, "a")
        await step_b.defer_async(run=run, x=run * 2 + 1)

    @app.task(queue="bench")
    async def step_b(run: int, x: int):
        line(run, "b")
        await step_c.defer_async(run=run, x=x + 1)

    @app.task(queue="bench")
    async def step_c(run: int, x: int):
        line(run, "c")
''')

PEER_DEFER = textwrap.dedent('''
    import asyncio, sys
    from benchapp import app, whole, step_a

    async def main(kind, runs):
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = whole if kind == "job per run" else step_a
            await task.batch_defer_async(*[{"run": i} for i in range(runs)])

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
''')


def peer_row(python: str, url: str, kind: str, workers: int, runs: int,
             folder: Path) -> float:
    run_url, _ = schema_url(url)
    app_dir = folder / "peer"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "benchapp.py").write_text(PEER_APP)
    (app_dir / "defer.py").write_text(PEER_DEFER)
    dsn = run_url  # (the peer's connector takes a URL too)
    out = folder / f"peer-{kind.replace(' ', '-')}-{workers}.txt"
    env = {**os.environ, "BENCH_DSN": dsn, "BENCH_OUT": str(out),
           "PYTHONPATH": str(app_dir)}
    subprocess.run([python, "defer.py", kind, str(runs)], cwd=app_dir, env=env, check=True)
    procs = [subprocess.Popen([python, "-m", "procrastinate", "--app", "benchapp.app",
                               "worker", "--queues", "bench", "--concurrency",
                               str(CONCURRENCY), "--name", f"p{i}"],
                              cwd=app_dir, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for i in range(workers)]
    try:
        wait_lines(out, 3 * runs, procs)
    finally:
        stop(procs)
    return span(out, 3 * runs)


def peer_missing(python: str) -> str | None:
    if not Path(python).exists():
        return (f"Procrastinate's rows are left out: no {python}; set it up with\n"
                f"    python3 -m venv {Path(python).parent.parent}\n"
                f"    {Path(python).parent}/pip install procrastinate")
    probe = subprocess.run([python, "-c", "import procrastinate"], capture_output=True,
                           text=True)
    if probe.returncode:
        return f"Procrastinate's rows are left out: {python} cannot import it " \
               f"({probe.stderr.strip().splitlines()[-1]})"
    return None


def throughput(url: str, runs: int, peer: str | None, folder: Path) -> None:
    rows: list[tuple[str, int, float]] = []
    for workers in (1, 2, 4):
        rows.append(("chainlab", workers, chainlab_row(url, workers, runs, folder)))
        if peer is not None:
            for kind in ("job per step", "job per run"):
                rows.append((f"procrastinate ({kind})", workers,
                             peer_row(peer, url, kind, workers, runs, folder)))
    base = {w: s for name, w, s in rows if name == "chainlab"}
    print(f"\nthroughput: {runs} runs of 3 steps (the middle one a side effect), "
          f"{CONCURRENCY} at once per worker process, one PostgreSQL, {os.cpu_count()} cores")
    print(f"{'system':<32} {'workers':>7} {'seconds':>8} {'runs/s':>8} {'steps/s':>8} "
          f"{'time / chainlab':>16}")
    for name, workers, seconds in rows:
        print(f"{name:<32} {workers:>7} {seconds:>8.2f} {runs / seconds:>8.0f} "
              f"{3 * runs / seconds:>8.0f} {seconds / base[workers]:>15.2f}x")


# ---------------------------------------------------------------------- takeover
def takeover_trial(url: str, fault: str, same_host: bool, folder: Path, n: int) -> list[float]:
    """Seconds from the fault to each of the victim's runs being claimed by the other
    worker (its ``run_resumed``), default liveness settings (beat 1 s, lapse 5 s)."""
    run_url, _ = schema_url(url)
    ids = enqueue(run_url, n)
    out = folder / f"takeover-{fault}-{same_host}.txt"
    check = "--same-host-check" if same_host else "--no-same-host-check"
    victim = subprocess.Popen(worker_argv(run_url, "victim", check), cwd=HERE,
                              env=worker_env(out, sleep=20.0), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    procs = [victim]
    try:
        with PostgresStore(run_url) as store:
            deadline = time.monotonic() + 60
            while not all(store.get_run(r).driver for r in ids):
                assert time.monotonic() < deadline, "the victim did not claim its runs"
                time.sleep(0.05)
            procs.append(subprocess.Popen(worker_argv(run_url, "rescuer", check), cwd=HERE,
                                          env=worker_env(out, sleep=0.0),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            while not any(w.name == "rescuer" for w in store.list_workers()):
                time.sleep(0.05)
            time.sleep(1.5)  # every run mid-call; the rescuer has beaten
            at = time.time()
            os.kill(victim.pid, signal.SIGKILL if fault == "SIGKILL" else signal.SIGSTOP)
            if fault == "SIGKILL":
                victim.wait()  # reaped, as its parent (a shell, systemd) would: pid gone
            moved: dict[str, float] = {}
            deadline = time.monotonic() + 60
            while len(moved) < len(ids) and time.monotonic() < deadline:
                for r in ids:
                    if r not in moved:
                        ev = [e for e in store.load_events(r) if str(e.kind) == "run_resumed"]
                        if ev:
                            moved[r] = ev[0].ts - at
                time.sleep(0.02)
    finally:
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)
        stop(procs)
    return sorted(moved.values())


def takeover(url: str, folder: Path) -> None:
    print("\ntakeover: 4 runs mid-call on one worker; another worker of the same fleet claims "
          "them (beat 1 s, lapse 5 s, claim poll 0.05 s); 3 trials each")
    print(f"{'fault':<8} {'noticed by':<34} {'runs':>5} {'median s':>9} {'max s':>7}")
    for fault, same_host, how in (
            ("SIGKILL", True, "its pid is gone (same host)"),
            ("SIGKILL", False, "its heartbeats lapse (another host)"),
            ("SIGSTOP", True, "its heartbeats lapse (frozen)")):
        seconds = [s for _ in range(3)
                   for s in takeover_trial(url, fault, same_host, folder, 4)]
        print(f"{fault:<8} {how:<34} {len(seconds):>5} {statistics.median(seconds):>9.2f} "
              f"{max(seconds):>7.2f}")


# ---------------------------------------------------------------------- claims
def claim_latency(url: str) -> None:
    print("\nclaim latency: one claim_next (one transaction) at a time, the oldest run of "
          "the backlog each time, milliseconds")
    print(f"{'backlog':>8} {'queue':<28} {'claims':>7} {'p50 ms':>7} {'p95 ms':>7} "
          f"{'max ms':>7}")
    template = anyio.run(one_record, url)
    took = commit_floor(url)
    print(f"{'':>8} {'floor: one INSERT + COMMIT':<28} {len(took):>7} "
          f"{statistics.median(took):>7.2f} {took[int(len(took) * 0.95)]:>7.2f} "
          f"{took[-1]:>7.2f}")
    for backlog, variant in ((100, "no limit"), (10_000, "no limit"),
                             (10_000, "limit 5000"), (10_000, "1000 keys")):
        took = claims_at(url, template, backlog, variant)
        print(f"{backlog:>8} {variant:<28} {len(took):>7} {statistics.median(took):>7.2f} "
              f"{took[int(len(took) * 0.95)]:>7.2f} {took[-1]:>7.2f}")


def commit_floor(url: str, n: int = 200) -> list[float]:
    """Milliseconds of one INSERT + COMMIT (autocommit) on the server, sorted."""
    floor_url, _ = schema_url(url)
    with psycopg.connect(floor_url, autocommit=True) as conn:  # what any commit costs here
        conn.execute("CREATE TABLE floor (n INTEGER)")
        took = []
        for i in range(n):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO floor VALUES (%s)", (i,))
            took.append((time.perf_counter() - t0) * 1000)
    return sorted(took)


def claims_at(url: str, template: Any, backlog: int, variant: str = "no limit"
              ) -> list[float]:
    """Milliseconds of each of up to 200 ``claim_next`` at a backlog of ``backlog`` queued
    runs (``variant``: ``no limit``, ``limit 5000`` or ``1000 keys``), sorted."""
    from chainlab.store.queue import WorkerInfo
    from chainlab.store.sql_rows import insert_run

    run_url, _ = schema_url(url)
    store = PostgresStore(run_url)
    if variant == "limit 5000":
        store.set_queue_limit("default", 5000)
    with store._pool.connection() as conn, conn.transaction():
        for i in range(backlog):
            record = template.with_(run_id=f"bl-{i:05}", created_at=1000.0 + i,
                                    concurrency_key=f"k{i % 1000}"
                                    if variant == "1000 keys" else None)
            insert_run(conn, record, None, "%s")
    me = WorkerInfo("bench-claimer", "claimer", "h", os.getpid(), ("default",), 200)
    took = []
    for _ in range(min(200, backlog // 2)):
        t0 = time.perf_counter()
        claim = store.claim_next(me, "default", stale_after_s=5.0)
        took.append((time.perf_counter() - t0) * 1000)
        assert claim is not None
    store.close()
    return sorted(took)


async def one_record(url: str) -> Any:
    """A queued run's record (of the benchmark's chain), to copy into a backlog."""
    run_url, _ = schema_url(url)
    store = PostgresStore(run_url)
    async with Runtime(toolbox, store) as runtime:
        run_id = await runtime.enqueue(CHAIN, {"run": 0})
    record = store.get_run(run_id)
    store.close()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--only", choices=["throughput", "takeover", "claims"], default=None,
                        help="one part only")
    parser.add_argument("--url", default=None, help="a postgresql:// URL (default: a "
                                                    "throwaway server)")
    parser.add_argument("--procrastinate-python", default=PEER_PYTHON)
    parser.add_argument("--skip-takeover", action="store_true")
    args = parser.parse_args()
    missing = peer_missing(args.procrastinate_python)
    if missing:
        print(missing)
    with server_url(args.url) as (url, why), tempfile.TemporaryDirectory() as tmp:
        if url is None:
            print(f"skipped: {why}")
            return
        folder = Path(tmp)
        if args.only in (None, "throughput"):
            throughput(url, args.runs, None if missing else args.procrastinate_python,
                       folder)
        if args.only in (None, "takeover") and not args.skip_takeover:
            takeover(url, folder)
        if args.only in (None, "claims"):
            claim_latency(url)


if __name__ == "__main__":
    main()
