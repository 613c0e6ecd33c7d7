"""Parent-side helpers of the fleet tests: real ``chainlab worker`` processes (SIGKILLed,
SIGSTOPped and continued, drained with SIGTERM), a throwaway PostgreSQL schema per test, and
the invariants checked on the event log and the ledger afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from chainlab.events import RUN_TERMINAL
from chainlab.store import Event
from tests.workers.fleet_tools import Ledger

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.workers.fleet_tools:toolbox"
END_KINDS = frozenset({"run_succeeded", "run_failed", "run_cancelled", "run_rolled_back",
                       "run_rollback_failed"})


def pg_url(schema: str) -> str:
    """A ``postgresql://`` URL to a new, empty schema of the session's server (skips the
    test when no server can be started)."""
    from tests.pg import Unavailable, shared_cluster

    try:
        cluster = shared_cluster()
    except Unavailable as exc:
        pytest.skip(str(exc))
    cluster.dsn(schema)
    return f"{cluster.url()}&options={quote(f'-csearch_path={schema}')}"


@dataclass
class WorkerProc:
    """One ``chainlab worker`` process."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def term(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@dataclass
class Fleet:
    """Worker processes on one store, writing one ledger."""

    url: str
    folder: Path
    lapse: float = 2.0
    heartbeat: float = 0.4
    delay: float = 0.05
    workers: list[WorkerProc] = field(default_factory=list)
    started: int = 0

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.folder / "ledger.jsonl")

    def start(self, name: str, *, queues: Iterable[str] = ("orders",), concurrency: int = 2,
              tools: str = TOOLS, drain: float = 30.0) -> WorkerProc:
        self.started += 1
        log = self.folder / f"{name}-{self.started}.log"
        argv = [sys.executable, "-m", "chainlab", "worker", "--db", self.url, "--tools", tools,
                "--name", name, "--concurrency", str(concurrency), "--poll", "0.05",
                "--heartbeat", str(self.heartbeat), "--lapse", str(self.lapse),
                "--drain-timeout", str(drain)]
        for q in queues:
            argv += ["--queue", q]
        env = {**os.environ, "CHAINLAB_LEDGER": str(self.folder / "ledger.jsonl"),
               "CHAINLAB_DELAY": str(self.delay), "PYTHONPATH": str(ROOT)}
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                    env=env)
        worker = WorkerProc(name, proc, log)
        self.workers.append(worker)
        return worker

    def registered(self, worker: WorkerProc, store: Any, timeout: float = 60.0
                   ) -> WorkerProc:
        """``worker`` once it is in the store's registry (started up, signals handled)."""
        def seen() -> bool:
            assert worker.alive(), f"worker {worker.name} exited:\n{worker.output()}"
            return any(w.pid == worker.pid for w in store.list_workers())

        wait_for(seen, timeout, f"worker {worker.name} to register")
        return worker

    def live(self) -> list[WorkerProc]:
        return [w for w in self.workers if w.alive()]

    def close(self) -> None:
        for w in self.workers:
            if w.stopped:
                w.cont()
            w.kill()


