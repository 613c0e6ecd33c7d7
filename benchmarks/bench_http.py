"""What the HTTP service costs over the in-process API (issue 26, item 6).

    .venv/bin/python benchmarks/bench_http.py [--quick]

One `chainlab serve` (a subprocess, uvicorn, SQLite store, no access log) and one
in-process Runtime on its own SQLite file, the same tools (tests/http/served_tools.py),
the same chains; each operation measured both ways in this one run, then the ratio:

  start -> first event    POST /runs, then GET /runs/{id}/stream until the run_started
                          event (median) | runtime.start(), then run.events() until it
  events/s to N clients   a run of one confirmation then 200 instant steps; N streams
                          (N = 1, 10, 100) follow it from the start; the events from the
                          approval on, delivered to all of them, per second from the
                          approval until each has `end` | the same with N run.events()
  runs started per second 8 clients POSTing /runs of a one-step chain (each answered once
                          the run is durable) | runtime.start() in a loop (returns before
                          the first commit)
  decision -> step start  POST .../approve to the step_started event's timestamp
                          (median; one host clock) | run.approve() to the same

Printed, never asserted. The HTTP side's clients run in this process (httpx, httpx-sse,
one asyncio loop), so on a small machine they compete with the server for the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "http"))

from served_tools import toolbox  # noqa: E402  (the server imports the same module)

from chainlab import Chain, Runtime  # noqa: E402
from chainlab.events import EventKind  # noqa: E402
from chainlab.store import SQLiteStore  # noqa: E402

TICKS = 200
QUICK = {"name": "quick", "steps": [{"id": "sum", "tool": "add", "args": {"a": 1, "b": 2}}]}


def fanout_chain(ticks: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"id": "gate", "tool": "pay",
                                    "args": {"to": "bench", "amount": 1}}]
    steps += [{"id": f"t{i}", "tool": "tick", "args": {"n": i}, "depends_on": ["gate"]}
              for i in range(ticks)]
    return {"name": "fanout", "steps": steps}


# ------------------------------------------------------------------ the server
@contextlib.contextmanager
def server(workdir: Path) -> Iterator[tuple[str, str]]:
    """``chainlab serve`` on a free port: (url, token)."""
    token_file = workdir / "token"
    cmd = [sys.executable, "-m", "chainlab.cli", "serve", "--tools", "served_tools:toolbox",
           "--db", str(workdir / "server.db"), "--port", "0", "--token-file", str(token_file),
           "--no-access-log", "--max-body", str(4 << 20)]
    env = {"PYTHONPATH": f"{ROOT / 'tests' / 'http'}:{ROOT}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "listening on " in line and not url:
                url.append(line.split("listening on ", 1)[1].split()[0])
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(120):
        proc.kill()
        raise SystemExit("the server did not start")
    try:
        yield url[0], token_file.read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ over HTTP
class Http:
    def __init__(self, url: str, token: str):
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                 timeout=httpx.Timeout(60, read=120),
                                 limits=httpx.Limits(max_connections=200))

    async def start(self, http: httpx.AsyncClient, chain: dict[str, Any]) -> str:
        r = await http.post("/runs", json={"chain": chain})
        r.raise_for_status()
        return r.json()["run_id"]  # type: ignore[no-any-return]

    async def first_event(self, n: int) -> list[float]:
        out = []
        async with self.client() as http:
            for _ in range(n):
                t0 = time.perf_counter()
                run_id = await self.start(http, QUICK)
                async with aconnect_sse(http, "GET", f"/runs/{run_id}/stream") as source:
                    async for sse in source.aiter_sse():
                        if sse.event == EventKind.RUN_STARTED:
                            out.append(time.perf_counter() - t0)
                            break
        return out

    async def fanout(self, clients: int, ticks: int) -> tuple[float, int]:
        """(events delivered per second to all clients, events per client after approval)."""
        async with self.client() as http:
            run_id = await self.start(http, fanout_chain(ticks))
            waiting = [asyncio.Event() for _ in range(clients)]
            counts = [0] * clients
            approved_at: list[float] = []

            async def follow(i: int) -> float:
                async with aconnect_sse(http, "GET", f"/runs/{run_id}/stream") as source:
                    async for sse in source.aiter_sse():
                        if not sse.data:
                            continue  # a keep-alive (httpx-sse hands it out too)
                        if sse.event == EventKind.STEP_WAITING_CONFIRMATION:
                            waiting[i].set()
                        elif sse.event == EventKind.STEP_APPROVED or counts[i]:
                            counts[i] += sse.event != "end"  # from the approval on
                        if sse.event == "end":
                            return time.perf_counter()
                raise RuntimeError("stream ended without `end`")

            tasks = [asyncio.create_task(follow(i)) for i in range(clients)]
            for ev in waiting:
                await ev.wait()
            approved_at.append(time.perf_counter())
            r = await http.post(f"/runs/{run_id}/steps/gate/approve", json={})
            r.raise_for_status()
            ends = await asyncio.gather(*tasks)
        elapsed = max(ends) - approved_at[0]
        return sum(counts) / elapsed, counts[0]

    async def starts(self, n: int, concurrency: int = 8) -> float:
        async with self.client() as http:
            todo = iter(range(n))

            async def worker() -> None:
                for _ in todo:
                    await self.start(http, QUICK)

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return n / (time.perf_counter() - t0)

    async def decisions(self, n: int) -> list[float]:
        out = []
        async with self.client() as http:
            for _ in range(n):
                run_id = await self.start(http, fanout_chain(0))
                r = await http.get(f"/runs/{run_id}/wait", params={"timeout": 60})
                assert r.json()["status"] == "suspended"
                t0 = time.time()
                r = await http.post(f"/runs/{run_id}/steps/gate/approve", json={})
                r.raise_for_status()
                await http.get(f"/runs/{run_id}/wait", params={"timeout": 60})
                events = (await http.get(f"/runs/{run_id}/events")).json()["events"]
                started = next(e for e in events if e["kind"] == "step_started"
                               and e["step_id"] == "gate")
                out.append(started["ts"] - t0)
        return out


# ------------------------------------------------------------------ in process
class InProcess:
    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    async def first_event(self, n: int) -> list[float]:
        out = []
        chain = Chain.from_dict(QUICK)
        for _ in range(n):
            t0 = time.perf_counter()
            run = await self.runtime.start(chain)
            async for ev in run.events():
                if ev.kind == EventKind.RUN_STARTED:
                    out.append(time.perf_counter() - t0)
                    break
            await run.wait()
        return out

    async def fanout(self, clients: int, ticks: int) -> tuple[float, int]:
        run = await self.runtime.start(Chain.from_dict(fanout_chain(ticks)))
        await run.wait()  # suspended at the gate
        counts = [0] * clients
        approved_at: list[float] = []
        ready = [asyncio.Event() for _ in range(clients)]

        async def follow(i: int) -> float:
            async for ev in run.events():
                if ev.kind == EventKind.STEP_WAITING_CONFIRMATION:
                    ready[i].set()
                elif ev.kind == EventKind.STEP_APPROVED or counts[i]:
                    counts[i] += 1  # from the approval on
            return time.perf_counter()

        tasks = [asyncio.create_task(follow(i)) for i in range(clients)]
        for ev in ready:
            await ev.wait()
        approved_at.append(time.perf_counter())
        await run.approve("gate")
        ends = await asyncio.gather(*tasks)
        return sum(counts) / (max(ends) - approved_at[0]), counts[0]

    async def starts(self, n: int) -> float:
        chain = Chain.from_dict(QUICK)
        runs = []
        t0 = time.perf_counter()
        for _ in range(n):
            runs.append(await self.runtime.start(chain))
        rate = n / (time.perf_counter() - t0)
        for run in runs:
            await run.wait()
        return rate

    async def decisions(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            run = await self.runtime.start(Chain.from_dict(fanout_chain(0)))
            await run.wait()
            t0 = time.time()
            await run.approve("gate")
            await run.wait()
            started = next(e for e in run.event_list() if e.kind == EventKind.STEP_STARTED
                           and e.step_id == "gate")
            out.append(started.ts - t0)
        return out


# ------------------------------------------------------------------ the table
def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def measure(url: str, token: str, workdir: Path, quick: bool) -> list[tuple[str, ...]]:
    reps = 10 if quick else 30
    http = Http(url, token)
    rows: list[tuple[str, ...]] = []
    async with Runtime(toolbox, SQLiteStore(workdir / "inproc.db")) as runtime:
        local = InProcess(runtime)
        a, b = ms(await local.first_event(reps)), ms(await http.first_event(reps))
        rows.append(("start -> first event (median)", f"{a:.2f} ms", f"{b:.2f} ms",
                     f"{b / a:.1f}x slower"))
        for clients in (1, 10, 100):
            a_rate, a_n = await local.fanout(clients, TICKS)
            b_rate, b_n = await http.fanout(clients, TICKS)
            assert a_n == b_n, (a_n, b_n)  # every client saw every event once
            rows.append((f"events/s to {clients} client{'s' if clients > 1 else ''} "
                         f"({b_n} events each)", f"{a_rate:,.0f}", f"{b_rate:,.0f}",
                         f"{a_rate / b_rate:.1f}x slower"))
        n = 60 if quick else 200
        a, b = await local.starts(n), await http.starts(n)
        rows.append(("runs started per second", f"{a:,.0f}", f"{b:,.0f}",
                     f"{a / b:.1f}x slower"))
        a, b = ms(await local.decisions(reps)), ms(await http.decisions(reps))
        rows.append(("decision -> step started (median)", f"{a:.2f} ms", f"{b:.2f} ms",
                     f"{b / a:.1f}x slower"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        os.chdir(workdir)  # the in-process side's pay tool writes effects.jsonl here
        try:
            with server(workdir) as (url, token):
                rows = asyncio.run(measure(url, token, workdir, args.quick))
        finally:
            os.chdir(here)
    head = ("operation", "in-process", "over HTTP", "ratio")
    rows = [head, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                        for j, (c, w) in enumerate(zip(row, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
