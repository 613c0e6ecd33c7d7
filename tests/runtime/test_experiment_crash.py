"""A SIGKILL mid-experiment (a real subprocess on SQLite): the experiment is stored, its
replays are finished or resumable, ``resume_experiment`` replays the runs not reached and
resumes the rest, and no refund is made twice (each recorded refund answered from the
recording)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

from .experiment_worker import toolbox

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("experiment_worker.py")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def worker(db: Path, folder: Path, what: str, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), str(db), str(folder), what, str(n)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


async def test_sigkill_mid_experiment_then_resume(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    assert worker(db, tmp_path, "record", 5).wait(timeout=60) == 0
    recorded = (tmp_path / "ledger").read_text().splitlines()
    assert len(recorded) == 5
    (tmp_path / "hold").touch()  # every replay's lookup waits: the kill finds them under way
    proc = worker(db, tmp_path, "experiment", 5)
    deadline = time.monotonic() + 60
    while True:
        with SQLiteStore(db) as store:
            found = store.list_experiments()
            started = store.list_runs(experiment=found[0].experiment_id) if found else []
        if len(started) >= 2:
            break
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    (tmp_path / "hold").unlink()
    experiment_id = found[0].experiment_id
    async with Runtime(toolbox(tmp_path), SQLiteStore(db)) as runtime:
        rows = runtime.experiment_result(experiment_id).rows()
        outcomes = sorted(r["outcome"] for r in rows)
        assert outcomes == ["not_started"] * 3 + ["unfinished"] * 2  # concurrency 2
        exp = await runtime.resume_experiment(experiment_id, force=True)
        assert [r["outcome"] for r in exp.rows()] == ["same"] * 5
        assert all(r["effects_made"] == 0 for r in exp.rows())
        assert exp.name == "crash"
    # no refund was made again: the ledger holds the recorded five only
    assert (tmp_path / "ledger").read_text().splitlines() == recorded
