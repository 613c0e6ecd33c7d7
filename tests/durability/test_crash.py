"""Crash recovery with real processes killed by SIGKILL while the run is in progress
(DESIGN §5-§8).

Each trial runs the crash chain (effect-free, idempotent, non-idempotent, reconcilable,
confirmation and compensable steps) in worker processes: a *start* process runs it until the
confirmation step ``g`` suspends it; *resume* processes approve ``g``, resolve in-doubt steps
from the ledger as an operator would, and drive the run to its end. Each trial is one of
three seeded variants: ``ok`` (the run succeeds), ``fail`` (its last step fails permanently,
so under ``fail_fast`` the run stops and rolls back: ``c``, ``d`` and ``h`` compensated) and
``undo`` (it succeeds, then the resume process asks for ``run.rollback()``).

Kills land while the run is in progress. The parent polls the store read-only until the
child has committed its first event, then kills it at a random moment inside what is left of
the run: ``window`` = after a random delay within the time the remaining work takes
(measured on an uninterrupted run), ``event`` = once the store shows a randomly chosen event
of the remaining work, plus up to a few milliseconds (so kills also land inside calls). Start
and resume processes are both killed; the next resume process finishes the run. A few kills
are deliberately ``early`` (a random moment right after the fork, not waiting), which keeps
the "run did not exist yet" and "claimed but wrote nothing" paths covered. Each kill is
classified by what the store holds at the kill: ``before`` (the child had committed
nothing), ``mid`` (it had committed at least one event and its part of the run was not
finished: a start process's part ends when the run suspends, a resume process's when the run
reaches its variant's final status), ``after`` (finished, not yet exited).

Checked after every kill (the store and the ledger read while nothing runs): the log has no
gap, epochs never go back, the stored run status is the fold's, no effect without a durable
start, nothing completed is started again, the SQL views agree with the fold. At the end of
every trial: the run ended as the uninterrupted run of its variant (status, step statuses,
outputs), each non-idempotent effect happened exactly once with the stored output, every
attempt open at a kill ended as its tool's contract says (unsafe -> in doubt, reconcilable ->
reconciled, safe -> re-run, compensation -> interrupted and re-run with its key), no step
succeeded (or compensated) at a kill ran again, and on a rollback each compensable step was
undone exactly once, in reverse completion order.

Figures are printed (``pytest -s``) and recorded as the test's ``crash_figures`` property
(junit XML). Environment: ``CHAINLAB_CRASH_TRIALS`` (default 24), ``CHAINLAB_CRASH_SEED``,
``CHAINLAB_CRASH_MIN_MID_KILLS`` / ``CHAINLAB_CRASH_MIN_RESUME_KILLS`` (defaults 50 and 15,
scaled down with fewer trials). If the trials end below the minimums (a loaded machine makes
kills miss), up to as many trials again are run until they are met.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from chainlab.events import RUN_TERMINAL
from tests.durability.chainlib import CRASH_COMPENSABLE_STEPS, CRASH_UNSAFE_STEPS
from tests.durability.harness import (
    EXIT_DONE,
    EXIT_SUSPENDED,
    Child,
    ForkServer,
    Progress,
    Snapshot,
    check_finished,
    check_log,
    check_recovery_of,
    snapshot,
)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


DELAY = 0.004  # seconds of work around each effect: kills land inside calls too
DEFAULT_TRIALS = 24
TRIALS = _env_int("CHAINLAB_CRASH_TRIALS", DEFAULT_TRIALS)
SEED = _env_int("CHAINLAB_CRASH_SEED", 20250601)
MIN_MID_KILLS = _env_int("CHAINLAB_CRASH_MIN_MID_KILLS", -(-50 * TRIALS // DEFAULT_TRIALS))
MIN_RESUME_KILLS = _env_int("CHAINLAB_CRASH_MIN_RESUME_KILLS",
                            -(-15 * TRIALS // DEFAULT_TRIALS))
# the three ways a trial's run goes: "ok" succeeds; "fail": its last step fails permanently,
# so under fail_fast the run stops and rolls back; "undo": it succeeds, then the operator asks
# for run.rollback()
VARIANTS = ("ok", "fail", "undo")  # trial n is VARIANTS[n % 3]
EARLY_SHARE = 0.06  # kills not aimed at the run in progress (right after the fork)
SPARE_START = 0.1  # trials whose start process is left alone (only resumes are killed)
TERMINAL = frozenset(str(status) for status in RUN_TERMINAL)

pytestmark = pytest.mark.xdist_group("durability-processes")


# ---------------------------------------------------------------- what a variant looks like
@dataclass
class Variant:
    """An uninterrupted run of the crash chain, ``name`` one of VARIANTS: how it ends,
    the events of its start process and of the whole run (as ``(kind, step_id)`` targets
    for kills), and how long its work takes per event (for kill windows)."""

    name: str
    status: str
    outputs: dict[str, Any]
    steps: dict[str, str]
    start_targets: list[tuple[str, str | None]]
    all_targets: list[tuple[str, str | None]]
    seconds_per_event: dict[str, float]  # by process: start, resume


def argv(db: Path, ledger: Path, mode: str, variant: str) -> list[str]:
    if mode == "start":
        extra = ["--chain", "crash-fail" if variant == "fail" else "crash"]
    else:
        extra = ["--approve", "--resolve", *(["--rollback"] if variant == "undo" else [])]
    return [str(db), str(ledger), "run", mode, "--delay", str(DELAY), *extra]


def wait_until(child: Child, progress: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll until ``progress()`` holds (True) or the child exits (False)."""
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


