"""The event vocabulary: every kind folds, an unknown kind is an error everywhere."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from chainlab.errors import StoreError
from chainlab.events import Event, EventKind, RunState, event_kind
from chainlab.events.fold import _HANDLERS
from chainlab.store import SQLiteStore
from chainlab.store.base import RunRecord


def test_every_kind_has_a_fold_handler_and_nothing_else_does() -> None:
    assert set(_HANDLERS) == set(EventKind)


def test_the_fold_refuses_an_unknown_kind() -> None:
    state = RunState("r")
    with pytest.raises(StoreError, match="unknown event kind 'step_teleported'"):
        state.apply(Event("r", 1, 0.0, 1, "step_teleported", "a"))  # type: ignore[arg-type]


def test_event_kind_names_the_fix() -> None:
    assert event_kind("run_started") is EventKind.RUN_STARTED
    with pytest.raises(StoreError, match="upgrade chainlab"):
        event_kind("nope")


def test_a_stored_unknown_kind_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    store = SQLiteStore(path)
    store.create_run(RunRecord("r", "c", "running", 1, 0.0, 0.0, {"name": "c", "steps": []}))
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO events (run_id, seq, ts, epoch, kind, step_id, attempt, "
                     "payload) VALUES ('r', 1, 0, 1, 'from_the_future', NULL, NULL, '{}')")
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="unknown event kind 'from_the_future'"):
        store.load_events("r")
    store.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_emit_takes_an_event_kind() -> None:
    from chainlab import Chain, Toolbox
    from chainlab.runtime import Runtime
    from chainlab.store import MemoryStore

    tb = Toolbox("t")
    tb.tool(lambda: 1, name="one")
    run = await Runtime(tb, MemoryStore()).start(
        Chain.from_dict({"name": "c", "steps": [{"id": "a", "tool": "one"}]}))
    await run.wait()
    with pytest.raises(TypeError, match="emit takes an EventKind"):
        run._kernel.emit("step_ready", "a")  # type: ignore[arg-type, union-attr]
    assert all(type(e.kind) is EventKind for e in run.event_list())
