"""Takeover on PostgreSQL with real processes (DESIGN §7, §13): drivers of the crash chain
(tests/durability/chainlib.py) on a ``PostgresStore`` are killed with SIGKILL mid-run and
another process resumes (claims the next epoch) and finishes the run; two processes drive
different runs of one database at the same time.

The harness is test_crash's (fork server, worker, ledger, invariants) with the store a
``postgresql://`` URL: a schema of its own per trial in the session's throwaway server
(tests/pg.py). Kills land at a random moment within the time the rest of the run takes,
once the child has committed its first event. Checked after every kill: no gap in the log,
epochs never go back, the stored status is the fold's, no effect without a durable start,
nothing completed started again; at the end: the run ended as an uninterrupted one (status,
outputs, step statuses), each non-idempotent effect exactly once (0 duplicates), every
attempt open at a kill recovered as its tool's contract says.

Figures are printed (``pytest -s``) and recorded as the ``takeover_figures`` property.
``CHAINLAB_PG_TRIALS`` (default 12) and ``CHAINLAB_PG_MIN_KILLS`` (default 30: mid-run kill
points that must be reached; up to twice as many trials again are run to reach them).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from chainlab.errors import RunNotFoundError
from tests.durability.chainlib import CRASH_COMPENSABLE_STEPS, CRASH_UNSAFE_STEPS, Ledger
from tests.durability.harness import (
    EXIT_DONE,
    EXIT_SUSPENDED,
    Child,
    ForkServer,
    Snapshot,
    check_finished,
    check_log,
    check_recovery_of,
)
from tests.pg import Cluster

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.xdist_group("durability-processes")

DELAY = 0.004
TRIALS = int(os.environ.get("CHAINLAB_PG_TRIALS") or 12)
MIN_KILLS = int(os.environ.get("CHAINLAB_PG_MIN_KILLS") or 30)
SEED = 20250917


def url_for(cluster: Cluster, schema: str) -> str:
    """A ``postgresql://`` URL to a new, empty schema of the session's server."""
    cluster.dsn(schema)
    return f"{cluster.url()}&options={quote(f'-csearch_path={schema}')}"


def argv(url: str, ledger: Path, run_id: str, mode: str) -> list[str]:
    extra = [] if mode == "start" else ["--approve", "--resolve"]
    return [url, str(ledger), run_id, mode, "--delay", str(DELAY), *extra]


def snapshot(url: str, ledger: Path, run_id: str) -> Snapshot:
    from chainlab.store.postgres import PostgresStore

    with PostgresStore(url) as store:
        try:
            events: list[Any] | None = store.load_events(run_id)
            stored: str | None = str(store.get_run(run_id).status)
        except RunNotFoundError:
            events, stored = None, None
    return Snapshot(events, Ledger(ledger).read(), None, stored)


class Progress:
    """The run's last committed seq, read while a worker writes it."""

    def __init__(self, url: str, run_id: str):
        self.conn = psycopg.connect(url, autocommit=True)
        self.run_id = run_id

    def last_seq(self) -> int:
        try:
            row = self.conn.execute("SELECT coalesce(max(seq), 0) FROM events WHERE "
                                    "run_id = %s", (self.run_id,)).fetchone()
        except psycopg.errors.UndefinedTable:  # the worker has not created the schema yet
            return 0
        return int(row[0]) if row else 0

    def moved(self, after_seq: int) -> bool:
        return self.last_seq() > after_seq

    def close(self) -> None:
        self.conn.close()


