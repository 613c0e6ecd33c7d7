"""Runs that stand still while no step of theirs waits for a person's decision, and what moves
each on (DESIGN §13, §19): what ``chainlab show``, ``approve``, ``approvals``, ``runs`` and
the notebook's inbox say besides the waiting decisions.

* ``no_driver``: the run is in progress (running, compensating, paused) but nobody drives
  it: its driver's process is gone or its heartbeat lapsed (a killed ``chainlab approve
  --all``, a crashed kernel), or no driver ever beat for it. Nothing moves it until a
  process takes it over: ``chainlab resume RUN`` (``%chain resume``, ``runtime.resume``);
  a queue's run is also taken over by the next worker of its queue.
* ``key_held``: a queued run whose concurrency key another run holds (in progress or
  suspended: one run per key at a time, :data:`chainlab.store.queue.KEY_HELD`). It starts
  when that run ends; what the holder waits for (a confirmation, an in-doubt step, nobody
  driving it) is said with it, and what moves the holder on is what moves this run on.

Whether a driver lives is the runtime's one rule, :meth:`Liveness.live_driver`; a run this
runtime drives never stands still. Each :class:`Stall` names the move (``action`` on
``action_run`` / ``action_step``) as data, so each front end spells its own command.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from chainlab.errors import RunNotFoundError
from chainlab.events import read_run
from chainlab.events.status import RunStatus
from chainlab.runtime.coordination.inbox import waiting_in
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.store.base import RunRecord, Store
from chainlab.store.queue import IN_PROGRESS, KEY_HELD

__all__ = ["STALLABLE", "Stall", "StallKind", "stall_of", "stalls"]

StallKind = Literal["no_driver", "key_held"]
#: the statuses of a run that may stand still: in progress (a driver moves it) or queued
STALLABLE = (*IN_PROGRESS, RunStatus.QUEUED.value)


@dataclass(frozen=True, slots=True)
class Stall:
    """A run that stands still and what moves it on.

    ``kind``: ``no_driver`` or ``key_held`` (module docstring); ``text``: what a person
    reads (``run R is running, but nobody drives it: ...``); ``action`` the decision that
    moves it on (``resume``, ``approve``, ``resolve``; None: wait for the holder to end),
    on run ``action_run`` (and step ``action_step``: the holder's step). ``key`` and
    ``holder``: the concurrency key and the run that holds it (``key_held``)."""

    run_id: str
    chain: str
    kind: StallKind
    text: str
    action: str | None
    action_run: str
    action_step: str | None = None
    key: str | None = None
    holder: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (``chainlab runs --json``, ``chainlab approvals --json``)."""
        return asdict(self)

    def command(self, prefix: str = "chainlab", suffix: str = "") -> str:
        """The move as a command line (``chainlab resume R``; ``prefix="%chain"`` in a
        notebook; ``suffix``: e.g. ``--db PATH``), or "" when only waiting helps."""
        if self.action is None:
            return ""
        words = [prefix, self.action, self.action_run,
                 *((self.action_step,) if self.action_step else ())]
        return " ".join(words) + suffix


def stalls(store: Store, liveness: Liveness, run_ids: Iterable[str] | None = None, *,
           now: float | None = None) -> list[Stall]:
    """The runs of ``store`` (or the runs ``run_ids``) that stand still, in the store's
    order. One read of the run list; a key's holder is folded once to say what it waits
    for. Raises StoreError if the store cannot be read."""
    records = store.list_runs(None)
    wanted = None if run_ids is None else set(run_ids)
    now = time.time() if now is None else now
    holders = _holders(records)
    out: list[Stall] = []
    told: dict[str, Stall | None] = {}  # a holder's own stall, read once
    for record in records:
        if wanted is not None and record.run_id not in wanted:
            continue
        found = _stall(store, liveness, record, holders, told, now)
        if found is not None:
            out.append(found)
    return out


def stall_of(store: Store, liveness: Liveness, run_id: str, *,
             now: float | None = None) -> Stall | None:
    """Run ``run_id``'s stall, or None when it does not stand still. Raises
    RunNotFoundError, StoreError."""
    record = store.get_run(run_id)
    if record.status not in STALLABLE:
        return None
    if record.status != RunStatus.QUEUED:  # (no other run needs to be read)
        return _no_driver(liveness, record, time.time() if now is None else now)
    found = stalls(store, liveness, [run_id], now=now)
    return found[0] if found else None


def _holders(records: Iterable[RunRecord]) -> dict[str, RunRecord]:
    """``{key: the run that holds it}`` (the oldest, should there be two)."""
    out: dict[str, RunRecord] = {}
    for record in sorted(records, key=lambda r: r.created_at):
        if record.concurrency_key is not None and record.status in KEY_HELD:
            out.setdefault(record.concurrency_key, record)
    return out


def _stall(store: Store, liveness: Liveness, record: RunRecord,
           holders: Mapping[str, RunRecord], told: dict[str, Stall | None],
           now: float) -> Stall | None:
    if record.status in IN_PROGRESS:
        return _no_driver(liveness, record, now)
    key = record.concurrency_key
    holder = holders.get(key) if key is not None else None
    if record.status != RunStatus.QUEUED or holder is None or holder.run_id == record.run_id:
        return None
    if holder.run_id not in told:
        told[holder.run_id] = (_no_driver(liveness, holder, now) if holder.status in IN_PROGRESS
                               else None)
    what, action, step = _what_holds(store, holder, told[holder.run_id])
    return Stall(record.run_id, record.chain_name, "key_held",
                 f"run {record.run_id} is queued: its concurrency key {key!r} is held by run "
                 f"{holder.run_id}, which {what}; it starts when that run ends",
                 action, holder.run_id, step, key, holder.run_id)


def _no_driver(liveness: Liveness, record: RunRecord, now: float) -> Stall | None:
    """The stall of an in-progress run nobody drives (None while a driver lives, or when
    this runtime is its driver). With no driver row, the run's last write stands for a
    heartbeat (a driver's first beat comes a moment after its start)."""
    driver = record.driver
    if driver is not None and (driver.driver_id == liveness.driver_id
                               or liveness.live_driver(driver, record, now) is not None):
        return None
    if driver is None:
        quiet = now - record.updated_at
        if quiet < liveness.stale_after_s:
            return None
        gone = f"no driver beats for it (nothing written for {quiet:.0f} s)"
    else:
        gone = (f"its driver, {driver.describe()}, is gone (no heartbeat for "
                f"{driver.age(now):.0f} s)")
    fleet = (f"; a worker of queue {record.queue!r} takes it over when one runs"
             if record.queue is not None else "")
    return Stall(record.run_id, record.chain_name, "no_driver",
                 f"run {record.run_id} is {record.status}, but nobody drives it: {gone}"
                 f"{fleet}", "resume", record.run_id)


def _what_holds(store: Store, holder: RunRecord, stalled: Stall | None
                ) -> tuple[str, str | None, str | None]:
    """What the key's holder is doing, as ``(phrase, action, step)``: the move that ends it."""
    if stalled is not None:
        return f"is {holder.status} with nobody driving it", "resume", None
    if holder.status != RunStatus.SUSPENDED:
        return f"is {holder.status}", None, None
    try:
        waiting = waiting_in(*read_run(store, holder.run_id))
    except RunNotFoundError:  # (gone since the listing)
        waiting = []
    if not waiting:
        return "is suspended", None, None
    first = waiting[0]
    more = f" (and {len(waiting) - 1} more)" if len(waiting) > 1 else ""
    if first.kind == "in_doubt":
        return (f"is suspended: its step {first.step_id!r} is in doubt{more}", "resolve",
                first.step_id)
    return (f"is suspended: its step {first.step_id!r} waits for a confirmation{more}",
            "approve", first.step_id)