def uninterrupted(server: ForkServer, folder: Path, name: str) -> Variant:
    folder.mkdir(parents=True)
    db, ledger = folder / "runs.db", folder / "ledger.jsonl"
    progress = Progress(db, "run")
    busy: dict[str, float] = {}
    for n, mode in enumerate(("start", "resume")):
        before = progress.last_seq()
        child = server.spawn(argv(db, ledger, mode, name), folder / f"worker-{n}.log")
        assert wait_until(child, partial(progress.moved, before)), child.output()
        began = time.monotonic()
        rc = child.wait()
        busy[mode] = time.monotonic() - began
        assert rc == (EXIT_SUSPENDED if mode == "start" else EXIT_DONE), child.output()
    progress.close()
    final = snapshot(db, ledger, "run")
    state = final.state
    assert state is not None and final.events is not None
    check_finished(final, state.outputs, CRASH_UNSAFE_STEPS, status=str(state.status),
                   compensable=CRASH_COMPENSABLE_STEPS)
    assert str(state.status) == ("succeeded" if name == "ok" else "rolled_back")
    targets = [(str(e.kind), e.step_id, e.epoch) for e in final.events
               if not e.kind.startswith("run_")]
    start = [t[:2] for t in targets if t[2] == 1]
    return Variant(
        name=name, status=str(state.status), outputs=state.outputs,
        steps={s: str(st.status) for s, st in state.steps.items()},
        start_targets=start, all_targets=[t[:2] for t in targets],
        seconds_per_event={"start": busy["start"] / len(start),
                           "resume": busy["resume"] / (len(targets) - len(start))})


@pytest.fixture(scope="module")
def variants(forkserver: ForkServer,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Variant]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    return {name: uninterrupted(forkserver, folder / name, name) for name in VARIANTS}


# ---------------------------------------------------------------- one trial
@dataclass
class Kill:
    snap: Snapshot
    mode: str  # start | resume
    schedule: str  # early | window | event
    landed: str  # before | mid | after


