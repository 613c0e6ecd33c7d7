"""Parent-side helpers of the durability tests: worker processes (forked from a
pre-imported server, or fresh interpreters), snapshots of the store and the ledger taken
while no worker runs, and the invariants checked on them."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
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
    stored_status: str | None = None  # the run's status column (None: not read / no run)

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

    def compensated_steps(self) -> set[str]:
        return {e.step_id for e in self.events or ()
                if e.kind == "compensation_succeeded" and e.step_id}

    def ledger_count(self, step_id: str, kind: str = "call") -> int:
        """Calls of ``kind`` (``call`` or ``compensation``) the world saw for the step."""
        return sum(1 for entry in self.ledger
                   if entry["step"] == step_id and entry.get("kind", "call") == kind)

    def effects(self, step_id: str, kind: str = "call") -> list[dict[str, Any]]:
        """Ledger lines of the step's calls of ``kind`` that changed the world."""
        return [entry for entry in self.ledger if entry["step"] == step_id and entry["effect"]
                and entry.get("kind", "call") == kind]


def snapshot(db: Path, ledger: Path, run_id: str) -> Snapshot:
    with SQLiteStore(db) as store:  # opening after a SIGKILL also recovers the WAL
        try:
            events: list[Event] | None = store.load_events(run_id)
            stored: str | None = str(store.get_run(run_id).status)
        except RunNotFoundError:
            events, stored = None, None
        view = store.query("SELECT step_id, attempt, kind, status, idempotency_key FROM attempts"
                           " WHERE run_id = ? ORDER BY started_at, step_id", (run_id,))
    return Snapshot(events, Ledger(ledger).read(), view, stored)


class Progress:
    """A run's committed progress, read while a worker writes it: a read-only SQLite
    connection of the test's own (WAL: it never blocks the writer), polled by seq."""

    def __init__(self, db: Path, run_id: str):
        self.uri, self.run_id = f"file:{db}?mode=ro", run_id
        self.conn: sqlite3.Connection | None = None

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]] | None:
        try:
            if self.conn is None:
                self.conn = sqlite3.connect(self.uri, uri=True, timeout=5,
                                            isolation_level=None)
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError:  # no file or no tables yet: nothing committed
            self.close()
            return None

    def last_seq(self) -> int:
        """The run's last committed seq (0: no run or no event yet)."""
        rows = self._query("SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?",
                           (self.run_id,))
        return int(rows[0][0]) if rows else 0

    def moved(self, after_seq: int) -> bool:
        """Has anything been committed after ``after_seq``?"""
        return self.last_seq() > after_seq

    def committed(self) -> list[tuple[str, str | None]]:
        """``(kind, step_id)`` of every committed event, in order."""
        rows = self._query("SELECT kind, step_id FROM events WHERE run_id = ? ORDER BY seq",
                           (self.run_id,))
        return [(r[0], r[1]) for r in rows or ()]

    def seen(self, after_seq: int, kind: str, step_id: str | None) -> bool:
        """Has an event of ``kind`` (for ``step_id``) been committed after ``after_seq``?"""
        rows = self._query("SELECT 1 FROM events WHERE run_id = ? AND seq > ? AND kind = ? "
                           "AND step_id IS ? LIMIT 1", (self.run_id, after_seq, kind, step_id))
        return bool(rows)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def kill_when(driver: Any, progress: Progress, ready: Any, timeout: float = 90.0) -> None:
    """SIGKILL ``driver`` (a :class:`~chainlab.testing.driver.SubprocessDriver`) as soon as
    ``ready(progress)`` holds (polled; the driver must stay alive until then), and wait for
    it to die; ``progress`` is closed."""
    deadline = time.monotonic() + timeout
    while not ready(progress):
        assert driver.process.poll() is None, driver.output()
        assert time.monotonic() < deadline, (progress.committed(), driver.output())
        time.sleep(0.02)
    os.kill(driver.pid, signal.SIGKILL)
    assert driver.wait() == -signal.SIGKILL
    progress.close()