def wait_for(check: Callable[[], Any], timeout: float, what: str,
             every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


# ---------------------------------------------------------------------- the log, checked
def segments(events: list[Event]) -> list[tuple[float, float | None, dict[str, Any]]]:
    """A run's in-progress periods ``(from, to, worker)``: from ``run_started`` or
    ``run_resumed`` to the next ``run_suspended`` or end (``to`` None: still going);
    ``worker`` is the fleet worker that the event names (``{}`` for another driver)."""
    out: list[tuple[float, float | None, dict[str, Any]]] = []
    start: tuple[float, dict[str, Any]] | None = None
    for ev in events:
        kind = str(ev.kind)
        if kind in ("run_started", "run_resumed"):
            if start is not None and kind == "run_resumed" and ev.payload.get("worker"):
                out.append((start[0], ev.ts, start[1]))  # a takeover: a new driver from here
                start = None
            if start is None:
                start = (ev.ts, ev.payload.get("worker") or {})
        elif (kind == "run_suspended" or kind in END_KINDS) and start is not None:
            out.append((start[0], ev.ts, start[1]))
            start = None
    if start is not None:
        out.append((start[0], None, start[1]))
    return out


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end before a start at the same time)."""
    points = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals],
                    key=lambda p: (p[0], p[1]))
    most = now = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def check_fleet_log(logs: dict[str, list[Event]], keys: dict[str, str | None], *,
                    queue_limit: int | None, per_worker: int) -> dict[str, Any]:
    """The limits and the fencing, from the event logs alone (returned: what was seen)."""
    runs_in_progress: list[tuple[float, float]] = []
    named: list[tuple[float, float, str, Any]] = []
    by_worker: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    held: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run_id, events in logs.items():
        epochs = [ev.epoch for ev in events]
        assert epochs == sorted(epochs), f"run {run_id}: a fenced epoch wrote after a newer one"
        assert [ev.seq for ev in events] == list(range(1, len(events) + 1)), run_id
        for a, b, worker in segments(events):
            end = b if b is not None else time.time()
            runs_in_progress.append((a, end))
            named.append((a, end, run_id, (worker.get("name"), worker.get("pid"))))
            if worker:
                by_worker[(worker["name"], worker["pid"])].append((a, end))
        if keys.get(run_id) and events:
            last = events[-1]
            held[keys[run_id]].append((events[0].ts, last.ts if str(last.kind) in END_KINDS
                                       else time.time()))
    seen = {"queue": max_overlap(runs_in_progress),
            "worker": max((max_overlap(v) for v in by_worker.values()), default=0),
            "key": max((max_overlap(v) for v in held.values()), default=0)}
    if queue_limit is not None:
        assert seen["queue"] <= queue_limit, (seen, _crowded(named, queue_limit, logs))
    for worker, spans in by_worker.items():
        if max_overlap(spans) > per_worker:
            mine = [n for n in named if n[3] == worker]
            raise AssertionError((seen, worker, _crowded(mine, per_worker, logs)))
    assert seen["key"] <= 1, seen
    return seen


def check_ledger(ledger: list[dict[str, Any]], logs: dict[str, list[Event]]) -> dict[str, int]:
    """Every non-idempotent effect once; an effect of a step needing confirmation only after
    its approval; no call started by an epoch after a newer epoch took the run (a zombie
    starts nothing once fenced). Returns counts."""
    charges: dict[str, int] = defaultdict(int)
    for line in ledger:
        if line["what"] == "effect" and line["tool"] == "charge":
            charges[line["run"]] += 1
    twice = {r: n for r, n in charges.items() if n != 1}
    assert not twice, (twice, [
        ([(x["what"], x["tool"], x["epoch"], x["attempt"], x["pid"], round(x["t"] % 1000, 3))
          for x in ledger if x["run"] == r],
         [(e.seq, str(e.kind), e.step_id, e.epoch, round(e.ts % 1000, 3),
           {k: v for k, v in e.payload.items() if k in ("reason", "worker", "was", "error")})
          for e in logs[r]]) for r in twice])
    zombie_begins = 0
    for line in ledger:
        events = logs[line["run"]]
        newer = [ev.ts for ev in events if ev.epoch > line["epoch"]]
        if line["what"] == "begin" and newer and line["t"] > min(newer):
            zombie_begins += 1
        if line["what"] == "effect" and line["tool"] == "ship":
            approvals = [ev.ts for ev in events if str(ev.kind) == "step_approved"
                         and ev.step_id == "ship"]
            asked = any(str(ev.kind) == "step_waiting_confirmation" and ev.step_id == "ship"
                        for ev in events)
            assert not asked or (approvals and min(approvals) < line["t"]), line
    assert zombie_begins == 0, "a fenced epoch started a call after the takeover"
    return {"charges": sum(charges.values()), "calls": sum(
        1 for line in ledger if line["what"] == "begin")}


def unfinished(store: Any, run_ids: Iterable[str]) -> list[str]:
    return [r for r in run_ids if store.get_run(r).status not in RUN_TERMINAL]


def _crowded(named: list[tuple[float, float, str, Any]], limit: int,
             logs: dict[str, list[Event]]) -> list[Any]:
    """The periods open at a moment more than ``limit`` were (for the failure message)."""
    for a, _, _, _ in sorted(named):
        open_ = [n for n in named if n[0] <= a < n[1]]
        if len(open_) > limit:
            return [(round(x[0] % 1000, 3), round(x[1] % 1000, 3), x[2], x[3],
                     [(e.seq, str(e.kind), e.epoch, round(e.ts % 1000, 3))
                      for e in logs[x[2]] if str(e.kind).startswith("run_")])
                    for x in open_]
    return []