@dataclass
class Figures:
    trials: int = 0
    variants: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    recoveries: Counter[str] = field(default_factory=Counter)

    def add_kill(self, kill: Kill) -> None:
        c = self.counts
        c["kills"] += 1
        c[f"kills {kill.landed}"] += 1
        c[f"kills {kill.landed} ({kill.mode})"] += 1
        c[f"schedule {kill.schedule}"] += 1
        if kill.mode == "resume":
            c["killed resumes"] += 1

    def add_final(self, final: Snapshot) -> None:
        c = self.counts
        for e in final.events or ():
            if e.payload.get("resolved"):
                c["in_doubt resolutions"] += 1
            if e.kind == "step_in_doubt":
                c["in_doubt"] += 1
            if (e.kind == "step_succeeded" and e.payload.get("reconciled")) or (
                    e.payload.get("recovery") == "reconciled_no_effect"):
                c["reconciled"] += 1
            if e.kind == "compensation_failed" and e.payload.get("error_kind") == "interrupted":
                c["interrupted compensations"] += 1
        c["repeated compensation calls (deduplicated)"] += sum(
            1 for e in final.ledger if e.get("repeat"))

    @property
    def rollbacks(self) -> int:
        return self.variants["fail"] + self.variants["undo"]

    @property
    def mid(self) -> int:
        return self.counts["kills mid"]

    @property
    def resumes_mid(self) -> int:
        return self.counts["kills mid (resume)"]

    def line(self) -> str:
        c = self.counts
        return (f"crash figures: trials={self.trials} kills={c['kills']} "
                f"mid-run={self.mid} (start {c['kills mid (start)']}, resume {self.resumes_mid})"
                f" before-start={c['kills before']} after-finish={c['kills after']} "
                f"killed-resumes={c['killed resumes']} (mid-run {self.resumes_mid}) "
                f"missed={c['missed']} in_doubt={c['in_doubt']} "
                f"in_doubt-resolutions={c['in_doubt resolutions']} "
                f"reconciled={c['reconciled']} rollbacks={self.rollbacks} (after a failure "
                f"{self.variants['fail']}, asked for {self.variants['undo']}) "
                f"interrupted-compensations={c['interrupted compensations']} "
                f"deduplicated-compensation-calls="
                f"{c['repeated compensation calls (deduplicated)']} schedules: "
                f"window={c['schedule window']} event={c['schedule event']} "
                f"early={c['schedule early']}")


class Trial:
    """One run of the crash chain through start and resume processes, some of them killed."""

    def __init__(self, server: ForkServer, folder: Path, rng: random.Random,
                 variant: Variant):
        folder.mkdir()
        self.server, self.folder, self.rng, self.variant = server, folder, rng, variant
        self.db, self.ledger = folder / "runs.db", folder / "ledger.jsonl"
        self.progress = Progress(self.db, "run")
        self.kills: list[Kill] = []

    def run(self, figures: Figures) -> Snapshot:
        rng = self.rng
        kills_wanted = rng.randint(2, 5)
        spare_start = rng.random() < SPARE_START
        mode = "start"
        try:
            for n in range(kills_wanted + 10):
                before = self.progress.last_seq()
                aim = len(self.kills) < kills_wanted and not (spare_start and mode == "start")
                schedule = self.schedule(mode, set(self.progress.committed())) if aim else None
                child = self.server.spawn(argv(self.db, self.ledger, mode, self.variant.name),
                                          self.folder / f"worker-{n}.log")
                rc = self.kill(child, before, schedule) if schedule else child.wait()
                if rc == -9:
                    assert schedule is not None
                    kill = self.landed(mode, schedule[0], before)
                    figures.add_kill(kill)
                    mode = "start" if kill.snap.events is None else "resume"
                    continue
                if schedule is not None:  # it finished first
                    figures.counts["missed"] += 1
                    figures.counts[f"missed {schedule[0]} ({mode})"] += 1
                assert rc in (EXIT_DONE, EXIT_SUSPENDED), child.output()
                if rc == EXIT_SUSPENDED:
                    assert mode == "start", f"a resume left the run suspended:\n{child.output()}"
                    mode = "resume"
                    continue
                return snapshot(self.db, self.ledger, "run")
        finally:
            self.progress.close()
        raise AssertionError(f"the run did not finish in {self.folder}")

    def schedule(self, mode: str, done: set[tuple[str, str | None]]
                 ) -> tuple[str, Any] | None:
        """When to kill this child: ("early", s), ("window", s) or ("event", target)."""
        rng = self.rng
        targets = self.variant.start_targets if mode == "start" else self.variant.all_targets
        left = [t for t in targets if t not in done]
        if rng.random() < EARLY_SHARE:
            return ("early", rng.uniform(0.0, 0.03))
        if not left:
            return None
        if rng.random() < 0.5:
            per_event = self.variant.seconds_per_event[mode]
            return ("window", rng.uniform(0.0, per_event * len(left)))
        return ("event", rng.choice(left))

    def kill(self, child: Child, before: int, schedule: tuple[str, Any]) -> int:
        how, what = schedule
        if how == "early":
            sleep_while_alive(child, what)
        else:  # the run is in progress: this child has committed its first event
            if not wait_until(child, partial(self.progress.moved, before)):
                return child.wait()
            if how == "window":
                sleep_while_alive(child, what)
            else:
                kind, step_id = what
                if not wait_until(child, partial(self.progress.seen, before, kind, step_id)):
                    return child.wait()
                sleep_while_alive(child, self.rng.uniform(0.0, 3 * DELAY))
        child.kill()
        return child.wait()

    def landed(self, mode: str, schedule: str, before: int) -> Kill:
        snap = snapshot(self.db, self.ledger, "run")
        with context(f"after the kill of a {mode} process ({schedule}) at seq "
                     f"{snap.last_seq}"):
            check_log(snap)
        state = snap.state
        if state is None or snap.last_seq <= before:
            landed = "before"
        else:  # a start process is done once the run waits for the approval of g
            status = str(state.status)
            finished = status == self.variant.status or (
                mode == "start" and (status == "suspended" or status in TERMINAL))
            landed = "after" if finished else "mid"
        kill = Kill(snap, mode, schedule, landed)
        self.kills.append(kill)
        return kill


