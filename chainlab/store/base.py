"""The Store protocol and the records it keeps (runs and their events).

The event log is the source of truth: a run's steps, attempts and compensations are folds of
its events (``chainlab.events.fold``). A store keeps runs and events, appends events in
order, refuses writes from a stale epoch, and tells when appended events are durable.

Writes are ``append`` (non-blocking, ordered) plus ``await flush(...)`` (durable barrier):
the runtime flushes before every side-effecting call (write-ahead) and whenever a run stops
or suspends, so group commit never weakens what a person or a crash can observe.
Reads are plain blocking calls (cheap; the runtime calls them from a worker thread).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from chainlab.events.event import Event

__all__ = ["Event", "RunRecord", "Store"]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored: identity, status, owner epoch, and what is needed to resume it."""

    run_id: str
    chain_name: str
    status: str
    epoch: int
    created_at: float
    updated_at: float
    chain: dict[str, Any]
    chains: dict[str, dict[str, Any]] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def lineage(self) -> str | None:
        """``RUN@SEQ`` this run was forked from (None for a run that was not forked)."""
        parent = self.meta.get("forked_from")
        return None if parent is None else f"{parent}@{self.meta.get('forked_at_seq', '?')}"

    def with_(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)


@runtime_checkable
class Store(Protocol):
    """Where runs and events live. Implementations: MemoryStore, SQLiteStore."""

    #: True when reads block on I/O (the runtime then calls them from a worker thread)
    blocking: bool

    def create_run(self, record: RunRecord) -> None:
        """Insert a new run (epoch as given). Raises StoreError if the id exists."""

    def claim(self, run_id: str, expected_epoch: int, expected_seq: int | None = None) -> int:
        """Compare-and-swap the run's epoch from ``expected_epoch`` to the next one and return
        it. With ``expected_seq``, the run's last committed event must also still be that one
        (check-and-claim in one step: the state a caller decided on is the state it owns).
        Raises StaleEpochError if the epoch (or the log) moved, RunNotFoundError if unknown."""

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        """Queue events (in order) written by the owner of ``epoch``; optionally set the run's
        status with them, atomically. Never blocks and never does I/O on the caller's thread;
        errors surface in :meth:`flush`. Once one write of ``(run_id, epoch)`` is refused,
        every later one is too (the log never has a gap)."""

    async def flush(self, run_id: str, epoch: int) -> None:
        """Wait until everything appended so far for the run is durable.

        Raises StaleEpochError if a write of ``epoch`` was refused because a newer owner
        exists, RunNotFoundError if the run does not exist, StoreError if a write could not
        be committed. Once raised, it raises for that ``(run_id, epoch)`` forever."""

    def is_stale(self, run_id: str, epoch: int) -> bool:
        """True once a write of that epoch has been refused as stale (cheap, non-blocking)."""

    def get_run(self, run_id: str) -> RunRecord:
        """The run record. Raises RunNotFoundError."""

    def list_runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first."""

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        """Committed events of the run with ``seq > after_seq``, in order."""

    def close(self) -> None:
        """Flush and release resources."""
