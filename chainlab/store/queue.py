"""The queue a worker fleet drains (DESIGN §19), store side: the :class:`Queue` protocol, the
records it keeps (:class:`WorkerInfo`, :class:`Claim`, :class:`QueueDepth`) and the ONE claim
algorithm both SQL stores run (:func:`claim_in`, over a :class:`Tx`).

A queued run is an ordinary run record (``create_run``) with ``status = "queued"``, a
``queue`` and no event yet; a worker's **claim** takes it in one transaction that also bumps
its epoch and records the claimant as its driver (so fencing starts at the claim). The same
claim takes the other two kinds of work of a queue:

``start``     a queued run (oldest first): it becomes ``running``; the claimant starts it
``takeover``  a run of the queue whose driver's heartbeat lapsed (or that was handed back: no
              driver row), the existing liveness rule as a re-enqueue through this one path:
              its status is kept; the claimant recovers it (fencing makes the old one inert)
``decided``   a ``suspended`` run with a decision waiting in its mailbox (a person decided it
              from anywhere): it becomes ``running``; the claimant applies the decision

A suspended run without a pending decision is claimed by nobody: it holds no worker.

Limits (checked in the claim, never after it):

* per queue across the fleet: ``set_queue_limit(queue, n)``: at most ``n`` runs of the queue
  in progress (``running``, ``compensating``, ``paused``); a takeover needs no new slot;
* per key: a run with a ``concurrency_key`` starts only while no other run with that key is in
  progress or suspended (one run per key at a time);
* per worker: the worker asks for a claim only with a free slot (``--concurrency``).

Two workers never spend the same slot: PostgreSQL takes the candidate row ``FOR UPDATE SKIP
LOCKED`` and, where a limit or a key applies, a transaction-scoped advisory lock on that queue
or key before counting again (DBOS switches to ``NOWAIT`` for the same reason); SQLite's
claim is one ``BEGIN IMMEDIATE`` transaction (one writer at a time); MemoryStore's is one
critical section. The SQL of both SQL stores is in :mod:`chainlab.store.sql_queue`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from chainlab.events.status import RunStatus
from chainlab.store.base import RunRecord

__all__ = ["CLAIM_KINDS", "DEFAULT_QUEUE", "IN_PROGRESS", "KEY_HELD", "QUEUE_NAME", "Claim",
           "Queue", "QueueDepth", "WorkerInfo", "check_queue_limit", "check_queue_name",
           "depths_from_rows"]

#: the queue of a run enqueued without naming one
DEFAULT_QUEUE = "default"
#: a queue name: a simple identifier (letters, digits, ``_ - .``, at most 64)
QUEUE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
#: what a claim took: a queued run, a lapsed driver's run, a suspended run a person decided
CLAIM_KINDS = ("start", "takeover", "decided")
#: statuses of a run that holds a slot of its queue (a worker drives it)
IN_PROGRESS = (RunStatus.RUNNING.value, RunStatus.COMPENSATING.value, RunStatus.PAUSED.value)
#: statuses of a run that holds its concurrency key (suspended too: one run per key at a time)
KEY_HELD = (*IN_PROGRESS, RunStatus.SUSPENDED.value)


def check_queue_limit(limit: object) -> int | None:
    """Raise ValueError unless ``limit`` is a queue limit: a whole number of runs, 1 or more,
    or None (no limit)."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise ValueError(f"a queue limit is a whole number of runs, 1 or more, got {limit!r} "
                         "(None: no limit)")
    return limit


