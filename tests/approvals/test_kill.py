"""SIGKILL between a rule's decision and the end of the call (a real subprocess): the
decision was durable before the call started; after the takeover the call is not decided
again, and runs once (a non-idempotent tool: left in doubt) or is re-run under the SAME
decision (an idempotent one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from chainlab.events import EventKind, StepStatus
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

from .killdriver import RULES, toolbox

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
K = EventKind


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_rule_decision_survives_sigkill_and_is_not_taken_twice(tmp_path: Path,
                                                                 idempotent: bool) -> None:
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(HERE / "killdriver.py"), str(db),
                              str(ledger), "1" if idempotent else "0"], env=env)
    deadline = time.monotonic() + 60
    while not (ledger.exists() and ledger.read_text()):
        assert child.poll() is None and time.monotonic() < deadline, "the driver died early"
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)  # the call is under way: decided, started, not ended
    child.wait()
    with SQLiteStore(db) as store:
        events = store.load_events("run")
        decided = [e for e in events if e.kind == K.STEP_APPROVED]
        started = [e for e in events if e.kind == K.STEP_STARTED]
        assert [e.payload["by"] for e in decided] == ["policy:small"]
        assert len(started) == 1 and decided[0].seq < started[0].seq

        async def take_over() -> str:
            rt = Runtime(toolbox(ledger, idempotent, False), store, policies=RULES)
            run = await rt.resume("run", force=True)
            result = await run.wait()
            return str(result.status if idempotent else run.state.steps["pay"].status)

        status = anyio.run(take_over)
        events = store.load_events("run")
    decided = [e for e in events if e.kind == K.STEP_APPROVED]
    assert [e.payload["by"] for e in decided] == ["policy:small"]  # decided once
    calls = ledger.read_text().split()
    if idempotent:  # safe to repeat: re-run under the same decision
        assert status == "succeeded" and len(calls) == 2
    else:  # never run twice: in doubt for a person
        assert status == StepStatus.IN_DOUBT and calls == ["40.0"]
