"""chainlab.timeline: frames with exact rows for runs with retries, confirmation waits, in-doubt
steps and compensations (all on a ManualClock), built from the store only; the Gantt chart
renders headless to PNG."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import anyio
import pandas as pd
import pytest

from chainlab import RunNotFoundError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.timeline import (
    ATTEMPT_COLUMNS,
    TimelineFigure,
    attempts_frame,
    compensations_frame,
    events_frame,
    plot_timeline,
    waits_frame,
)

from .render.scenarios import T0, Lab, chain_of, retry_chain, run_saga, saga_chain

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def rel(ts: Any) -> float | None:
    """A timestamp as seconds after the lab clock's start (None for NaT)."""
    return None if pd.isna(ts) else round(ts.timestamp() - T0, 6)


def rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    out = []
    for rec in frame[list(columns)].itertuples(index=False):
        out.append(tuple(rel(v) if isinstance(v, pd.Timestamp) or v is pd.NaT else
                         (None if isinstance(v, float) and math.isnan(v) else v) for v in rec))
    return out


ATTEMPT_VIEW = ("step_id", "tool", "kind", "attempt", "epoch", "status", "error_kind",
                "started_at", "ended_at", "duration_s", "retry_delay_s")


async def test_retries_exact_rows() -> None:
    lab = Lab()
    run = await lab.start(retry_chain())
    assert (await run.wait()).ok
    frame = run.attempts()
    assert list(frame.columns) == ATTEMPT_COLUMNS
    assert rows(frame, *ATTEMPT_VIEW) == [
        ("fetch", "flaky", "call", 1, 1, "failed", "transient", 0.0, 1.0, 1.0, 2.0),
        ("fetch", "flaky", "call", 2, 1, "failed", "transient", 3.0, 4.0, 1.0, 4.0),
        ("fetch", "flaky", "call", 3, 1, "succeeded", None, 8.0, 9.0, 1.0, None),
        ("parse", "work", "call", 1, 1, "succeeded", None, 9.0, 9.5, 0.5, None),
    ]
    assert list(frame["error"][:2]) == ["503 from upstream (1)", "503 from upstream (2)"]
    assert frame["idempotency_key"].isna().all()  # effect-free tools get no key
    assert rows(waits_frame(lab.store, run.run_id), "step_id", "kind", "started_at",
                "ended_at", "duration_s", "outcome") == [
        ("fetch", "backoff", 1.0, 3.0, 2.0, "retried"),
        ("fetch", "backoff", 4.0, 8.0, 4.0, "retried")]
    assert run.compensations().empty and list(run.compensations().columns) == ATTEMPT_COLUMNS


async def test_confirmation_in_doubt_and_compensations_exact_rows() -> None:
    lab = Lab()
    run = await run_saga(lab)
    assert str(run.status) == "rolled_back"
    assert rows(run.attempts(), *ATTEMPT_VIEW) == [
        ("charge", "charge", "call", 1, 1, "succeeded", None, 0.0, 0.5, 0.5, None),
        ("pay", "pay", "call", 1, 1, "succeeded", None, 3.5, 4.0, 0.5, None),
        ("ship", "ship", "call", 1, 1, "failed", "transient", 4.0, 5.5, 1.5, None),
        ("pay", "refund", "compensation", 1, 1, "succeeded", None, 7.5, 7.75, 0.25, None),
        ("charge", "refund", "compensation", 1, 1, "succeeded", None, 7.75, 8.0, 0.25, None),
    ]
    keys = run.attempts()["idempotency_key"]
    assert keys.notna().all() and keys.nunique() == 5  # effects: one key per logical call
    comp = run.compensations()
    assert rows(comp, "step_id", "tool", "status") == [("pay", "refund", "succeeded"),
                                                       ("charge", "refund", "succeeded")]
    assert list(comp.index) == [0, 1]
    assert rows(waits_frame(lab.store, run.run_id), "step_id", "kind", "started_at",
                "ended_at", "duration_s", "outcome") == [
        ("pay", "confirmation", 0.5, 3.5, 3.0, "approved"),
        ("ship", "in_doubt", 5.5, 7.5, 2.0, "resolved")]


async def test_open_attempts_and_waits_have_no_end() -> None:
    lab = Lab()
    run = await lab.start(saga_chain())
    result = await run.wait()
    assert result.waiting == {"pay": "waiting_confirmation"}
    waits = waits_frame(lab.store, run.run_id)
    assert rows(waits, "step_id", "kind", "started_at", "ended_at", "duration_s",
                "outcome") == [("pay", "confirmation", 0.5, None, None, None)]
    await run.cancel()
    await run.wait()