@contextmanager
def context(note: str) -> Iterator[None]:
    try:
        yield
    except AssertionError as exc:
        exc.add_note(note)
        raise


def test_sigkill_mid_run_never_repeats_or_loses_work(
        forkserver: ForkServer, variants: dict[str, Variant], tmp_path: Path,
        record_property: Callable[[str, Any], None]) -> None:
    figures = Figures()
    while figures.trials < TRIALS or (
            figures.trials < 2 * TRIALS and (figures.mid < MIN_MID_KILLS
                                             or figures.resumes_mid < MIN_RESUME_KILLS)):
        n = figures.trials
        rng = random.Random(f"{SEED}-{n}")
        variant = variants[VARIANTS[n % len(VARIANTS)]]
        trial = Trial(forkserver, tmp_path / f"trial-{n}", rng, variant)
        with context(f"trial {n} (CHAINLAB_CRASH_SEED={SEED}, variant {variant.name!r}) in "
                     f"{trial.folder}"):
            final = trial.run(figures)
            check_finished(final, variant.outputs, CRASH_UNSAFE_STEPS, status=variant.status,
                           steps=variant.steps, compensable=CRASH_COMPENSABLE_STEPS)
            for kill in trial.kills:
                with context(f"recovery of the {kill.mode} process killed at seq "
                             f"{kill.snap.last_seq}"):
                    figures.recoveries.update(
                        "no open attempt" if seen.startswith("no open attempt") else seen
                        for seen in check_recovery_of(kill.snap, final))
        figures.trials += 1
        figures.variants[variant.name] += 1
        figures.add_final(final)
    line = figures.line()
    print(f"\n{line}\nat the kills: "
          + "; ".join(f"{k}: {v}" for k, v in sorted(figures.recoveries.items()))
          + "\nall counts: " + "; ".join(f"{k}: {v}" for k, v in sorted(figures.counts.items())))
    record_property("crash_figures", line)
    assert figures.mid >= MIN_MID_KILLS, line
    assert figures.resumes_mid >= MIN_RESUME_KILLS, line
