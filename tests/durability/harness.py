"""Parent-side helpers of the durability tests: worker processes (forked from a
pre-imported server, or fresh interpreters), snapshots of the store and the ledger taken
while no worker runs, and the invariants checked on them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chainlab.errors import RunNotFoundError
from chainlab.runtime import RunState
from chainlab.store import Event, SQLiteStore
from tests.durability.chainlib import UNSAFE_TOOLS, Ledger

ROOT = Path(__file__).resolve().parents[2]
CALL_ENDS = frozenset({"step_succeeded", "step_failed", "step_retry_scheduled", "step_in_doubt",
                       "step_timed_out", "step_cancelled", "step_ready"})
EXIT_DONE, EXIT_SUSPENDED, EXIT_STALE, EXIT_PLAN = 0, 10, 3, 4


class Child:
    """A worker process: ``poll()``, ``kill()`` (SIGKILL), ``wait()``, ``output()``."""

    pid: int
    out: Path

    def poll(self) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        if self.poll() is None:  # not reaped yet, so the pid is still this process's
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"worker {self.pid} still running after {timeout}s:\n"
                                     + self.output())
            time.sleep(0.002)
        return rc

    def output(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def result(self) -> dict[str, Any]:
        """The worker's JSON report (its last stdout line)."""
        lines = [ln for ln in self.output().splitlines() if ln.startswith("{")]
        assert lines, f"worker {self.pid} printed no report:\n{self.output()}"
        return json.loads(lines[-1])  # type: ignore[no-any-return]


class ForkedChild(Child):
    def __init__(self, server: ForkServer, pid: int, out: Path):
        self.server, self.pid, self.out = server, pid, out
        self.rc: int | None = None

    def poll(self) -> int | None:
        if self.rc is None:
            self.rc = self.server.ask({"op": "poll", "pid": self.pid})["returncode"]
        return self.rc


class FreshChild(Child):
    """A worker in a new interpreter (``python -m tests.durability.worker``)."""

    def __init__(self, argv: list[str], out: Path):
        self.out = out
        with open(out, "w") as fh:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.durability.worker", *argv],
                                         cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()