def wait_until(child: Child, progress: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if progress():
            return True
        if child.poll() is not None:
            return progress()
        assert time.monotonic() < deadline, f"worker {child.pid} hung:\n{child.output()}"
        time.sleep(0.0005)


def sleep_while_alive(child: Child, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(min(0.001, max(0.0, deadline - time.monotonic())))


def drive(server: ForkServer, url: str, folder: Path, run_id: str, *,
          kill: Callable[[Child, int, str], bool] | None = None,
          kills: list[Snapshot] | None = None,
          busy: dict[str, float] | None = None) -> Snapshot:
    """Start the run and resume it until it ends; ``kill(child, before, mode)`` may kill a
    child (returns True when it did); each kill's snapshot goes to ``kills``; ``busy``
    gets, per mode, the seconds from a child's first commit to its exit."""
    ledger = folder / f"{run_id}.ledger"
    progress = Progress(url, run_id)
    mode = "start"
    try:
        for n in range(30):
            before = progress.last_seq()
            child = server.spawn(argv(url, ledger, run_id, mode), folder / f"{run_id}-{n}.log")
            if kill is not None and kill(child, before, mode):
                snap = snapshot(url, ledger, run_id)
                check_log(snap)
                if kills is not None:
                    kills.append(snap)
                mode = "start" if snap.events is None else "resume"
                continue
            if busy is not None:
                assert wait_until(child, partial(progress.moved, before)), child.output()
                began = time.monotonic()
            rc = child.wait()
            if busy is not None:
                busy[mode] = time.monotonic() - began
            assert rc in (EXIT_DONE, EXIT_SUSPENDED), child.output()
            if rc == EXIT_SUSPENDED:
                mode = "resume"
                continue
            return snapshot(url, ledger, run_id)
    finally:
        progress.close()
    raise AssertionError(f"run {run_id!r} did not finish")


@pytest.fixture(scope="module")
def baseline(forkserver: ForkServer, pg_cluster: Cluster,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Snapshot, dict[str, float]]:
    """An uninterrupted run: how it ends, and how long the work of its start and of its
    resume process takes (from the first commit to the exit: the kill windows)."""
    folder = tmp_path_factory.mktemp("pg-baseline")
    url = url_for(pg_cluster, "takeover_baseline")
    busy: dict[str, float] = {}
    final = drive(forkserver, url, folder, "run", busy=busy)
    state = final.state
    assert state is not None and final.events is not None and str(state.status) == "succeeded"
    check_finished(final, state.outputs, CRASH_UNSAFE_STEPS, compensable=CRASH_COMPENSABLE_STEPS)
    return final, busy


def test_two_processes_drive_different_runs_of_one_database(
        forkserver: ForkServer, pg_cluster: Cluster,
        baseline: tuple[Snapshot, dict[str, float]], tmp_path: Path) -> None:
    url = url_for(pg_cluster, "takeover_two_drivers")
    want = baseline[0].state
    assert want is not None
    first = {rid: forkserver.spawn(argv(url, tmp_path / f"{rid}.ledger", rid, "start"),
                                   tmp_path / f"{rid}-start.log") for rid in ("ra", "rb")}
    for child in first.values():
        assert child.wait() == EXIT_SUSPENDED, child.output()
    second = {rid: forkserver.spawn(argv(url, tmp_path / f"{rid}.ledger", rid, "resume"),
                                    tmp_path / f"{rid}-resume.log") for rid in ("ra", "rb")}
    for child in second.values():
        assert child.wait() == EXIT_DONE, child.output()
    pids: dict[str, set[int]] = {}
    for rid in ("ra", "rb"):
        final = snapshot(url, tmp_path / f"{rid}.ledger", rid)
        check_finished(final, want.outputs, CRASH_UNSAFE_STEPS,
                       steps={s: str(st.status) for s, st in want.steps.items()},
                       compensable=CRASH_COMPENSABLE_STEPS)
        assert {e.epoch for e in final.events or ()} == {1, 2}
        pids[rid] = {entry["pid"] for entry in final.ledger}
    assert pids["ra"].isdisjoint(pids["rb"])  # each run was driven by its own processes


def test_sigkill_of_a_driver_and_takeover_never_repeat_an_effect(
        forkserver: ForkServer, pg_cluster: Cluster,
        baseline: tuple[Snapshot, dict[str, float]], tmp_path: Path,
        record_property: Callable[[str, Any], None]) -> None:
    want, busy = baseline
    state = want.state
    assert state is not None and want.events is not None
    figures: Counter[str] = Counter()
    recoveries: Counter[str] = Counter()
    n = 0
    while n < TRIALS or (n < 3 * TRIALS and figures["mid-run kills"] < MIN_KILLS):
        rng = random.Random(f"{SEED}-{n}")
        folder = tmp_path / f"trial-{n}"
        folder.mkdir()
        url = url_for(pg_cluster, f"takeover_trial_{n}")
        wanted = rng.randint(3, 5)
        kills: list[Snapshot] = []
        landed: list[tuple[str, str]] = []  # (before | mid, start | resume) per kill

        def kill(child: Child, before: int, mode: str, *, rng: random.Random = rng,
                 url: str = url, kills: list[Snapshot] = kills, wanted: int = wanted,
                 landed: list[tuple[str, str]] = landed) -> bool:
            if len(kills) >= wanted:
                return False
            progress = Progress(url, "run")
            try:
                if not wait_until(child, partial(progress.moved, before)):
                    child.wait()
                    figures["missed"] += 1
                    return False
                # within the first part of the work: later kills find less of it left
                sleep_while_alive(child, rng.uniform(0.0, 0.6 * busy[mode]))
                child.kill()
                rc = child.wait()
                after = progress.last_seq()
            finally:
                progress.close()
            if rc != -9:
                figures["missed"] += 1
                return False
            figures["kills"] += 1
            figures[f"kills of {mode} processes"] += 1
            landed.append(("mid" if after > before else "before", mode))
            return True

        final = drive(forkserver, url, folder, "run", kill=kill, kills=kills)
        check_finished(final, state.outputs, CRASH_UNSAFE_STEPS,
                       steps={s: str(st.status) for s, st in state.steps.items()},
                       compensable=CRASH_COMPENSABLE_STEPS)
        for snap, (where, mode) in zip(kills, landed, strict=True):
            status = str(snap.state.status) if snap.state is not None else None
            # a start process's part of the run ends when it suspends for the approval
            finished = status == "succeeded" or (mode == "start" and status == "suspended")
            if where == "mid" and not finished:
                figures["mid-run kills"] += 1
            recoveries.update(check_recovery_of(snap, final))
        for step_id in CRASH_UNSAFE_STEPS:
            figures["duplicated effects"] += len(final.effects(step_id)) - 1
        figures["takeovers (epochs beyond the first)"] += max(
            e.epoch for e in final.events or ()) - 1
        figures["in_doubt"] += sum(e.kind == "step_in_doubt" for e in final.events or ())
        n += 1
    line = (f"takeover figures (PostgreSQL): trials={n} kills={figures['kills']} "
            f"mid-run={figures['mid-run kills']} (start {figures['kills of start processes']},"
            f" resume {figures['kills of resume processes']}) missed={figures['missed']} "
            f"takeovers={figures['takeovers (epochs beyond the first)']} "
            f"in_doubt={figures['in_doubt']} duplicated-effects="
            f"{figures['duplicated effects']}")
    print(f"\n{line}\nat the kills: "
          + "; ".join(f"{k}: {v}" for k, v in sorted(recoveries.items())))
    record_property("takeover_figures", line)
    assert figures["duplicated effects"] == 0, line
    assert figures["mid-run kills"] >= MIN_KILLS, line
