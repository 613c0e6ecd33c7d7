"""Remote jobs in one process (issue 27): the waiting phase holds no slot, completions from
outside (before the waiter is armed, twice), poll errors with back-off, not_found, cancel
and timeout reaching the job server, bad input (a non-JSON handle, a poll that raises or
answers garbage, a handle that fails validation on resume), the mixed batch, and the
SubprocessJob re-attached after its driver stopped."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typing_extensions import TypedDict

from chainlab import CallContext, Chain, JobStatus, Toolbox
from chainlab.errors import RunStateError, ToolDefinitionError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing import ManualClock
from chainlab.testing.job_server import JobServer, register_http_job
from tests.jobs.conftest import FakeBackend

pytestmark = pytest.mark.anyio


def chain(*steps: dict[str, Any], **options: Any) -> Chain:
    return Chain.from_dict({"name": "jobs", "steps": list(steps), "options": options})


def job_step(step_id: str, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "remote", "args": {"payload": {"n": n}}, **extra}


async def test_a_job_submits_once_waits_and_gives_its_output(backend: FakeBackend) -> None:
    backend.polls_to_finish = 3
    tb = Toolbox()
    backend.register(tb)
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(job_step("a", 1)))
    result = await run.wait()
    assert result.status == "succeeded"
    assert run.outputs["a"] == {"done": {"n": 1}}
    assert list(backend.submissions.values()) == [1]
    kinds = [str(e.kind) for e in run.history() if e.step_id == "a"]
    assert kinds[:4] == ["step_ready", "step_started", "job_submitting", "job_submitted"]
    assert kinds[-2:] == ["job_progress", "step_succeeded"]
    job = run.steps["a"].job
    assert job is not None and job["polls"] == 3 and job["phase"] == "ended"
    assert job["handle"] == {"id": "j1"}
    await runtime.aclose()


async def test_200_waiting_jobs_leave_all_4_slots_to_other_work(backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=0.2)
    running = 0
    peak = 0
    waiting_at_peak: list[int] = []

    @tb.tool
    async def work(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 4:  # all four slots in ordinary work: how many jobs wait meanwhile?
            waiting_at_peak.append(sum(1 for j in backend.jobs.values()
                                       if j["state"] == "running"))
        await anyio.sleep(0.02)
        running -= 1
        return i

    @tb.tool
    def release(xs: list[int]) -> int:
        backend.finish_all()  # the jobs end only once all the other work has run
        return len(xs)

    jobs = [job_step(f"j{i}", i) for i in range(200)]
    works = [{"id": f"w{i}", "tool": "work", "args": {"i": i}} for i in range(12)]
    rel = {"id": "rel", "tool": "release",
           "args": {"xs": [f"{{{{ steps.w{i}.output }}}}" for i in range(12)]}}
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(*jobs, *works, rel, max_concurrency=4))
    with anyio.fail_after(60):
        result = await run.wait()
    assert result.status == "succeeded"
    assert peak == 4  # the waiting jobs held none of the 4 slots
    assert waiting_at_peak and min(waiting_at_peak) == 200  # 4 ordinary steps ran at once
    # while all 200 jobs waited
    assert sum(backend.submissions.values()) == 200
    await runtime.aclose()


async def test_a_completion_before_the_waiter_is_armed_is_stored(backend: FakeBackend) -> None:
    tb = Toolbox()
    holder: dict[str, Any] = {}

    class Callback:
        async def submit(self, payload: dict, ctx: CallContext) -> dict:
            # the backend calls back before submit has even returned the handle
            await holder["runtime"].complete_job(ctx.run_id, ctx.step_id,
                                                 output={"early": True})
            return {"id": "cb1"}

        async def poll(self, handle: dict) -> JobStatus:
            holder["polled"] = True
            return JobStatus.running()

    tb.job(Callback, name="remote", poll_every_s=30)
    runtime = holder["runtime"] = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(job_step("a")))
    with anyio.fail_after(10):
        result = await run.wait()
    assert result.status == "succeeded" and run.outputs["a"] == {"early": True}
    assert "polled" not in holder  # nothing to poll: the stored completion ended the wait
    with pytest.raises(RunStateError, match=r"already completed by .*second completion"):
        await runtime.complete_job(run.run_id, "a", output={"late": True})
    await runtime.aclose()


async def test_a_second_completion_is_refused(backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=30)
    runtime = Runtime(tb, MemoryStore())
    gate = anyio.Event()

    @tb.tool
    async def hold() -> int:
        await gate.wait()
        return 1

    once = {"retry": {"max_attempts": 1}}  # (a failed job is retried like any call)
    run = await runtime.start(chain(job_step("a", **once), {"id": "h", "tool": "hold"}))
    while run.steps["a"].job is None or run.steps["a"].job["phase"] != "waiting":
        await anyio.sleep(0.005)
    await runtime.complete_job(run.run_id, "a", error="the cluster lost it")
    with pytest.raises(RunStateError, match="a second completion is refused"):
        await runtime.complete_job(run.run_id, "a", output={"x": 1})
    gate.set()
    result = await run.wait()
    assert run.steps["a"].status == "failed"
    assert "the cluster lost it" in (run.steps["a"].error or "")
    assert result.status == "failed"
    await runtime.aclose()


async def test_a_completion_for_a_run_nobody_drives_takes_it_over(tmp_path: Path,
                                                                 backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=30)
    db = tmp_path / "c.db"
    first = Runtime(tb, SQLiteStore(db))
    run = await first.start(chain(job_step("a")))
    while run.steps["a"].job is None or run.steps["a"].job["phase"] != "waiting":
        await anyio.sleep(0.005)
    await first.aclose()  # the driver goes away while the job waits
    second = Runtime(tb, SQLiteStore(db))
    assert await second.complete_job(run.run_id, "a", output={"from": "callback"}) == "applied"
    resumed = second.get_run(run.run_id)
    with anyio.fail_after(10):
        result = await resumed.wait()
    assert result.status == "succeeded" and resumed.outputs["a"] == {"from": "callback"}
    assert list(backend.submissions.values()) == [1]
    await second.aclose()


async def test_poll_errors_back_off_then_in_doubt_and_reattach(backend: FakeBackend) -> None:
    tb = Toolbox()
    errors = {"left": 2}

    class Flaky:
        async def submit(self, payload: dict, ctx: CallContext) -> dict:
            return {"id": backend.submit(ctx.idempotency_key, payload)}

        async def poll(self, handle: dict) -> JobStatus:
            if errors["left"] > 0:
                errors["left"] -= 1
                raise ConnectionError("backend unreachable")
            return backend.status(handle["id"])

    tb.job(Flaky, name="remote", poll_every_s=1.0, max_poll_errors=3)
    clock = ManualClock()
    runtime = Runtime(tb, MemoryStore(), clock=clock)
    backend.polls_to_finish = 1
    run = await runtime.start(chain(job_step("a")))
    assert (await run.wait()).status == "succeeded"
    # first nap poll_every_s, then doubled after each failed poll
    assert clock.slept[:3] == [1.0, 2.0, 4.0]
    progress = [e.payload for e in run.history() if e.kind == "job_progress"]
    assert [p.get("poll_errors") for p in progress[:2]] == [1, 2]
    assert "ConnectionError: backend unreachable" in progress[0]["error"]
    # too many in a row: in_doubt with the handle kept; retry waits on it, never resubmits
    errors["left"] = 3
    backend.polls_to_finish = None
    run2 = await runtime.start(chain(job_step("b", 2)))
    result = await run2.wait()
    assert result.status == "suspended" and run2.steps["b"].status == "in_doubt"
    assert "3 polls" in (run2.steps["b"].error or "") and "fix poll" in run2.steps["b"].error
    backend.finish_all()
    await run2.resolve("b", retry=True)
    assert (await run2.wait()).status == "succeeded"
    assert sum(backend.submissions.values()) == 2  # one per run, none from the retry
    await runtime.aclose()


async def test_not_found_fails_or_resubmits_under_a_new_key(backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb)

    class Lost:
        async def submit(self, payload: dict, ctx: CallContext) -> dict:
            job_id = backend.submit(ctx.idempotency_key, payload)
            if ctx.attempt == 1:
                del backend.jobs[job_id]  # the backend forgets the first one
            else:
                backend.jobs[job_id]["state"] = "succeeded"
                backend.jobs[job_id]["output"] = {"second": True}
            return {"id": job_id}

        async def poll(self, handle: dict) -> JobStatus:
            return backend.status(handle["id"])

    tb.job(Lost, name="lost", poll_every_s=0.01, on_not_found="resubmit")
    tb.job(Lost, name="lost_fail", poll_every_s=0.01)
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain({"id": "a", "tool": "lost_fail", "args": {"payload": {}}}))
    assert (await run.wait()).status == "failed"
    assert "does not know the job" in (run.steps["a"].error or "")
    run = await runtime.start(chain({"id": "a", "tool": "lost", "args": {"payload": {}}}))
    assert (await run.wait()).status == "succeeded" and run.outputs["a"] == {"second": True}
    keys = [e.payload["key"] for e in run.history() if e.kind == "job_submitting"]
    assert len(keys) == 2 and keys[1] == f"{keys[0]}/2"  # a new job, a new key
    await runtime.aclose()


async def test_cancel_and_timeout_reach_the_job_server(tmp_path: Path) -> None:
    with JobServer(tmp_path / "jobs.json", duration_s=30) as server:
        tb = Toolbox()
        register_http_job(tb, server.url, name="remote", poll_every_s=0.05)
        register_http_job(tb, server.url, name="short", poll_every_s=0.05, timeout_s=0.4)
        runtime = Runtime(tb, MemoryStore())
        run = await runtime.start(chain(job_step("a")))
        while run.steps["a"].job is None or run.steps["a"].job["phase"] != "waiting":
            await anyio.sleep(0.01)
        await run.cancel()
        assert (await run.wait()).status == "cancelled"
        assert run.steps["a"].status == "cancelled"
        job_id = run.steps["a"].job["handle"]["id"]
        assert server.stats()["cancels"] == {job_id: 1}

        run = await runtime.start(chain({"id": "t", "tool": "short", "args": {"payload": {}},
                                         "retry": {"max_attempts": 1}}))
        assert (await run.wait()).status == "failed"
        st = run.steps["t"]
        assert st.error_kind == "timeout" and "cancel(handle) sent" in (st.error or "")
        assert st.job["handle"]["id"] in server.stats()["cancels"]
        assert sum(server.stats()["submissions"].values()) == 2
        await runtime.aclose()


async def test_bad_handles_and_bad_polls_get_clear_errors(tmp_path: Path) -> None:
    tb = Toolbox()

    class NotJSON:
        def submit(self, payload: dict) -> Any:
            return {"when": object()}

        def poll(self, handle: dict) -> JobStatus:
            return JobStatus.pending()

    class Garbage:
        def submit(self, payload: dict) -> dict:
            return {"id": 1}

        def poll(self, handle: dict) -> Any:
            return "done!"

    class Unknown:
        def submit(self, payload: dict) -> dict:
            return {"id": 1}

        def poll(self, handle: dict) -> JobStatus:
            return JobStatus("exploded")  # type: ignore[arg-type]

    tb.job(NotJSON, name="notjson")
    tb.job(Garbage, name="garbage", poll_every_s=0.01, max_poll_errors=2)
    tb.job(Unknown, name="unknown", poll_every_s=0.01, max_poll_errors=2)
    runtime = Runtime(tb, MemoryStore())
    for tool, words in [("notjson", "not JSON data"), ("garbage", "not a JobStatus"),
                        ("unknown", "not a JobStatus")]:
        run = await runtime.start(chain({"id": "s", "tool": tool, "args": {"payload": {}}}))
        result = await run.wait()
        assert result.status == "suspended", tool  # in_doubt: resumable, nothing lost
        assert run.steps["s"].status == "in_doubt" and words in (run.steps["s"].error or "")
    await run.resolve("s", output={"fixed": "by hand"})
    assert (await run.wait()).status == "succeeded"
    with pytest.raises(ToolDefinitionError, match="define a method poll"):
        tb.job(type("NoPoll", (), {"submit": lambda self: {}}))
    await runtime.aclose()


class NeedsPid(TypedDict):
    pid: int


async def test_a_handle_that_fails_validation_on_resume(tmp_path: Path,
                                                        backend: FakeBackend) -> None:
    db = tmp_path / "h.db"
    tb = Toolbox()
    backend.register(tb, poll_every_s=30)
    first = Runtime(tb, SQLiteStore(db))
    run = await first.start(chain(job_step("a")))
    while run.steps["a"].job is None or run.steps["a"].job["phase"] != "waiting":
        await anyio.sleep(0.005)
    await first.aclose()
    tb2 = Toolbox()  # the job's code changed: its handles must now hold a pid
    backend.register(tb2, poll_every_s=0.01, handle_type=NeedsPid)
    second = Runtime(tb2, SQLiteStore(db))
    resumed = await second.resume(run.run_id)
    assert (await resumed.wait()).status == "suspended"
    st = resumed.steps["a"]
    assert st.status == "in_doubt" and "fails validation" in (st.error or "")
    assert st.job["handle"] == {"id": "j1"}  # kept
    await resumed.resolve("a", fail=True)
    assert (await resumed.wait()).status == "failed"
    assert list(backend.submissions.values()) == [1]
    await second.aclose()


async def test_mixed_wave_jobs_tools_and_a_subchain_then_recovery(tmp_path: Path,
                                                                  backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=0.01)
    calls: dict[str, int] = {}

    @tb.tool(side_effects=True)
    def note(tag: str) -> str:
        calls[tag] = calls.get(tag, 0) + 1
        return tag.upper()

    tb.add_chain(Chain.from_dict({"name": "sub", "steps": [
        {"id": "x", "tool": "note", "args": {"tag": "sub-x"}},
        {"id": "y", "tool": "remote", "args": {"payload": {"n": "{{ steps.x.output }}"}}},
    ]}))
    wave = chain(
        {"id": "t1", "tool": "note", "args": {"tag": "t1"}},
        job_step("j1", 1), job_step("j2", 2), job_step("j3", 3),
        {"id": "s", "tool": "chain:sub", "args": {}},
        {"id": "t2", "tool": "note", "args": {"tag": "t2"}},
        {"id": "all", "tool": "note", "args": {"tag": "{{ steps.j1.output.done.n }}-"
                                                    "{{ steps.j3.output.done.n }}"}},
        max_concurrency=3)
    db = tmp_path / "m.db"
    first = Runtime(tb, SQLiteStore(db))
    run = await first.start(wave)
    # stop the driver mid-wave: ordinary calls done, the jobs waiting
    while not (all((run.steps[j].job or {}).get("phase") == "waiting"
                   for j in ("j1", "j2", "j3", "s/y"))):
        await anyio.sleep(0.005)
    done_before = dict(calls)
    await first.aclose()
    backend.finish_all()
    second = Runtime(tb, SQLiteStore(db))
    resumed = await second.resume(run.run_id)
    assert (await resumed.wait()).status == "succeeded"
    assert resumed.outputs["s"] == {"x": "SUB-X", "y": {"done": {"n": "SUB-X"}}}
    assert resumed.outputs["j2"] == {"done": {"n": 2}} and resumed.outputs["all"] == "1-3"
    assert all(n == 1 for n in backend.submissions.values()) and len(backend.submissions) == 4
    assert {k: calls[k] for k in done_before} == done_before  # nothing recorded ran again
    assert all(n == 1 for n in calls.values())
    await second.aclose()


@pytest.mark.xdist_group("durability")
async def test_subprocess_job_survives_its_driver(tmp_path: Path) -> None:
    from chainlab.tools.subprocess_job import register_subprocess_job

    marker = tmp_path / "ran.txt"
    script = (f"import time, pathlib; p = pathlib.Path({str(marker)!r}); "
              "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); time.sleep(0.6); "
              "print('trained')")
    tb = Toolbox()
    register_subprocess_job(tb, workdir=tmp_path / "jobs", poll_every_s=0.05)
    step = {"id": "train", "tool": "subprocess",
            "args": {"command": [sys.executable, "-c", script]}}
    db = tmp_path / "s.db"
    first = Runtime(tb, SQLiteStore(db))
    run = await first.start(chain(step))
    while (run.steps["train"].job or {}).get("phase") != "waiting":
        await anyio.sleep(0.01)
    await first.aclose()  # the driver stops; the command goes on
    first.store.close()  # what it queued is committed before the next process reads the log
    second = Runtime(tb, SQLiteStore(db))
    resumed = await second.resume(run.run_id)
    with anyio.fail_after(20):
        assert (await resumed.wait()).status == "succeeded"
    assert resumed.outputs["train"] == {"exit_code": 0, "stdout": "trained\n"}
    assert marker.read_text() == "x"  # the command ran once
    await second.aclose()


async def test_fork_attaches_to_a_waiting_job_or_resubmits_after_approval(
        tmp_path: Path, backend: FakeBackend) -> None:
    tb = Toolbox()
    backend.register(tb, poll_every_s=0.02)

    @tb.tool
    def after(x: dict) -> int:
        return len(x)

    runtime = Runtime(tb, SQLiteStore(tmp_path / "f.db"))
    parent = await runtime.start(chain(job_step("a", 1),
                                       {"id": "b", "tool": "after",
                                        "args": {"x": "{{ steps.a.output }}"}}))
    while (parent.steps["a"].job or {}).get("phase") != "waiting":
        await anyio.sleep(0.005)
    await anyio.sleep(0.05)  # (the parent's events are durable: the fork reads the store)
    plan = await runtime.fork_plan(parent.run_id)
    row = plan.row("a")
    assert row.decision == "attach" and row.job["handle"] == {"id": "j1"}
    assert "still waiting in the parent" in row.reason
    attached = await runtime.fork(parent.run_id)
    again = await runtime.fork(parent.run_id, rerun=["a"])
    assert (await runtime.fork_plan(parent.run_id, rerun=["a"])).row("a").decision == "confirm"
    while (again.steps["a"].status != "waiting_confirmation"
           or (attached.steps["a"].job or {}).get("how") != "attached"):
        await anyio.sleep(0.005)
    assert sum(backend.submissions.values()) == 1  # attach submitted nothing
    await again.approve("a")
    while sum(backend.submissions.values()) < 2:
        await anyio.sleep(0.005)
    backend.finish_all()
    for run in (parent, attached, again):
        with anyio.fail_after(10):
            assert (await run.wait()).status == "succeeded"
    assert attached.steps["a"].job["handle"] == {"id": "j1"}
    assert again.steps["a"].job["handle"] == {"id": "j2"}
    keys = list(backend.submissions)
    assert len(keys) == 2 and all(backend.submissions[k] == 1 for k in keys)
    await runtime.aclose()


async def test_the_http_complete_endpoint(backend: FakeBackend) -> None:
    """Against a real uvicorn on a loopback port (in this process, so the test's fake backend
    serves the job the server's runtime waits on)."""
    import httpx
    import uvicorn

    from chainlab.http.app import create_app

    tb = Toolbox()
    backend.register(tb, poll_every_s=30)
    app = create_app(tb, token="t0ken", db=MemoryStore())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on",
                                           log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        runtime = app.state.service.runtime
        run = await runtime.start(chain(job_step("a")))
        while (run.steps["a"].job or {}).get("phase") != "waiting":
            await anyio.sleep(0.005)
        headers = {"Authorization": "Bearer t0ken"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     headers=headers) as client:
            url = f"/runs/{run.run_id}/steps/a/complete"
            bad = await client.post(url, json={})
            assert bad.status_code == 400 and "exactly one of output or error" in bad.text
            ok = await client.post(url, json={"output": {"via": "http"}, "by": "backend"})
            assert ok.status_code == 200, ok.text
            again = await client.post(url, json={"output": {"via": "http"}})
            assert again.status_code == 409 and "second completion" in again.text
        assert (await run.wait()).status == "succeeded"
        assert run.outputs["a"] == {"via": "http"}
        server.should_exit = True


async def test_confirmation_and_compensation_apply_to_a_job_as_to_any_tool(
        backend: FakeBackend) -> None:
    tb = Toolbox()
    undone: list[Any] = []
    backend.polls_to_finish = 1
    backend.register(tb, requires_confirmation=True,
                     compensate=("undo", {"what": "{{ output.done }}"}))

    @tb.tool(side_effects=True, idempotent=True)
    def undo(what: dict) -> None:
        undone.append(what)

    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(job_step("a", 5)))
    assert (await run.wait()).status == "suspended"
    assert run.steps["a"].status == "waiting_confirmation" and backend.submissions == {}
    await run.approve("a")
    assert (await run.wait()).status == "succeeded"
    assert sum(backend.submissions.values()) == 1
    await run.rollback()
    assert (await run.wait()).status == "rolled_back"
    assert undone == [{"n": 5}]
    await runtime.aclose()


