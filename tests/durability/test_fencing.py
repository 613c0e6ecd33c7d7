"""Fencing (DESIGN §7): two processes resume the same run at the same moment.

A run suspended at its confirmation step (the steps after it are non-idempotent) is copied
into a fresh folder for each trial. Two worker processes wait at a barrier, call
``runtime.resume(run_id)`` together, and (so the race is always between two real claims)
start working only once both have returned from ``resume`` or failed in it; then each
approves the waiting step and drives the run. Exactly one must finish the run; the other
must stop with StaleEpochError, either in ``resume`` (its compare-and-swap lost) or at its
first write (it claimed first and was overtaken); nothing it tried to write after the
takeover is in the store, and the ledger shows every effect exactly once, all made by the
winner.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.durability.chainlib import CRASH_UNSAFE_STEPS
from tests.durability.harness import (
    EXIT_DONE,
    EXIT_STALE,
    EXIT_SUSPENDED,
    ForkServer,
    check_finished,
    snapshot,
)

TRIALS = 50

pytestmark = pytest.mark.xdist_group("durability-processes")



@pytest.fixture(scope="module")
def suspended_run(forkserver: ForkServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a store holding run 'run' suspended at step g, and its ledger."""
    folder = tmp_path_factory.mktemp("template")
    child = forkserver.spawn([str(folder / "runs.db"), str(folder / "ledger.jsonl"), "run",
                              "start", "--delay", "0.002"], folder / "start.log")
    assert child.wait() == EXIT_SUSPENDED, child.output()
    assert not (folder / "runs.db-wal").exists() or True  # copied along if present
    return folder


def copy_template(template: Path, folder: Path) -> None:
    folder.mkdir()
    for name in ("runs.db", "runs.db-wal", "ledger.jsonl"):
        if (template / name).exists():
            shutil.copy(template / name, folder / name)


def test_two_processes_resume_at_once_exactly_one_proceeds(
        forkserver: ForkServer, suspended_run: Path, tmp_path: Path) -> None:
    base = snapshot(suspended_run / "runs.db", suspended_run / "ledger.jsonl", "run")
    assert base.state is not None and base.state.status == "suspended"
    expected = {"a": 7, "b": 15, "c": {"name": "k1", "value": 7},
                "d": {"account": "acct-1", "charged": 15}, "e": {"to": "ops", "body": "charged 15"},
                "f": 15, "g": {"to": "acct-2", "amount": 15},
                "h": {"account": "fees", "charged": 1}, "i": 3, "z": 3}
    how = Counter[str]()
    rng = random.Random(7)
    for trial in range(TRIALS):
        folder = tmp_path / f"trial-{trial}"
        copy_template(suspended_run, folder)
        (folder / "barrier").mkdir()
        argv = [str(folder / "runs.db"), str(folder / "ledger.jsonl"), "run", "resume",
                "--approve", "--resolve", "--delay", "0.002",
                "--barrier", str(folder / "barrier"), "--peers", "2"]
        # odd trials: one peer resumes 0.2 s late, so it reads the first claim's epoch and
        # overtakes it (the first is then fenced at its first write, not in resume)
        stagger = ["0", "0.2" if trial % 2 else "0"]
        rng.shuffle(stagger)
        children = [forkserver.spawn([*argv, "--stagger", stagger[n]],
                                     folder / f"worker-{n}.log") for n in range(2)]
        codes = sorted(child.wait() for child in children)
        assert codes == [EXIT_DONE, EXIT_STALE], [c.output() for c in children]
        winner = next(c for c in children if c.poll() == EXIT_DONE).result()
        loser = next(c for c in children if c.poll() == EXIT_STALE).result()
        how[loser["stale_at"]] += 1

        final = snapshot(folder / "runs.db", folder / "ledger.jsonl", "run")
        check_finished(final, expected, CRASH_UNSAFE_STEPS)
        assert final.events is not None
        new_lines = final.ledger[len(base.ledger):]
        assert [(e["step"], e["pid"]) for e in new_lines] == [
            ("g", winner["pid"]), ("h", winner["pid"]), ("i", winner["pid"]),
            ("z", winner["pid"])]
        epochs = {e.epoch for e in final.events[base.last_seq:]}
        assert winner["epoch"] in epochs
        if loser["stale_at"] == "write":  # it claimed first and was overtaken
            assert loser["epoch"] < winner["epoch"]
            first_winner_seq = min(e.seq for e in final.events if e.epoch == winner["epoch"])
            assert all(e.seq < first_winner_seq for e in final.events
                       if e.epoch == loser["epoch"]), "the stale writer wrote after the takeover"
            assert not any(e.epoch == loser["epoch"] and e.kind in ("step_approved",
                                                                   "step_started")
                           for e in final.events)
        else:
            assert epochs == {winner["epoch"]}
    print(f"\n{TRIALS} trials; the loser stopped at: {dict(how)}")
    assert sum(how.values()) == TRIALS
    assert how["resume"] and how["write"], "both ways of losing the race must have happened"