# ---------------------------------------------------------------- invariants
def check_log(snap: Snapshot) -> None:
    """Checked on every snapshot (after each kill and at the end): the log has no gap, the
    epochs never go back, the stored status is the fold's, no effect without a durable
    record, no step (or compensation) completed twice or started again once complete, and
    the SQL views agree with the fold."""
    events = snap.events
    if events is None:
        assert snap.stored_status is None
        return
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "the log has a gap"
    epochs = [e.epoch for e in events]
    assert epochs == sorted(epochs), f"an older epoch wrote after a newer one: {epochs}"
    state = RunState.from_events("run", events)
    # a run created but killed before its first commit is 'running' with an empty fold
    assert snap.stored_status == str(state.status or "running"), (
        f"stored status {snap.stored_status!r} != fold {state.status!r} after seq "
        f"{snap.last_seq} ({events[-1].kind if events else 'no event'})")
    for first, again in (("step_succeeded", ("step_started", "step_succeeded")),
                         ("compensation_succeeded", ("compensation_started",
                                                     "compensation_succeeded"))):
        done: dict[str, int] = {}
        for e in events:
            if e.step_id in done and e.kind in again:
                raise AssertionError(f"step {e.step_id!r}: {e.kind} at seq {e.seq} after its "
                                     f"{first} at seq {done[e.step_id]}")
            if e.kind == first and e.step_id:
                done[e.step_id] = e.seq
    check_write_ahead(snap)
    if snap.attempts_view is not None:  # the SQL view over the log agrees with the fold
        view = sorted((r[0], r[1], r[2], r[3], r[4]) for r in snap.attempts_view)
        fold = sorted((a.step_id, a.attempt, a.kind, str(a.status), a.idempotency_key)
                      for a in state.attempts)
        assert view == fold


def check_write_ahead(snap: Snapshot) -> None:
    """No unsafe effect without a durable record: every effect of a non-idempotent tool in
    the ledger belongs to an attempt whose ``step_started`` with that idempotency key was
    already committed. (An idempotent call's start is group-committed: after a crash it is
    re-run under the same deterministic key, which ``check_finished`` checks.)"""
    started = {(e.step_id, e.payload.get("idempotency_key"),
                "compensation" if e.kind == "compensation_started" else "call")
               for e in snap.events or () if e.kind in ("step_started", "compensation_started")}
    for entry in snap.ledger:
        if entry["effect"] and entry["tool"] in UNSAFE_TOOLS:
            assert (entry["step"], entry["key"], entry.get("kind", "call")) in started, (
                f"effect {entry} happened without a committed start")
            assert entry.get("durable") in (True, None), (
                f"call {entry} began before its start was committed")


def closing_event(events: list[Event], step_id: str, attempt: int, after_seq: int,
                  kinds: frozenset[str] = CALL_ENDS) -> Event:
    for ev in events:
        if ev.seq > after_seq and ev.step_id == step_id and ev.attempt == attempt \
                and ev.kind in kinds:
            return ev
    raise AssertionError(f"attempt {step_id}#{attempt} never ended")


def check_recovery_of(kill: Snapshot, final: Snapshot) -> list[str]:
    """Every attempt open at the kill ended by recovery as its tool's contract says; no step
    that had succeeded (or been compensated) at the kill ran again. Returns what happened,
    for the statistics."""
    assert final.events is not None
    seen = []
    state = kill.state
    if state is None:
        return ["before the run existed"]
    later = [e for e in final.events if e.seq > kill.last_seq]
    for step_id in kill.succeeded_steps():
        assert final.ledger_count(step_id) == kill.ledger_count(step_id), (
            f"step {step_id!r} had succeeded at the kill and was called again")
        again = [e for e in later if e.step_id == step_id and e.kind == "step_started"]
        assert not again, f"step {step_id!r} had succeeded at the kill and was started again"
    for step_id in kill.compensated_steps():
        assert final.ledger_count(step_id, "compensation") == kill.ledger_count(
            step_id, "compensation"), f"step {step_id!r} was compensated again after the kill"
        again = [e for e in later if e.step_id == step_id and e.kind == "compensation_started"]
        assert not again, f"step {step_id!r} had been compensated at the kill; started again"
    for rec in state.attempts:
        if rec.status != "running":
            continue
        if rec.kind == "compensation":
            seen.append(_check_interrupted_compensation(rec, kill, final))
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