def check_queue_name(queue: object) -> str:
    """Raise ValueError unless ``queue`` is a usable queue name (:data:`QUEUE_NAME`)."""
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise ValueError(f"queue name {queue!r} is not a simple identifier: a letter, then "
                         "up to 63 letters, digits, '_', '-' or '.' (e.g. 'default', "
                         "'billing-eu')")
    return queue


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker process of the fleet, as it registers and beats (``beat_worker``).

    ``worker_id`` is new at every start of a process (a restarted worker with the same
    ``name`` is another worker: it never inherits a claim); ``queues`` it serves, in its
    order of preference; ``concurrency`` how many runs it drives at once; ``state``
    ``running`` or ``draining`` (no new claims); ``note`` what it wants a person to know
    (e.g. the queued runs it cannot run: a tool its toolbox lacks). Read back by
    ``list_workers``, ``claimed`` lists the runs it drives now."""

    worker_id: str
    name: str
    host: str
    pid: int
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    concurrency: int = 1
    started_at: float = 0.0
    beat_at: float = 0.0
    state: str = "running"
    note: str = ""
    claimed: tuple[str, ...] = field(default=(), compare=False)

    def age(self, now: float | None = None) -> float:
        """Seconds since its last beat."""
        return max(0.0, (time.time() if now is None else now) - self.beat_at)


@dataclass(frozen=True, slots=True)
class Claim:
    """What :meth:`Queue.claim_next` took: the run ``record`` as it was before the claim (its
    status says what it was), the claimant's new ``epoch`` and the ``kind`` of work
    (:data:`CLAIM_KINDS`)."""

    record: RunRecord
    epoch: int
    kind: str


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One queue as ``chainlab workers`` and ``chainlab runs`` show it: runs ``queued``,
    ``in_progress`` (holding a slot), ``suspended`` (waiting for a person), and its fleet-wide
    ``limit`` (None: unlimited)."""

    queue: str
    queued: int = 0
    in_progress: int = 0
    suspended: int = 0
    limit: int | None = None

    def text(self) -> str:
        """``default: 12 queued · 3 in progress (limit 4) · 1 suspended``."""
        limit = f" (limit {self.limit})" if self.limit is not None else ""
        return (f"{self.queue}: {self.queued} queued · {self.in_progress} in progress{limit}"
                f" · {self.suspended} suspended")


@runtime_checkable
class Queue(Protocol):
    """A store a worker fleet can drain (MemoryStore, SQLiteStore, PostgresStore)."""

    def claim_next(self, worker: WorkerInfo, queue: str, *, stale_after_s: float,
                   skip: Collection[str] = ()) -> Claim | None:
        """Claim one run of ``queue`` for ``worker`` (a takeover or a decided run first,
        then the oldest queued run whose limits allow it), skipping the run ids in
        ``skip``; None when there is nothing to claim. One transaction: the epoch is bumped
        and ``worker`` recorded as the run's driver at it (``driver_id`` = ``worker_id``)."""

    def release_claim(self, run_id: str, epoch: int, status: str, worker_id: str) -> bool:
        """Hand a claim back untouched (the claimant cannot run it): the run's status goes
        back to ``status`` and its driver row is removed, if the run is still at ``epoch``.
        Returns whether it was."""

    def set_queue_limit(self, queue: str, limit: int | None) -> None:
        """Store the fleet-wide limit of runs in progress of ``queue`` (None: no limit)."""

    def queue_depths(self) -> list[QueueDepth]:
        """Every queue that has runs or a limit, by name."""

    def beat_worker(self, worker: WorkerInfo) -> None:
        """Register ``worker`` or record its beat now (with its state and note)."""

    def forget_worker(self, worker_id: str) -> None:
        """Remove a worker and the driver rows it holds: its runs can be claimed at once
        (a worker that stopped, or one found dead on its own host)."""

    def list_workers(self) -> list[WorkerInfo]:
        """Registered workers (live or not: compare ``beat_at``), each with ``claimed``."""


def depths_from_rows(rows: Sequence[tuple[Any, ...]],
                     limits: Sequence[tuple[Any, ...]]) -> list[QueueDepth]:
    """Queue depths from ``(queue, status, count)`` rows and ``(queue, limit)`` rows."""
    found: dict[str, dict[str, Any]] = {}
    for queue, status, count in rows:
        slot = found.setdefault(queue, {})
        name = {"queued": "queued", "suspended": "suspended"}.get(status, "in_progress")
        slot[name] = slot.get(name, 0) + int(count)
    for queue, limit in limits:
        found.setdefault(queue, {})["limit"] = None if limit is None else int(limit)
    return [QueueDepth(queue, **found[queue]) for queue in sorted(found)]
