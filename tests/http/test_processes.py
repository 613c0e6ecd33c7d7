"""Crashes and other processes: the server SIGKILLed mid-run, restarted, and asked to
resume (no effect twice, none missing); a run driven by a notebook-like process, streamed
and decided over HTTP."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from chainlab.http import ApiError
from tests.http.server import HERE, Server, effects, env, wait_for
from tests.pg import Cluster

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(300)]


def test_sigkill_mid_run_then_restart_and_resume_no_effect_twice_or_missing(
        tmp_path: Path) -> None:
    server = Server(tmp_path).start()
    flag = tmp_path / "hold.flag"
    flag.write_text("1")
    with server.client() as api:
        run_id = api.start("crash", {"flag": str(flag)})["run_id"]
        wait_for(lambda: Path(f"{flag}.holding").exists(), what="the hold step")
    assert [e["label"] for e in effects(tmp_path)] == ["first"]
    server.kill()  # mid-run: `wait` is running, `second` has not started

    server = Server(tmp_path).start()  # the same store, the same working directory
    try:
        with server.client() as api:
            before = api.get(run_id)
            assert before["status"] == "running"  # as the dead server left it
            assert before["steps"]["first"]["status"] == "succeeded"
            Path(f"{flag}.holding").unlink()
            resumed = api.resume(run_id)
            assert resumed["run_id"] == run_id and resumed["epoch"] == 2
            wait_for(lambda: Path(f"{flag}.holding").exists(), what="the hold step again")
            flag.unlink()  # the effect-free step re-runs; let it finish
            done = api.wait(run_id, timeout=60)
            assert done["status"] == "succeeded", done
            assert done["steps"]["first"]["attempts"][0]["attempt"] == 1
            assert len(done["steps"]["first"]["attempts"]) == 1  # never called again
            mine = [e["label"] for e in effects(tmp_path) if e["run_id"] == run_id]
            assert mine == ["first", "second"]
            # resuming again: nothing to resume
            with pytest.raises(ApiError) as again:
                api.resume(run_id)
            assert again.value.status == 409 and "already ended" in again.value.message
    finally:
        server.stop()
    assert "Traceback" not in server.log(), server.log()


def test_a_run_driven_by_a_notebook_like_process_is_streamed_and_decided_over_http(
        server: Server, workdir: Path) -> None:
    decide_a_run_driven_elsewhere(server, workdir, str(server.db))


def test_the_same_on_postgresql_woken_by_notify(tmp_path: Path, pg_cluster: Cluster) -> None:
    url = f"{pg_cluster.url()}&options={quote('-csearch_path=http_elsewhere')}"
    pg_cluster.dsn("http_elsewhere")  # (a new, empty schema)
    server = Server(tmp_path, db=url).start()  # type: ignore[arg-type]
    try:
        decide_a_run_driven_elsewhere(server, tmp_path, url)
    finally:
        server.stop()
    assert "Traceback" not in server.log(), server.log()


def decide_a_run_driven_elsewhere(server: Server, workdir: Path, db: str) -> None:
    driver = subprocess.Popen([sys.executable, str(HERE / "notebook_driver.py"), db],
                              cwd=workdir,
                              env=env(PYTHONPATH=f"{HERE}:{HERE.parents[1]}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        run_id = driver.stdout.readline().strip()
        assert run_id, driver.stderr.read() if driver.stderr else ""
        streamed: list[tuple[int | None, str]] = []
        end: dict[str, Any] = {}

        def follow() -> None:
            with server.client() as api:
                for ev in api.stream(run_id):
                    if ev.event == "end":
                        end.update(ev.data)
                        return
                    streamed.append((ev.seq, ev.event))

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        with server.client() as api:
            wait_for(lambda: api.confirmations(run_id), what="the confirmation")
            [waiting] = api.confirmations(run_id)
            assert waiting["preview"] == "pay 7 to notebook"
            assert any(w["run_id"] == run_id for w in api.approvals())
            outcome = api.approve(run_id, "pay", by="reviewer@slack", note="via HTTP")
            assert outcome["outcome"] == "applied"
            with pytest.raises(ApiError) as twice:
                api.approve(run_id, "pay")
            assert twice.value.status == 409
            assert twice.value.extra["decided"]["by"] == "reviewer@slack"
            assert driver.wait(timeout=120) == 0
            assert driver.stdout.read().strip() == "succeeded"  # the notebook's run went on
            follower.join(timeout=60)
            assert end["status"] == "succeeded"
            log = api.events(run_id)["events"]
            assert [s for s, _ in streamed] == [e["seq"] for e in log]  # each once, in order
            approved = next(e for e in log if e["kind"] == "step_approved")
            assert approved["payload"]["by"] == "reviewer@slack"
            assert approved["epoch"] == 1  # applied by the notebook's driver, not taken over
        assert [e["kind"] for e in effects(workdir) if e["run_id"] == run_id] == ["pay"]
    finally:
        if driver.poll() is None:
            driver.kill()
