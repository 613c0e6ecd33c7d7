"""One run, one trace, across processes (DESIGN §24), checked on what a real OTLP/HTTP
receiver decoded (:class:`chainlab.testing.otlp_receiver.OtlpReceiver`): a driver SIGKILLed
mid-run and the run resumed by another process; a worker SIGKILLed and its run taken over by
another worker (``chainlab worker --otlp``). Each time: one trace id (the incoming
traceparent's), every span under the run's root, the root emitted once by the process that
ended the run with the run's recorded start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from chainlab.testing.otlp_receiver import OtlpReceiver, ReceivedSpan
from chainlab.tracing import run_trace
from tests.tracing.tracedtools import CHAIN, toolbox
from tests.workers.procs import wait_for

ROOT = Path(__file__).resolve().parents[2]
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID, PARENT_SPAN = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331

pytestmark = pytest.mark.xdist_group("durability")


def env(hold: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CHAINLAB_TRACE_HOLD": str(hold),
            "OTEL_BSP_SCHEDULE_DELAY": "20"}


def driver(db: Path, url: str, *args: str, hold: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.tracing.tracedtools", str(db), url,
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env(hold))


def started(db: Path, run_id: str, step_id: str) -> bool:
    store = SQLiteStore(db)
    try:
        return any(str(e.kind) == "step_started" and e.step_id == step_id
                   for e in store.load_events(run_id))
    finally:
        store.close()


def check_one_trace(spans: list[ReceivedSpan], run_id: str, meta: dict[str, str],
                    created_at: float) -> ReceivedSpan:
    """One trace under the incoming parent, every span under the run's root; the root."""
    assert {s.trace_id for s in spans} == {TRACE_ID}
    [root] = [s for s in spans if s.name == "run traced"]
    assert root.parent_span_id == PARENT_SPAN
    assert root.span_id == run_trace(run_id, meta).root_span_id
    assert root.start_ns == int(created_at * 1e9)
    assert root.attributes["chainlab.run.status"] == "succeeded"
    for span in spans:
        if span is not root:
            assert span.parent_span_id == root.span_id, span.name
            assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns, span.name
    return root


def test_a_run_resumed_after_a_sigkill_continues_the_same_trace(tmp_path: Path) -> None:
    db, hold = tmp_path / "runs.db", tmp_path / "hold"
    hold.touch()
    with OtlpReceiver() as receiver:
        first = driver(db, receiver.url, "start", PARENT, hold=hold)
        try:
            assert first.stdout is not None
            run_id = first.stdout.readline().strip()
            assert run_id, first.stderr.read() if first.stderr else ""
            wait_for(lambda: started(db, run_id, "b"), 30, "step b to start")
            receiver.wait_for(lambda spans: any(s.name == "step a" for s in spans))
            os.kill(first.pid, signal.SIGKILL)  # b is running: its span dies with it
            first.wait(30)
        finally:
            if first.poll() is None:
                first.kill()
        hold.unlink()
        second = driver(db, receiver.url, "resume", run_id, hold=hold)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        assert out.split() == ["succeeded"]
        spans = receiver.wait_for(lambda spans: any(s.name == "run traced" for s in spans))
    store = SQLiteStore(db)
    record = store.get_run(run_id)
    store.close()
    assert record.meta["traceparent"] == PARENT
    check_one_trace(spans, run_id, record.meta, record.created_at)
    by_pid: dict[str, set[int]] = {}
    for s in spans:
        by_pid.setdefault(s.name, set()).add(s.resource["process.pid"])
    assert by_pid["step a"] == {first.pid}  # made before the kill, by the first process
    assert by_pid["step c"] == by_pid["run traced"] == {second.pid}
    # b's first attempt died unexported with its process; its re-run is the second's
    assert [s.resource["process.pid"] for s in spans if s.name == "step b"] == [second.pid]


def test_a_worker_takeover_continues_the_same_trace(tmp_path: Path) -> None:
    db, hold = tmp_path / "runs.db", tmp_path / "hold"
    hold.touch()

    with OtlpReceiver() as receiver:
        async def enqueue() -> str:
            async with Runtime(toolbox, SQLiteStore(db)) as runtime:
                return await runtime.enqueue(CHAIN, meta={"traceparent": PARENT})

        run_id = anyio.run(enqueue)

        def worker(name: str) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [sys.executable, "-m", "chainlab", "worker", "--db", str(db), "--tools",
                 "tests.tracing.tracedtools:toolbox", "--name", name, "--poll", "0.05",
                 "--heartbeat", "0.2", "--lapse", "1", "--otlp", receiver.url],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                env=env(hold))

        first = worker("w1")
        try:
            wait_for(lambda: started(db, run_id, "b"), 60, "step b to start on w1")
            receiver.wait_for(lambda spans: any(s.name == "step a" for s in spans))
            os.kill(first.pid, signal.SIGKILL)
            first.wait(30)
            hold.unlink()
            second = worker("w2")
            try:
                spans = receiver.wait_for(
                    lambda spans: any(s.name == "run traced" for s in spans), 60)
            finally:
                second.send_signal(signal.SIGTERM)
                second.communicate(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
    store = SQLiteStore(db)
    record = store.get_run(run_id)
    store.close()
    check_one_trace(spans, run_id, record.meta, record.created_at)
    pids = {s.name: s.resource["process.pid"] for s in spans}
    assert pids["step a"] == first.pid and pids["run traced"] == second.pid == pids["step c"]