async def test_a_crashed_attempt_is_interrupted_and_the_next_epoch_shows() -> None:
    lab = Lab()
    chain = chain_of({"id": "s", "tool": "work", "args": {"seconds": 1}}, name="crash")
    done = await lab.start(chain)
    await done.wait()
    # what a crash mid-call leaves behind: the log up to step_started, the run "running"
    events = lab.store.load_events(done.run_id)
    cut = next(i for i, e in enumerate(events) if e.kind == "step_started") + 1
    crashed = MemoryStore()
    crashed.create_run(lab.store.get_run(done.run_id).with_(status="running", epoch=1))
    crashed.append(done.run_id, 1, events[:cut], run_status="running")
    await crashed.flush(done.run_id, 1)
    fresh = Runtime(lab.toolbox, crashed, clock=lab.clock)
    resumed = await fresh.resume(done.run_id)
    assert (await resumed.wait()).ok
    assert rows(resumed.attempts(), "step_id", "attempt", "epoch", "status") == [
        ("s", 1, 1, "interrupted"), ("s", 2, 2, "succeeded")]
    await fresh.aclose()


async def test_frames_come_from_the_store_alone(tmp_path: Path) -> None:
    lab = Lab()
    lab.store = SQLiteStore(tmp_path / "runs.db")
    lab.runtime = Runtime(lab.toolbox, lab.store, clock=lab.clock, id_factory=lambda: "r1")
    run = await run_saga(lab)
    expected = run.attempts()
    lab.store.close()
    reopened = SQLiteStore(tmp_path / "runs.db")  # as another process would
    pd.testing.assert_frame_equal(attempts_frame(reopened, "r1"), expected)
    viewer = Runtime(lab.toolbox, reopened).get_run("r1")
    assert not viewer.active
    pd.testing.assert_frame_equal(viewer.attempts(), expected)
    reopened.close()


async def test_dtypes() -> None:
    lab = Lab()
    run = await run_saga(lab)
    frame = run.attempts()
    assert str(frame["started_at"].dtype) == "datetime64[ns, UTC]"
    assert str(frame["ended_at"].dtype) == "datetime64[ns, UTC]"
    assert frame["attempt"].dtype == "int64" and frame["duration_s"].dtype == "float64"
    assert frame["run_id"].unique().tolist() == [run.run_id]


async def test_event_log() -> None:
    lab = Lab()
    run = await run_saga(lab)
    log = run.event_log()
    events = lab.store.load_events(run.run_id)
    assert list(log["seq"]) == [e.seq for e in events] == list(range(1, len(events) + 1))
    assert list(log["kind"]) == [e.kind for e in events]
    assert log["kind"].iloc[0] == "run_started" and log["kind"].iloc[-1] == "run_rolled_back"
    assert log["elapsed_s"].iloc[0] == 0.0 and log["elapsed_s"].iloc[-1] == 8.0
    assert str(log["attempt"].dtype) == "Int64" and pd.isna(log["attempt"].iloc[0])
    approved = log[log.kind == "step_approved"].iloc[0]
    assert approved.step_id == "pay" and approved.payload["note"] == "ok"


async def test_runs_frame_newest_first() -> None:
    lab = Lab()
    first = await lab.start(retry_chain())
    await first.wait()
    lab.clock.advance(60)
    await run_saga(lab)
    frame = lab.runtime.runs_frame()
    assert rows(frame, "run_id", "chain_name", "status", "epoch", "steps") == [
        ("run-2", "saga", "rolled_back", 1, 3), ("run-1", "retries", "succeeded", 1, 2)]
    assert rel(frame["created_at"].iloc[1]) == 0.0
    assert rows(lab.runtime.runs_frame(limit=1), "run_id") == [("run-2",)]


async def test_unknown_run() -> None:
    lab = Lab()
    for fn in (attempts_frame, compensations_frame, events_frame, waits_frame, plot_timeline):
        with pytest.raises(RunNotFoundError):
            fn(lab.store, "nope")


async def test_gantt_chart_renders_headless_to_png(tmp_path: Path) -> None:
    lab = Lab()
    saga = await run_saga(lab)
    retried = await lab.start(retry_chain())
    await retried.wait()
    for run, name in ((saga, "saga"), (retried, "retries")):
        fig = run.plot_timeline()
        assert isinstance(fig, TimelineFigure)
        png = fig._repr_png_()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        (tmp_path / f"{name}.png").write_bytes(png)
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_yticklabels()] == list(
            run.chain.step_ids)
        right = [t.get_text() for t in ax.texts if (t.get_gid() or "").startswith("status:")]
        assert right == _captions(run)
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        if name == "saga":
            assert legend == ["attempt succeeded", "attempt failed", "waiting for approval",
                              "in doubt", "compensation succeeded"]
        else:
            assert legend == ["attempt succeeded", "attempt failed", "back-off"]
    texts = [t.get_text() for t in saga.plot_timeline().axes[0].texts]
    assert "☐ 3 s approved" in texts and "✗ #1" in texts


