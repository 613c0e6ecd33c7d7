"""The store protocols and the records they keep (runs, events, drivers, decision requests).

What the runtime calls, split by job: :class:`RunLog` (runs and their event log),
:class:`Drivers` (heartbeats) and :class:`Mailbox` (decisions sent to a run's driver), together
:class:`Store`; and one optional capability, :class:`Notifier` (wake a waiter on commit
instead of polling), checked with ``isinstance`` (every protocol is runtime-checkable).

The event log is the source of truth: a run's steps, attempts and compensations are folds of
its events (``chainlab.events.fold``). A store keeps runs and events, appends events in
order, refuses writes from a stale epoch, and tells when appended events are durable.

Writes are ``append`` (non-blocking, ordered) plus ``await flush(...)`` (durable barrier):
the runtime flushes before every side-effecting call (write-ahead) and whenever a run stops
or suspends, so group commit never weakens what a person or a crash can observe.
Reads are plain blocking calls (cheap; the runtime calls them from a worker thread).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from chainlab.errors import StaleEpochError, StoreError
from chainlab.events.event import Event

__all__ = ["ADHOC_META", "FROM_META", "MAX_RUN_ID", "REQUEST_ACTIONS", "REQUEST_COLUMNS",
           "REQUEST_OUTCOMES", "DecisionRequest",
           "DriverInfo", "Drivers", "Event", "Mailbox", "Notifier", "RunLog", "RunRecord",
           "Store", "answered_twice", "check_outcome", "check_request", "check_run_id",
           "payload_text",
           "raise_if_refused", "request_from_row", "unknown_request"]

#: what a decision request asks for, and how its driver answered it
REQUEST_ACTIONS = ("approve", "reject", "resolve", "complete_job")  # complete_job: issue 27
REQUEST_OUTCOMES = ("applied", "refused")


@dataclass(frozen=True, slots=True)
class DriverInfo:
    """Who drives a run: ``driver_id`` (one per Runtime), ``host``, ``pid``, the ``epoch`` it
    holds and ``beat_at``, the time (``time.time()`` of the driver's host) of its last
    heartbeat."""

    driver_id: str
    host: str
    pid: int
    epoch: int = 0
    beat_at: float = 0.0
    worker: str | None = None  # the fleet worker's name, when a worker drives the run

    def age(self, now: float) -> float:
        """Seconds since the last heartbeat (never negative)."""
        return max(0.0, now - self.beat_at)

    def describe(self) -> str:
        """``pid 123 on host 'x' (epoch 4)``; for a fleet worker ``worker 'w2' on host 'x'
        (pid 123, epoch 4)``."""
        if self.worker:
            return (f"worker {self.worker!r} on host {self.host!r} (pid {self.pid}, epoch "
                    f"{self.epoch})")
        return f"pid {self.pid} on host {self.host!r} (epoch {self.epoch})"


#: the key of a run's meta that keeps the definition of the run's own agent, an ad-hoc agent a
#: front end asked (:mod:`chainlab.agent.adhoc` writes and reads it): the runtime compiles
#: such a run with that agent over its toolbox (``runtime.preparing.toolbox_of``), and a
#: fork of the run keeps it. Named here, with the record, so that the runtime can tell such a
#: run without loading the agent package.
ADHOC_META = "adhoc_agent"
#: the key of a run's meta that keeps the ``MODULE:OBJ`` its agent was loaded from
#: (``--from``: a chainlab Agent, or a Pydantic AI / OpenAI Agents SDK agent converted); such
#: a run is compiled with that agent over its toolbox too, and a fork keeps it
FROM_META = "agent_from"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as stored: identity, status, owner epoch, and what is needed to resume it.

    ``queue``: the queue a worker fleet drains it from (None: not enqueued; DESIGN §19),
    ``concurrency_key``: its resolved key (one run per key at a time in the fleet).
    ``driver`` is read with the record, not stored with it: who drives the run at its
    current epoch right now (None when nobody does; ``driver.worker`` names a fleet worker)."""

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
    queue: str | None = None
    concurrency_key: str | None = None
    driver: DriverInfo | None = field(default=None, compare=False)

    @property
    def lineage(self) -> str | None:
        """``RUN@SEQ`` this run was forked from (None for a run that was not forked)."""
        parent = self.meta.get("forked_from")
        return None if parent is None else f"{parent}@{self.meta.get('forked_at_seq', '?')}"

    def with_(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """A person's decision sent to the process that drives a run, through the store.

    ``action`` is one of ``approve``, ``reject``, ``resolve``, ``complete_job`` (a remote
    job's completion); ``payload`` holds its arguments (``args``/``note``, ``reason``,
    ``output``/``retry``/``fail``/``note``, ``output``/``error``);
    ``by`` says who asked. The driver answers once: ``outcome`` ``applied`` or ``refused``
    with ``message`` (why). A request nobody answered by ``expires_at`` is refused as
    expired by the next driver that sees it."""

    run_id: str
    step_id: str
    action: str
    payload: dict[str, Any] = field(default_factory=dict)
    by: str | None = None
    created_at: float = 0.0
    expires_at: float | None = None
    request_id: int = 0
    outcome: str | None = None
    message: str | None = None
    answered_at: float | None = None

    @property
    def answered(self) -> bool:
        return self.outcome is not None


#: the longest run id a store takes (ids go into NOTIFY payloads, file names, URLs)
MAX_RUN_ID = 200


def check_run_id(run_id: object) -> str:
    """Raise ValueError unless ``run_id`` is a usable run id: 1 to 200 characters, none of
    them whitespace or a control character. The same rule on every store and in the
    runtime, checked when a run is created."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"a run id must be a non-empty string, got {run_id!r}")
    if len(run_id) > MAX_RUN_ID:
        raise ValueError(f"run id {run_id[:40]!r}... is {len(run_id)} characters long; a run "
                         f"id has at most {MAX_RUN_ID}")
    bad = next((c for c in run_id if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"run id {run_id[:60]!r} contains {bad!r}; a run id has no "
                         "whitespace or control characters (letters, digits, - _ . : are safe)")
    return run_id


def check_request(run_id: str, request: DecisionRequest) -> None:
    """Raise ValueError unless ``request`` is a new request for ``run_id`` (stores call it)."""
    if request.run_id != run_id:
        raise ValueError(f"request is for run {request.run_id!r}, posted to run {run_id!r}; "
                         "post it to the run it names")
    if request.action not in REQUEST_ACTIONS:
        raise ValueError(f"action must be one of {REQUEST_ACTIONS}, got {request.action!r}")


def check_outcome(outcome: str) -> None:
    """Raise ValueError unless ``outcome`` is ``applied`` or ``refused``."""
    if outcome not in REQUEST_OUTCOMES:
        raise ValueError(f"outcome must be one of {REQUEST_OUTCOMES}, got {outcome!r}")


#: the columns :func:`request_from_row` reads, in order (SQLite and PostgreSQL alike)
REQUEST_COLUMNS = ("request_id, run_id, step_id, action, payload, requested_by, created_at, "
                   "expires_at, outcome, message, answered_at")


def request_from_row(row: tuple[Any, ...] | Any) -> DecisionRequest:
    """A stored request (a row of :data:`REQUEST_COLUMNS`)."""
    return DecisionRequest(request_id=int(row[0]), run_id=row[1], step_id=row[2],
                           action=row[3], payload=json.loads(row[4]), by=row[5],
                           created_at=row[6], expires_at=row[7], outcome=row[8],
                           message=row[9], answered_at=row[10])


def payload_text(request: DecisionRequest) -> str:
    """The request's payload as JSON text. Raises ValueError when it is not JSON data."""
    try:
        return json.dumps(request.payload, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the payload of a decision request must be JSON data: {exc}; "
                         "pass plain dicts, lists, strings, numbers") from None


def unknown_request(request_id: int) -> StoreError:
    return StoreError(f"no decision request {request_id!r} in the store; ask "
                      "store.pending_requests(run_id) for the run's open ones")


def answered_twice(request_id: int, outcome: str) -> StoreError:
    return StoreError(f"decision request {request_id!r} was already answered ({outcome}); a "
                      "request is answered once: read it with store.get_request")


def raise_if_refused(failed: dict[tuple[str, int], StoreError],
                     stale: dict[tuple[str, int], int | None], run_id: str, epoch: int) -> None:
    """What a store's ``flush`` raises for a writer whose appends were not all kept: the
    error that lost them, or StaleEpochError once a newer epoch refused them."""
    key = (run_id, epoch)
    error = failed.get(key)
    if error is not None:
        raise error
    if key in stale:
        raise StaleEpochError(run_id, epoch, stale[key])


@runtime_checkable
class RunLog(Protocol):
    """Runs and their event log: what the runtime reads and writes for every run.

    Writes are ``append`` (non-blocking, ordered) plus ``await flush(...)`` (the durable
    barrier); reads are plain calls, blocking on I/O when ``blocking`` is true (the runtime
    then calls them from a worker thread)."""

    #: True when reads block on I/O (the runtime then calls them from a worker thread)
    blocking: bool

    def create_run(self, record: RunRecord, driver: DriverInfo | None = None,
                   events: Sequence[Event] = (), key: str | None = None) -> None:
        """Insert a new run (epoch and status as given) all or nothing, in ONE transaction
        with: ``driver`` as its driver (a run is never without a known driver, even before
        its first beat), ``events``, the opening of its log (written by the owner of
        ``record.epoch``; a run that is not queued is never stored without them), and
        ``key``, an idempotency key that names this run from now on (:meth:`run_for_key`).
        Nothing is stored when any part is refused. Raises RunExistsError if the id (or the
        key) is taken, StoreError if the events cannot be stored (e.g. text that is not
        valid Unicode), ValueError for a bad id (:func:`check_run_id`)."""

    def run_for_key(self, key: str) -> str | None:
        """The run an idempotency key names (None: the key was never used)."""

    def claim(self, run_id: str, expected_epoch: int, expected_seq: int | None = None,
              driver: DriverInfo | None = None) -> int:
        """Compare-and-swap the run's epoch from ``expected_epoch`` to the next one and return
        it. With ``expected_seq``, the run's last committed event must also still be that one
        (check-and-claim in one step: the state a caller decided on is the state it owns).
        ``driver`` is recorded as the run's driver at the new epoch in the same transaction.
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

    def flush_sync(self, run_id: str | None = None, epoch: int = 0) -> None:
        """Block the calling thread until every append queued so far (any run) is
        committed, for an inline reader that must see its run's latest events or a caller
        that cannot await (a store whose appends are committed at once does nothing). With
        ``run_id``, raise as :meth:`flush` does for ``(run_id, epoch)``."""

    def is_stale(self, run_id: str, epoch: int) -> bool:
        """True once a write of that epoch has been refused as stale (cheap, non-blocking)."""

    def get_run(self, run_id: str) -> RunRecord:
        """The run record. Raises RunNotFoundError."""

    def list_runs(self, limit: int | None = None, *,
                  experiment: str | None = None) -> list[RunRecord]:
        """Runs, newest first: the ordinary runs (an experiment's replays are kept out), or
        with ``experiment`` that experiment's runs (DESIGN §22)."""

    def load_events(self, run_id: str, after_seq: int = 0) -> list[Event]:
        """Committed events of the run with ``seq > after_seq``, in order."""

    def close(self) -> None:
        """Flush and release resources."""


@runtime_checkable
class Drivers(Protocol):
    """Who drives a run (DESIGN §13): heartbeats, fenced by the run's epoch."""

    def heartbeat(self, run_id: str, epoch: int, driver: DriverInfo) -> None:
        """Record that ``driver`` (its id, host and pid) drives the run at ``epoch``, beating
        now. Raises StaleEpochError if ``epoch`` is not the run's current one (a newer driver
        took over), RunNotFoundError if unknown."""

    def driver_of(self, run_id: str) -> DriverInfo | None:
        """The run's last recorded driver (None when none beats for it), with the name of
        its fleet worker when a worker drives it."""

    def clear_driver(self, run_id: str, driver_id: str) -> None:
        """Forget the run's driver if it is ``driver_id`` (a driver that stops cleanly)."""


@runtime_checkable
class Mailbox(Protocol):
    """Decisions sent to a run's driver by other processes, and the driver's answers."""

    def post_request(self, run_id: str, request: DecisionRequest) -> int:
        """Store a new decision request for the run's driver; returns its ``request_id``
        (increasing). Raises RunNotFoundError, ValueError for a malformed request."""

    def pending_requests(self, run_id: str, after_id: int = 0) -> list[DecisionRequest]:
        """Unanswered requests of the run with ``request_id > after_id``, oldest first."""

    def answer_request(self, request_id: int, epoch: int, outcome: str, message: str) -> None:
        """Answer a request (``outcome`` ``applied`` or ``refused``) as the run's driver at
        ``epoch``. Raises StaleEpochError if that epoch is stale, StoreError if the request
        is unknown or already answered, ValueError for another outcome."""

    def get_request(self, request_id: int) -> DecisionRequest:
        """The request as stored now (with its answer, once given). Raises StoreError."""


@runtime_checkable
class Store(RunLog, Drivers, Mailbox, Protocol):
    """Everything the runtime asks of a store: the run log, drivers and the mailbox.
    Implementations: MemoryStore, SQLiteStore, PostgresStore; a third-party store runs the
    contract suite in :mod:`chainlab.testing.store_contract`."""


@runtime_checkable
class Notifier(Protocol):
    """Optional: a store that can wake a waiter when something is committed (PostgreSQL's
    LISTEN/NOTIFY) instead of being polled. Each call blocks the calling thread for at most
    ``timeout`` seconds and returns whether it was woken (False: poll anyway); a call with
    ``timeout=0`` only starts listening, so that nothing committed afterwards is missed."""

    def wait_for_events(self, run_id: str, after_seq: int, timeout: float) -> bool:
        """Wait for an event of the run with ``seq > after_seq`` to be committed."""

    def wait_for_commit(self, seen: int, timeout: float) -> int:
        """Wait for events of ANY run to be committed after ``seen`` (the count the last
        call returned; -1 at first); returns the count now (the team inbox follows a
        store this way)."""

    def wait_for_requests(self, run_id: str, after_id: int, timeout: float) -> bool:
        """Wait for a decision request of the run with ``request_id > after_id``."""

    def wait_for_answer(self, request_id: int, timeout: float) -> bool:
        """Wait for the answer to request ``request_id``."""