def _check_interrupted_compensation(rec: Any, kill: Snapshot, final: Snapshot) -> str:
    """A compensation cut by the kill (idempotent here) is marked interrupted and run again
    with the same key; the world sees its effect once."""
    assert final.events is not None and final.state is not None
    end = closing_event(final.events, rec.step_id, rec.attempt, kill.last_seq,
                        frozenset({"compensation_failed", "compensation_succeeded"}))
    assert end.kind == "compensation_failed", end
    assert end.payload.get("error_kind") == "interrupted" and end.payload.get("will_retry"), end
    retried = [e for e in final.events if e.seq > end.seq and e.step_id == rec.step_id
               and e.kind == "compensation_started"]
    assert retried and retried[0].payload.get("idempotency_key") == rec.idempotency_key, (
        f"the interrupted compensation of {rec.step_id!r} was not run again with its key")
    final_rec = [a for a in final.state.attempts if a.step_id == rec.step_id
                 and a.attempt == rec.attempt and a.kind == "compensation"]
    assert [a.status for a in final_rec] == ["interrupted"]
    effect = any(e["effect"] and e["key"] == rec.idempotency_key for e in kill.ledger)
    return f"{rec.tool} compensation re-run ({'after' if effect else 'before'} its effect)"


def check_finished(final: Snapshot, baseline: dict[str, Any], unsafe_steps: dict[str, str],
                   *, status: str = "succeeded", steps: dict[str, str] | None = None,
                   compensable: tuple[str, ...] = ()) -> None:
    """The run ended as an uninterrupted one would (``status``, outputs ``baseline``, step
    statuses ``steps``), each non-idempotent effect exactly once and matching the stored
    output, stable idempotency keys, a gap-free log, views that agree with the fold; on a
    rollback each of the ``compensable`` steps undone exactly once, in reverse completion
    order; without one, nothing undone."""
    state = final.state
    assert state is not None and final.events is not None
    assert state.status == status, {s: str(st.status) for s, st in state.steps.items()}
    assert state.outputs == baseline
    if steps is not None:
        assert {s: str(st.status) for s, st in state.steps.items()} == steps
    check_log(final)
    keys: dict[tuple[str, str], set[str | None]] = {}
    for rec in state.attempts:
        keys.setdefault((rec.step_id, rec.kind), set()).add(rec.idempotency_key)
    assert all(len(k) == 1 for k in keys.values()), f"keys changed across attempts: {keys}"
    for entry in final.ledger:
        assert {entry["key"]} == keys[(entry["step"], entry.get("kind", "call"))], entry
    for step_id in unsafe_steps:
        effects = final.effects(step_id)
        assert len(effects) == 1, f"step {step_id!r} took effect {len(effects)} times"
        assert effects[0]["out"] == state.steps[step_id].output, (
            f"step {step_id!r}: the stored output is not what the world saw: {effects[0]}")
    check_saga(final, status, compensable)


def check_saga(final: Snapshot, status: str, compensable: tuple[str, ...]) -> None:
    assert final.events is not None and final.state is not None
    comp_events = [e for e in final.events if e.kind.startswith("compensation_")]
    if status != "rolled_back":
        assert not comp_events, f"a {status} run compensated: {comp_events[:3]}"
        assert not [e for e in final.ledger if e.get("kind") == "compensation"]
        return
    done = [s for s in final.state.completion if s in compensable]
    want = list(reversed(done))
    # (a parent, a for_each or sub-chain step, is marked undone once its steps are: no call)
    succeeded = [e.step_id for e in comp_events if e.kind == "compensation_succeeded"
                 and not e.payload.get("subchain")]
    assert succeeded == want, f"compensated {succeeded}, completion order was {done}"
    first_started = list(dict.fromkeys(e.step_id for e in comp_events
                                       if e.kind == "compensation_started"))
    assert first_started == want, f"compensations started {first_started}, want {want}"
    for step_id in compensable:
        n = len(final.effects(step_id, "compensation"))
        assert n == (1 if step_id in done else 0), (
            f"step {step_id!r} was undone {n} times in the world")