def _captions(run: Any) -> list[str]:
    from chainlab.render import STATUS_STYLE

    return [STATUS_STYLE[str(run.steps[s].status)].caption for s in run.chain.step_ids]


async def test_plot_into_given_axes_and_with_a_running_attempt() -> None:
    from matplotlib.figure import Figure

    lab = Lab()
    run = await lab.start(saga_chain())
    await run.wait()  # suspended on the approval
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_timeline(lab.store, run.run_id, ax=ax, title="custom") is fig
    assert ax.get_title(loc="left") == "custom"
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:4] == b"\x89PNG"
    await run.cancel()
    await run.wait()


async def test_subchain_rows_follow_their_parent() -> None:
    lab = Lab()
    inner = chain_of({"id": "x", "tool": "work", "args": {"seconds": 1}}, name="inner")
    lab.toolbox.add_chain(inner)
    run = await lab.start(chain_of({"id": "a", "tool": "work"},
                                   {"id": "g", "tool": "chain:inner", "depends_on": ["a"]},
                                   {"id": "z", "tool": "work", "depends_on": ["g"]},
                                   name="outer"))
    assert (await run.wait()).ok
    fig = run.plot_timeline()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "g", "g/x", "z"]
    assert rows(run.attempts(), "step_id", "tool", "started_at", "ended_at") == [
        ("a", "work", 0.0, 1.0), ("g", "chain:inner", 1.0, 2.0),  # the group spans its steps
        ("g/x", "work", 1.0, 2.0), ("z", "work", 2.0, 3.0)]


# ------------------------------------------------------------------ issue 40: like with like
def test_a_wait_for_a_person_is_a_pause_minus_the_calls_that_ran() -> None:
    from chainlab.events import Event, EventKind
    from chainlab.timeline import person_waits

    def ev(seq: int, kind: str, ts: float) -> Event:
        return Event(run_id="r", seq=seq, kind=EventKind(kind), ts=ts, epoch=1)

    events = [ev(1, "run_started", 0.0), ev(2, "run_paused", 10.0), ev(3, "run_resumed", 20.0),
              ev(4, "run_suspended", 25.0), ev(5, "run_paused", 26.0),  # (a pause in it)
              ev(6, "run_resumed", 30.0), ev(7, "run_succeeded", 31.0)]
    # a call ran 12-15 while paused (step mode releases one step): that time is work
    assert person_waits(events, [(1.0, 9.0), (12.0, 15.0), (30.0, 31.0)]) == [
        (10.0, 12.0), (15.0, 20.0), (25.0, 30.0)]
    assert person_waits(events[:1], []) == []


async def test_the_real_makespan_leaves_out_a_pause_at_a_breakpoint() -> None:
    """`%chain whatif` after a run sat at a breakpoint said "real makespan 12.539 s ...
    (0.05 x)": the pause counted. It is left out now, and said."""
    from chainlab import Chain, Toolbox
    from chainlab.plan.schema import RunOptions
    from chainlab.testing import ManualClock
    from chainlab.timeline import gantt_compare, schedule_of, whatif

    clock = ManualClock()
    tb = Toolbox("paused")

    @tb.tool
    async def work(i: int) -> int:
        clock.advance(1.0)  # each call takes one second of the run's clock
        return i

    chain = Chain.from_dict({"name": "paused", "steps": [
        {"id": "a", "tool": "work", "args": {"i": 1}},
        {"id": "b", "tool": "work", "args": {"i": 2}, "depends_on": ["a"]},
        {"id": "c", "tool": "work", "args": {"i": 3}, "depends_on": ["b"]}]})
    async with Runtime(tb, MemoryStore(), clock=clock) as rt:
        run = await rt.start(chain, options=RunOptions(breakpoints=["b"]))
        for _ in range(500):
            if run.paused and run.steps["a"].status == "succeeded":
                break
            await anyio.sleep(0.01)
        clock.advance(11.0)  # a person looks at the breakpoint for 11 s
        await run.unpause()
        assert (await run.wait()).ok
        real = schedule_of(run)
        assert real.waited_s == pytest.approx(11.0)
        assert real.makespan == pytest.approx(3.0)  # three calls of a second, one after another
        assert list(real.frame["start_s"]) == pytest.approx([0.0, 1.0, 2.0])
        assert "11 s waiting for a person left out" in repr(real)
        replay = whatif(run, priority="declaration")
        assert replay.makespan == pytest.approx(real.makespan)  # like with like: 1.00 x
        fig = gantt_compare(real, replay)
        assert "11 s waiting for a person left out" in fig.axes[0].get_title(loc="left")
