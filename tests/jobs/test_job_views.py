"""A waiting job in every view (issue 27, item 5): its caption on the DAG, its waiting
segment in the Gantt data, its record (handle, polls, progress) in THE JSON view and in
``chainlab show``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from chainlab import Toolbox
from chainlab.render.display import step_badges
from chainlab.render.dot import chain_dot
from chainlab.render.json import run_dict
from chainlab.render.style import status_line
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
from tests.cli.helpers import chainlab
from tests.jobs.conftest import FakeBackend
from tests.jobs.test_jobs import chain, job_step

pytestmark = pytest.mark.anyio


async def test_a_waiting_job_in_the_dag_the_json_view_the_gantt_and_show(
        tmp_path: Path, backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=0.02, progress_every_s=0.0)
    db = tmp_path / "v.db"
    runtime = Runtime(tb, SQLiteStore(db))
    ch = chain(job_step("a"))
    run = await runtime.start(ch)
    while (run.steps["a"].job or {}).get("progress") is None:
        await anyio.sleep(0.01)
    badge = step_badges(run.steps)["a"]
    assert badge.startswith("waiting · job j1 · ") and badge.endswith("%")
    assert status_line("running", badge) == f"◷ {badge}"
    dot = chain_dot(ch, tb, {"a": "running"}, badges={"a": badge})
    assert "◷ waiting · job j1 · " in dot
    view = run_dict(runtime.store.get_run(run.run_id), run.state)["steps"]["a"]["job"]
    assert view["handle"] == {"id": "j1"} and view["phase"] == "waiting"
    assert view["polls"] >= 1 and view["how"] == "submitted" and view["caption"] == badge
    await runtime.store.flush(run.run_id, run.epoch)
    shown = chainlab("show", run.run_id, "--db", str(db), cwd=tmp_path)
    assert "waiting · job j1" in shown.out and '{"id": "j1"}' in shown.out, shown.out
    as_json = chainlab("show", run.run_id, "--db", str(db), "--json", cwd=tmp_path).json
    assert as_json["steps"]["a"]["job"]["handle"] == {"id": "j1"}
    backend.finish_all()
    assert (await run.wait()).status == "succeeded"
    from chainlab.timeline import attempts_frame, waits_frame

    waits = waits_frame(runtime.store, run.run_id)
    assert list(waits["kind"]) == ["job"] and list(waits["outcome"]) == ["succeeded"]
    attempt = attempts_frame(runtime.store, run.run_id).iloc[0]
    # the attempt spans submit and wait; the wait segment starts at the recorded handle
    assert waits["started_at"][0] >= attempt["started_at"]
    assert run_dict(runtime.store.get_run(run.run_id), run.state)["steps"]["a"]["job"][
        "caption"] is None  # ended: nothing to wait for
    await runtime.aclose()
