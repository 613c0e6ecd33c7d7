"""Usage through a crash, a resume and a fork (issue 31): every attempt's usage counts once.
A real worker process is killed with SIGKILL while a paid call runs; the resumed run counts
the first step once and the re-run second step once (the interrupted call recorded none);
a fork does not add the usage of the steps it reused."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainlab.events import RunState
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from tests.usage.crash_worker import toolbox

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("usage-crash")]
ROOT = Path(__file__).resolve().parents[2]


def worker(db: Path, mode: str, run_id: str, marker: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.usage.crash_worker", str(db), mode,
                             run_id, str(marker)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def start_and_kill(db: Path, run_id: str, marker: Path) -> None:
    """Start the run in a worker and SIGKILL it while its second step's call runs."""
    proc = worker(db, "start", run_id, marker)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the second step never started"
        time.sleep(0.01)
    time.sleep(0.3)  # the first step's end event reaches the file (group commit)
    proc.kill()
    proc.wait(30)


async def test_a_crash_and_a_resume_count_each_attempt_once(tmp_path: Path) -> None:
    db, marker = tmp_path / "runs.db", tmp_path / "marker"
    start_and_kill(db, "run-crash", marker)  # while the paid second call runs
    store = SQLiteStore(db)
    before = RunState.from_events("run-crash", store.load_events("run-crash"))
    assert before.steps["a"].status == "succeeded"
    assert before.usage == {"input_tokens": 100, "output_tokens": 10, "tokens": 110,
                            "cost": 0.01}
    store.close()

    resumed = worker(db, "resume", "run-crash", marker)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0 and out.strip() == "succeeded", err
    store = SQLiteStore(db)
    state = RunState.from_events("run-crash", store.load_events("run-crash"))
    calls = [(a.step_id, str(a.status), a.usage) for a in state.attempts]
    b_usage = {"input_tokens": 200, "output_tokens": 20, "tokens": 220, "cost": 0.02}
    assert calls == [("a", "succeeded", {"input_tokens": 100, "output_tokens": 10,
                                         "tokens": 110, "cost": 0.01}),
                     ("b", "interrupted", None),  # what it reported died with the process
                     ("b", "succeeded", b_usage)]
    assert state.usage == {"input_tokens": 300, "output_tokens": 30, "tokens": 330,
                           "cost": 0.03}

    # a fork that reruns b reuses a: only b's new call counts in the fork
    async with Runtime(toolbox, store) as runtime:
        fork = await runtime.fork("run-crash", rerun="b")
        result = await fork.wait()
    assert result.status == "succeeded"
    assert fork.state.steps["a"].reused is not None and fork.state.steps["a"].usage is None
    assert fork.state.usage == b_usage
    store.close()


async def test_a_run_recovered_in_doubt_replays_as_recorded(tmp_path: Path) -> None:
    from chainlab.testing.replay import Recording, replay_run

    db, marker = tmp_path / "runs.db", tmp_path / "marker"
    start_and_kill(db, "unsafe-1", marker)  # while the unsafe send runs
    resumed = worker(db, "resume", "unsafe-1", marker)
    out, err = resumed.communicate(timeout=60)
    assert out.strip() == "suspended", err  # send is in doubt: only a person can tell
    store = SQLiteStore(db)
    async with Runtime(toolbox, store) as runtime:
        run = await runtime.resume("unsafe-1")
        assert run.waiting() == {"b": "in_doubt"}
        await run.resolve("b", output="sent one")
        assert (await run.wait()).status == "succeeded"
    recording = Recording.from_store(store, "unsafe-1")
    assert [(c.step_id, c.fate) for c in recording.calls] == [("a", "succeeded"),
                                                              ("b", "in_doubt")]
    replayed = await replay_run(recording, toolbox)
    replayed.assert_same()  # no crash in the replay: the call answers "in doubt" again
    assert replayed.state.steps["b"].output == "sent one"
    assert replayed.state.usage == {"input_tokens": 100, "output_tokens": 10, "tokens": 110,
                                    "cost": 0.01}
    store.close()
