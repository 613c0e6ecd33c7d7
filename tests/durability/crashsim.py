"""Crashes simulated in-process, exactly: the store of a crashed process holds a PREFIX of
the events its runtime appended (the writer commits in order), and the world holds every
effect of the calls that ended before the cut, plus - or not - the effect of a call that was
in flight. So "crash after event k" = a new store with the first k events of an
uninterrupted run, and a ledger built to match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chainlab.runtime import RunState
from chainlab.store import Event, MemoryStore, RunRecord, SQLiteStore
from tests.durability.chainlib import Ledger
from tests.durability.harness import Snapshot

EFFECT_FREE = frozenset({"compute", "noop", "boom", "check", "batch",
                         "agent:clerk"})  # (a model turn changes nothing in the world)


def new_store(kind: str) -> MemoryStore | SQLiteStore:
    return MemoryStore() if kind == "memory" else SQLiteStore(":memory:")


async def crashed_store(kind: str, record: RunRecord,
                        events: list[Event]) -> MemoryStore | SQLiteStore:
    """A store holding ``record`` and the committed ``events`` (all of epoch 1), with the
    status the runtime committed along with them (the fold's)."""
    store = new_store(kind)
    store.create_run(record.with_(status="running", epoch=1))
    if events:
        status = RunState.from_events(record.run_id, events).status
        store.append(record.run_id, 1, events, str(status) if status else None)
        await store.flush(record.run_id, 1)
    return store


def world_at(prefix: list[Event], outputs: dict[str, Any], in_flight_done: bool,
             path: Path) -> Ledger:
    """The ledger as it was when the process died after ``prefix``: one line per call that
    ended, and one per call in flight when ``in_flight_done``."""
    ledger = Ledger(path, fsync=False)  # nothing dies here: the page cache is the world
    for rec in RunState.from_events("run", prefix).attempts:
        if rec.status == "running" and not in_flight_done:
            continue
        effect = rec.tool not in EFFECT_FREE
        out = outputs.get(rec.step_id) if effect and rec.kind == "call" else None
        if effect and rec.kind == "compensation" and any(
                e["effect"] and e["key"] == rec.idempotency_key for e in ledger.read()):
            effect = False  # an idempotent compensation repeated: the world changed once
        ledger.write(step=rec.step_id, tool=rec.tool, key=rec.idempotency_key, effect=effect,
                     epoch=1, attempt=rec.attempt, pid=0, out=out, kind=rec.kind)
    return ledger


def open_calls(prefix: list[Event]) -> bool:
    return any(a.status == "running" for a in RunState.from_events("run", prefix).attempts)


def final_snapshot(store: MemoryStore | SQLiteStore, ledger: Ledger) -> Snapshot:
    view = None
    if isinstance(store, SQLiteStore):
        view = store.query("SELECT step_id, attempt, kind, status, idempotency_key "
                           "FROM attempts WHERE run_id = 'run'")
    return Snapshot(store.load_events("run"), ledger.read(), view,
                    str(store.get_run("run").status))
