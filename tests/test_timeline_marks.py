"""The Gantt chart marks epochs, injected faults and fenced writers (chainlab.timeline.marks):
exact marks for a synthetic log, and the marks of a real run with a second driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from matplotlib.figure import Figure

from chainlab import Chain, StaleEpochError, Toolbox
from chainlab.events import Event, EventKind, RunState
from chainlab.runtime import Runtime
from chainlab.runtime.faults import inject
from chainlab.store import SQLiteStore
from chainlab.timeline import plot_timeline
from chainlab.timeline.marks import EPOCH_COLOR, FAULT_COLOR, FENCED_COLOR, epoch_spans, mark_run

K = EventKind


def _log() -> list[Event]:
    rows: list[tuple[int, float, EventKind, str | None, dict[str, Any]]] = [
        (1, 10.0, K.RUN_STARTED, None, {}),
        (1, 10.1, K.STEP_READY, "a", {}),
        (1, 10.2, K.FAULT_INJECTED, "a", {"fault": "timeout", "by": "widget"}),
        (1, 10.3, K.STEP_STARTED, "a", {}),
        (1, 10.4, K.FAULT_INJECTED, None, {"fault": "second_driver", "by": "python",
                                           "stale_epoch": 1}),
        (2, 10.5, K.RUN_RESUMED, None, {"reason": "recovery"}),
        (2, 10.9, K.WRITE_REFUSED, None, {"stale_epoch": 1, "epoch": 2, "refused": [
            "step_succeeded a", "step_ready b", "step_started b", "run_succeeded"]}),
    ]
    return [Event("r", i + 1, ts, ep, kind, step, None, p)
            for i, (ep, ts, kind, step, p) in enumerate(rows)]


def _marks(ax: Any, color: str) -> list[tuple[str, float, float]]:
    """(marker, x, y) of every single-point line drawn in ``color``."""
    out = []
    for line in ax.get_lines():
        if line.get_color() == color and len(line.get_xdata()) == 1:
            out.append((line.get_marker(), round(float(line.get_xdata()[0]), 6),
                        float(line.get_ydata()[0])))
    return out


def _vlines(ax: Any, color: str) -> list[float]:
    return [round(float(line.get_xdata()[0]), 6) for line in ax.get_lines()
            if line.get_color() == color and len(line.get_xdata()) == 2]


def test_epoch_spans_follow_the_log() -> None:
    assert epoch_spans(_log()) == [(1, 10.0, 10.4), (2, 10.5, 10.9)]
    assert epoch_spans([]) == []


def test_marks_of_a_synthetic_log() -> None:
    events = _log()
    state = RunState.from_events("r", events, ["a", "b"])
    ax = Figure().add_subplot()
    handles = mark_run(ax, state, events, {"a": 0, "b": 1})
    assert [h.get_label() for h in handles] == [
        "new epoch (driver took over)", "fault injected", "write refused (stale epoch, fenced)"]
    assert _vlines(ax, EPOCH_COLOR) == [0.5]  # epoch 2 begins 0.5 s after the first event
    assert _marks(ax, FAULT_COLOR) == [("v", 0.2, 0.0)]  # the step fault, on a's row
    assert _vlines(ax, FAULT_COLOR) == [0.4]  # the driver-level fault, across the chart
    # one cross per step the stale writer tried to write (run-level writes: the line only)
    assert _marks(ax, FENCED_COLOR) == [("X", 0.9, 0.0), ("X", 0.9, 1.0)]
    assert _vlines(ax, FENCED_COLOR) == [0.9]
    texts = [t.get_text() for t in ax.texts]
    assert " epoch 2" in texts and "⚠ timeout (widget)" in texts
    assert texts.count("refused: epoch 1 ") == 2


def test_a_run_without_faults_or_takeovers_gets_no_marks() -> None:
    events = [e for e in _log() if e.epoch == 1 and e.kind != K.FAULT_INJECTED]
    state = RunState.from_events("r", events, ["a", "b"])
    ax = Figure().add_subplot()
    assert mark_run(ax, state, events, {"a": 0, "b": 1}) == []
    assert not ax.get_lines() and not ax.texts


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_gantt_of_a_fenced_run_shows_all_three(tmp_path: Path) -> None:
    tb = Toolbox("m")
    gate = anyio.Event()

    @tb.tool(name="slow")
    async def slow(tag: str) -> str:
        await gate.wait()
        return tag

    store = SQLiteStore(tmp_path / "m.db")
    rt = Runtime(tb, store)
    chain = Chain.from_dict({"name": "m", "steps": [{"id": "a", "tool": "slow",
                                                     "args": {"tag": "a"}}]})
    run = await rt.start(chain)
    while run.steps["a"].status != "running":
        await anyio.sleep(0.005)
    run2 = await inject(run, "second_driver", by="test")
    gate.set()
    with pytest.raises(StaleEpochError):
        await run.wait()
    await run2.wait()
    with anyio.fail_after(10):
        while not run2.state.fenced:
            await anyio.sleep(0.005)
    await store.flush(run.run_id, 2)
    fig = plot_timeline(store, run.run_id)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"new epoch (driver took over)", "fault injected",
            "write refused (stale epoch, fenced)"} <= set(labels)
    ax = fig.axes[0]
    assert len(_vlines(ax, EPOCH_COLOR)) == 1 and len(_marks(ax, FENCED_COLOR)) == 1
    assert fig._repr_png_()[:4] == b"\x89PNG" and fig.dark_png()[:4] == b"\x89PNG"
    await run2.runtime.aclose()
    await rt.aclose()  # the store is not closed: a fenced driver's runtime may still be
    # forgetting its heartbeat in a worker thread after aclose() (closing then crashes)