class ForkServer:
    """Client of :mod:`tests.durability.forkserver`."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.durability.forkserver"],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        return json.loads(line)  # type: ignore[no-any-return]

    def spawn(self, argv: list[str], out: Path) -> ForkedChild:
        pid = self.ask({"op": "spawn", "argv": argv, "out": str(out)})["pid"]
        return ForkedChild(self, pid, out)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@dataclass
class Snapshot:
    """What the store and the world say at one moment when no worker runs."""

    events: list[Event] | None  # None: the run does not exist (killed before create_run)
    ledger: list[dict[str, Any]]
    attempts_view: list[tuple[Any, ...]] | None  # None: the store has no SQL views

    @property
    def state(self) -> RunState | None:
        if self.events is None:
            return None
        return RunState.from_events("run", self.events)

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    def succeeded_steps(self) -> set[str]:
        return {e.step_id for e in self.events or () if e.kind == "step_succeeded" and e.step_id}

    def ledger_count(self, step_id: str) -> int:
        return sum(1 for entry in self.ledger if entry["step"] == step_id)


def snapshot(db: Path, ledger: Path, run_id: str) -> Snapshot:
    with SQLiteStore(db) as store:  # opening after a SIGKILL also recovers the WAL
        try:
            events: list[Event] | None = store.load_events(run_id)
        except RunNotFoundError:
            events = None
        view = store.query("SELECT step_id, attempt, kind, status, idempotency_key FROM attempts"
                           " WHERE run_id = ? ORDER BY started_at, step_id", (run_id,))
    return Snapshot(events, Ledger(ledger).read(), view)


def check_write_ahead(snap: Snapshot) -> None:
    """No effect without a durable record: every effect in the ledger belongs to an attempt
    whose ``step_started`` (with that idempotency key) was already committed."""
    started = {(e.step_id, e.payload.get("idempotency_key"))
               for e in snap.events or () if e.kind == "step_started"}
    for entry in snap.ledger:
        if entry["effect"]:
            assert (entry["step"], entry["key"]) in started, (
                f"effect {entry} happened without a committed step_started")
            assert entry.get("durable") in (True, None), (
                f"call {entry} began before its step_started was committed")


def closing_event(events: list[Event], step_id: str, attempt: int, after_seq: int) -> Event:
    for ev in events:
        if ev.seq > after_seq and ev.step_id == step_id and ev.attempt == attempt \
                and ev.kind in CALL_ENDS:
            return ev
    raise AssertionError(f"attempt {step_id}#{attempt} never ended")


def check_recovery_of(kill: Snapshot, final: Snapshot) -> list[str]:
    """Every attempt open at the kill ended by recovery as its tool's contract says; no step
    that had succeeded at the kill ran again. Returns what happened, for the statistics."""
    assert final.events is not None
    seen = []
    state = kill.state
    if state is None:
        return ["before the run existed"]
    for step_id in kill.succeeded_steps():
        assert final.ledger_count(step_id) == kill.ledger_count(step_id), (
            f"step {step_id!r} had succeeded at the kill and was called again")
        again = [e for e in final.events if e.seq > kill.last_seq and e.step_id == step_id
                 and e.kind == "step_started"]
        assert not again, f"step {step_id!r} had succeeded at the kill and was started again"
    for rec in state.attempts:
        if rec.kind != "call" or rec.status != "running":
            continue
        end = closing_event(final.events, rec.step_id, rec.attempt, kill.last_seq)
        effect = any(e["effect"] and e["key"] == rec.idempotency_key for e in kill.ledger)
        if rec.tool == "send":
            if effect:
                assert end.kind == "step_succeeded" and end.payload.get("reconciled"), end
                seen.append("send reconciled: took effect")
            else:
                assert end.kind == "step_ready", end
                assert end.payload.get("recovery") == "reconciled_no_effect", end
                seen.append("send reconciled: no effect")
        elif rec.tool in UNSAFE_TOOLS:
            assert end.kind == "step_in_doubt" and end.payload["reason"] == "interrupted", end
            seen.append(f"{rec.tool} in doubt ({'after' if effect else 'before'} its effect)")
        else:
            assert end.kind == "step_ready" and end.payload.get("recovery") == "rerun", end
            seen.append(f"{rec.tool} re-run")
        final_rec = [a for a in final.state.attempts  # type: ignore[union-attr]
                     if a.step_id == rec.step_id and a.attempt == rec.attempt
                     and a.kind == "call"]
        assert [a.status for a in final_rec] == ["interrupted"]
    return seen or [f"no open attempt ({len(kill.events or ())} events)"]


def check_finished(final: Snapshot, baseline: dict[str, Any],
                   unsafe_steps: dict[str, str]) -> None:
    """The run ended as an uninterrupted one would, with each effect exactly once, stable
    idempotency keys, a gap-free log and views that agree with the fold."""
    state = final.state
    assert state is not None and final.events is not None
    assert state.status == "succeeded", {s: str(st.status) for s, st in state.steps.items()}
    assert state.outputs == baseline
    assert [e.seq for e in final.events] == list(range(1, len(final.events) + 1))
    epochs = [e.epoch for e in final.events]
    assert epochs == sorted(epochs), "an older epoch wrote after a newer one"
    keys: dict[str, set[str | None]] = {}
    for rec in state.attempts:
        keys.setdefault(rec.step_id, set()).add(rec.idempotency_key)
    assert all(len(k) == 1 for k in keys.values()), f"keys changed across attempts: {keys}"
    for entry in final.ledger:
        assert {entry["key"]} == keys[entry["step"]], entry
    for step_id in unsafe_steps:
        effects = [e for e in final.ledger if e["step"] == step_id and e["effect"]]
        assert len(effects) == 1, f"step {step_id!r} took effect {len(effects)} times"
    check_write_ahead(final)
    if final.attempts_view is not None:
        view = sorted((r[0], r[1], r[2], r[3], r[4]) for r in final.attempts_view)
        fold = sorted((a.step_id, a.attempt, a.kind, str(a.status), a.idempotency_key)
                      for a in state.attempts)
        assert view == fold