async def test_cancel_one_job_from_the_run_or_the_widget(backend: FakeBackend) -> None:
    from chainlab.jupyter.run_widget.widget import RunWidget

    tb = Toolbox()
    backend.register(tb, poll_every_s=0.02)
    runtime = Runtime(tb, MemoryStore())
    run = await runtime.start(chain(job_step("a", 1), job_step("b", 2),
                                    on_failure="continue"))
    while not all((run.steps[s].job or {}).get("phase") == "waiting" for s in ("a", "b")):
        await anyio.sleep(0.005)
    w = RunWidget(run)
    w.refresh()
    w.inspector.select("a")
    w.inspector.refresh()
    details = w.inspector.details.value
    assert "<th>job handle</th><td>{&quot;id&quot;: &quot;j1&quot;}</td>" in details
    assert "<th>job polls</th>" in details
    assert w.inspector.cancel_job.layout.display is None  # shown for a waiting job
    w.inspector.cancel_job.click()
    while run.steps["a"].status == "running":
        await anyio.sleep(0.005)
    assert run.steps["a"].status == "failed" and "cancelled by a person" in run.steps["a"].error
    assert backend.cancels == ["j1"]
    with pytest.raises(RunStateError, match="not a remote job that waits"):
        await run.cancel_job("a")
    backend.finish_all()
    assert (await run.wait()).status == "failed"  # a's failure; b went on and succeeded
    assert run.steps["b"].status == "succeeded"
    await runtime.aclose()
