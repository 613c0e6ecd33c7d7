"""Crash recovery with real processes killed by SIGKILL (DESIGN §7).

Each trial runs the crash chain (effect-free, idempotent, non-idempotent, reconcilable and
confirmation steps) in a worker process, kills it with SIGKILL at a seeded random moment
(after the ledger reached a random length plus a random delay, or after a random delay),
reads the store and the ledger while nothing runs, and resumes in a new process (which
approves the confirmation step and resolves in-doubt steps from the ledger, as an operator
would) until the run finishes. Checked after every kill and at the end:

* write-ahead: no effect in the ledger without a committed ``step_started``;
* no step whose ``step_succeeded`` was committed at the kill ever runs again;
* every attempt open at the kill ends as its tool's contract says: unsafe -> ``in_doubt``,
  reconcilable -> reconciled (took effect iff the ledger has its key), safe -> re-run;
* each non-idempotent effect happens exactly once; idempotency keys never change;
* the outputs equal those of an uninterrupted run; the log has no gap; views = fold.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.durability.chainlib import Ledger
from tests.durability.harness import (
    EXIT_DONE,
    EXIT_SUSPENDED,
    Child,
    ForkServer,
    Snapshot,
    check_finished,
    check_recovery_of,
    check_write_ahead,
    snapshot,
)

DELAY = "0.004"  # seconds of work around each effect: kills land inside calls too
UNSAFE_STEPS = {"d": "charge", "e": "send", "g": "transfer", "h": "charge"}
MIN_KILLS = 50
MAX_TRIALS = 60

pytestmark = pytest.mark.xdist_group("durability-processes")



def argv(db: Path, ledger: Path, mode: str) -> list[str]:
    extra = [] if mode == "start" else ["--approve", "--resolve"]
    return [str(db), str(ledger), "run", mode, "--delay", DELAY, *extra]


def kill_at_random(child: Child, ledger: Ledger, rng: random.Random) -> int:
    """Kill ``child`` at a random moment; returns its exit code (-9 when the kill landed,
    else it finished first)."""
    if rng.random() < 0.3:
        deadline = time.monotonic() + rng.uniform(0.0, 0.3)
        while time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.001)
    else:
        target = len(ledger.read()) + rng.randint(1, 6)
        deadline = time.monotonic() + 60
        while len(ledger.read()) < target and child.poll() is None:
            assert time.monotonic() < deadline, f"worker hung:\n{child.output()}"
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.02))
    child.kill()
    return child.wait()


def run_trial(server: ForkServer, folder: Path, rng: random.Random,
              kills_wanted: int) -> tuple[Snapshot, list[Snapshot]]:
    folder.mkdir()
    db, ledger_path = folder / "runs.db", folder / "ledger.jsonl"
    ledger = Ledger(ledger_path)
    mode, kills = "start", []
    for n in range(kills_wanted + 8):
        child = server.spawn(argv(db, ledger_path, mode), folder / f"worker-{n}.log")
        rc = kill_at_random(child, ledger, rng) if len(kills) < kills_wanted else child.wait()
        if rc == -9:
            snap = snapshot(db, ledger_path, "run")
            check_write_ahead(snap)
            kills.append(snap)
            mode = "start" if snap.events is None else "resume"
            continue
        assert rc in (EXIT_DONE, EXIT_SUSPENDED), child.output()
        if rc == EXIT_SUSPENDED:
            assert mode == "start", f"a resuming worker left the run suspended:\n{child.output()}"
            mode = "resume"
            continue
        return snapshot(db, ledger_path, "run"), kills
    raise AssertionError(f"the run did not finish in {folder}")


@pytest.fixture(scope="module")
def baseline(forkserver: ForkServer, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Outputs of an uninterrupted run (start, suspend at the confirmation, approve)."""
    final, kills = run_trial(forkserver, tmp_path_factory.mktemp("base") / "t", random.Random(0),
                             kills_wanted=0)
    assert not kills and final.state is not None and final.state.status == "succeeded"
    return final.state.outputs


def test_sigkill_at_random_points_never_repeats_or_loses_work(
        forkserver: ForkServer, baseline: dict, tmp_path: Path) -> None:
    rng = random.Random(20250601)
    total_kills, outcomes = 0, Counter[str]()
    trials = 0
    while total_kills < MIN_KILLS and trials < MAX_TRIALS:
        final, kills = run_trial(forkserver, tmp_path / f"trial-{trials}", rng,
                                 kills_wanted=rng.randint(1, 3))
        trials += 1
        total_kills += len(kills)
        check_finished(final, baseline, UNSAFE_STEPS)
        check_write_ahead(final)
        for kill in kills:
            outcomes.update(check_recovery_of(kill, final))
    print(f"\n{total_kills} kills in {trials} trials; at the kills: "
          + "; ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    assert total_kills >= MIN_KILLS
