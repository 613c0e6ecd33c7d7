"""The write path shared by the SQL stores: group commit, and the durability barrier the
runtime awaits.

``append`` only queues. What is queued is committed as ONE transaction per batch (group
commit) by whoever commits next:

* the **writer thread** (:class:`GroupCommitWriter`), for what nobody waits for (an
  effect-free step's events), so the event loop never spends time on them; and
* for a SQLite file, the **caller of a flush**, on its own thread, when the writer thread is
  not committing at that moment (``inline``): the write-ahead barrier before an unsafe call
  then costs one commit and no hand-off to another thread and back (two thread wake-ups,
  ~50 us here, a third of what the commit itself costs). A flush awaited on an event loop
  does it at the loop's next turn (:meth:`GroupCommitWriter.wait`), so every flush of that
  turn shares the commit (eight workers reaching their write-ahead together: one commit),
  and never waits for a lock: a database another process is writing (SQLITE_BUSY) or a
  batch larger than :data:`INLINE_MAX` goes to the writer thread instead.

An append on a thread that runs an event loop asks that loop for one look at the end of its
turn (``call_soon``) instead of waking the writer thread each time: a flush waiting then
commits inline, else the writer thread is woken for the batch. An append on any other thread,
or one that finds :data:`SPILL` appends waiting, wakes the writer thread at once.

``await flush(run_id, epoch)`` waits until everything queued before it is committed, then
raises what was recorded for that run and epoch: StaleEpochError when a newer epoch took the
run over, the StoreError that lost a batch. SQLiteStore and PostgresStore differ only in how
they open a connection and what one transaction does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from chainlab.errors import StoreError
from chainlab.events.event import Event
from chainlab.store.base import raise_if_refused
from chainlab.store.sql_rows import Append

__all__ = ["INLINE_MAX", "SPILL", "GroupCommitWriter", "WriterStore"]

log = logging.getLogger(__name__)

#: appends waiting that wake the writer thread at once, even from a loop that has not
#: yielded yet (a long stretch of effect-free steps is committed as it goes)
SPILL = 256
#: the most appends a flush commits on its own thread; more go to the writer thread (the
#: loop is not held up by one large batch)
INLINE_MAX = 256

# a waiter: (the last ticket it waits for, its loop or None, its future or threading.Event)
_Waiter = tuple[int, "asyncio.AbstractEventLoop | None", Any]


class GroupCommitWriter(threading.Thread):
    """The queue of appends and the thread that commits what nobody commits inline.

    ``commit(appends)`` runs one batch on this thread; ``inline(appends)``, when given, runs
    one on the caller's thread and returns False when it could not start (the database is
    busy: nothing was written, the writer thread takes the batch). Each append gets a ticket;
    a flush waits for the tickets handed out before it, committed by either side. One batch
    is committed at a time, in order (``_committing``)."""

    def __init__(self, name: str, commit: Callable[[list[Append]], None],
                 start: Callable[[], None] | None = None,
                 finish: Callable[[], None] | None = None,
                 failed: dict[tuple[str, int], StoreError] | None = None,
                 inline: Callable[[list[Append]], bool] | None = None):
        super().__init__(name=name, daemon=True)
        self._failed = failed  # where a commit that raised (a chainlab bug) is recorded
        self.batches = 0  # batches committed, either side (transactions, for benchmarks)
        self._commit = commit
        self._inline = inline
        self._on_start = start
        self._on_finish = finish
        self._lock = threading.Lock()  # guards the fields below
        self._pending: list[Append] = []
        self._appended = 0  # tickets handed out (one per append)
        self._committed = 0  # every ticket up to this one is committed (or refused)
        self._waiters: list[_Waiter] = []
        self._looks: set[asyncio.AbstractEventLoop] = set()  # loops that will look
        self._eager = 0  # flushes on a loop about to look (:meth:`wait`)
        self._stopping = False
        self._committing = threading.Lock()  # held by whoever commits a batch
        self._work = threading.Event()  # the thread has something to do

    # ------------------------------------------------------------------ queueing
    def put(self, item: Append) -> None:
        """Queue one append (never blocks on I/O)."""
        loop = _running_loop()
        with self._lock:
            self._pending.append(item)
            self._appended += 1
            if loop is not None and len(self._pending) <= SPILL:
                if loop in self._looks:
                    return
                self._looks.add(loop)
            else:
                loop = None
        if loop is None:
            self._work.set()
        else:
            loop.call_soon(self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """At the end of a loop's turn: commit here when a flush waits (else, or when that
        cannot be done now, the writer thread commits)."""
        with self._lock:
            self._looks.discard(loop)
            if not self._pending:
                return
            here = self._inline is not None and bool(self._eager or self._waiters) \
                and len(self._pending) <= INLINE_MAX
        if not (here and self._commit_here()):
            self._work.set()

    # ------------------------------------------------------------------ waiting
    async def wait(self) -> None:
        """Wait until what is queued now is committed: at the loop's next turn, its look
        commits here (with what every other flush of this turn queued) when it can, else
        this waits, without blocking the loop, for the writer thread."""
        loop = _running_loop()
        if loop is None:  # not asyncio (trio): wait in a worker thread
            import anyio

            await anyio.to_thread.run_sync(self.wait_sync)
            return
        with self._lock:
            target = self._appended
            if self._committed >= target:
                return
            self._eager += 1
            look = loop not in self._looks
            if look:
                self._looks.add(loop)
        if look:
            loop.call_soon(self._look, loop)
        try:  # one turn: the look (scheduled before this task's wake-up) runs first
            await asyncio.sleep(0)
        finally:
            with self._lock:
                self._eager -= 1
        with self._lock:
            if self._committed >= target:
                return
            fut = loop.create_future()
            self._waiters.append((target, loop, fut))
        self._work.set()  # the look could not commit here: the writer thread does
        await fut

    def wait_sync(self) -> None:
        """Block the calling thread until what is queued now is committed (committing it
        here when nobody else is)."""
        with self._lock:
            target = self._appended
            if self._committed >= target:
                return
        if self._inline is not None and self._commit_here():
            return
        done = threading.Event()
        with self._lock:
            if self._committed >= target:
                return
            self._waiters.append((target, None, done))
        self._work.set()
        done.wait()

    # ------------------------------------------------------------------ committing
    def _commit_here(self) -> bool:
        """Commit what is queued on the calling thread, unless a commit is under way or the
        database is busy (False: the writer thread must do it)."""
        if not self._committing.acquire(blocking=False):
            return False
        try:
            with self._lock:
                batch, self._pending = self._pending, []
                upto = self._appended
            if batch and not self._run(batch, inline=True):
                with self._lock:  # busy: nothing was written; back in front, in order
                    self._pending[:0] = batch
                return False
            ready = self._advance(upto)
        finally:
            self._committing.release()
        _resolve(ready)
        return True

    def _commit_queued(self) -> bool:
        """On the writer thread: commit what is queued; False when nothing was."""
        with self._committing:
            with self._lock:
                batch, self._pending = self._pending, []
                upto = self._appended
            if batch:
                self._run(batch, inline=False)
            ready = self._advance(upto)
        _resolve(ready)
        return bool(batch)

    def _run(self, batch: list[Append], *, inline: bool) -> bool:
        """One transaction (False: an inline one could not start, nothing written). A
        commit that raises (a chainlab bug) fails its writers instead of hanging them."""
        try:
            if inline:
                assert self._inline is not None
                if self._inline(batch) is False:
                    return False
            else:
                self._commit(batch)
        except Exception as exc:
            log.exception("%s: a commit raised; its writers fail from now on", self.name)
            if self._failed is not None:
                for item in batch:
                    self._failed.setdefault((item[1], item[2]), StoreError(
                        f"could not commit run {item[1]!r}'s events: {exc!r} "
                        "(a chainlab bug: please report it)"))
        self.batches += 1
        return True

    def _advance(self, upto: int) -> list[_Waiter]:
        """Tickets up to ``upto`` are committed: the waiters that may go on now."""
        with self._lock:
            self._committed = max(self._committed, upto)
            if not self._waiters:
                return []
            ready = [w for w in self._waiters if w[0] <= self._committed]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > self._committed]
            return ready

    # ------------------------------------------------------------------ the thread
    def run(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            while True:
                self._work.wait()
                self._work.clear()
                while self._commit_queued():
                    pass
                if self._stopping:
                    with self._lock:
                        if self._pending:
                            continue
                    return
        finally:
            if self._on_finish is not None:
                self._on_finish()

    def stop(self) -> None:
        """Commit what is queued, then end the thread (and wait for it)."""
        self._stopping = True
        self._work.set()
        self.join()


#: the running event loop of this thread, or None (asyncio's own C helper: no exception)
_running_loop = asyncio.events._get_running_loop


def _resolve(ready: list[_Waiter]) -> None:
    """Let these waiters go on: a future on its loop (at once when that is this thread's),
    a thread's event."""
    if not ready:
        return
    here = _running_loop()
    for _, loop, waiter in ready:
        if loop is None:
            waiter.set()
        elif loop is here:
            if not waiter.done():
                waiter.set_result(None)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(_set_if_pending, waiter)


def _set_if_pending(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class WriterStore:
    """The queueing half of a SQL store: ``append``, ``flush``, ``flush_sync``, ``is_stale``
    and stopping the writer. A subclass sets the fields in ``_init_writes`` and provides
    ``_new_writer`` (and may refuse appends in ``_check_append``)."""

    _closed: bool
    _stale: dict[tuple[str, int], int | None]
    _failed: dict[tuple[str, int], StoreError]
    _saved: dict[str, int]  # run_id -> last seq this store committed
    _writer: GroupCommitWriter | None
    _writer_lock: threading.Lock

    def _init_writes(self) -> None:
        self._closed = False
        self._stale = {}
        self._failed = {}
        self._saved = {}
        self._writer = None
        self._writer_lock = threading.Lock()

    def _new_writer(self) -> GroupCommitWriter:
        raise NotImplementedError

    def _check_append(self) -> None:
        """Raise if this store takes no writes (closed; a read-only file)."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")

    def _get_writer(self) -> GroupCommitWriter:
        writer = self._writer
        if writer is None:
            with self._writer_lock:
                if self._closed:
                    raise StoreError(f"{self!r} is closed")
                if self._writer is None:
                    self._writer = self._new_writer()
                    self._writer.start()
                writer = self._writer
        return writer

    def append(self, run_id: str, epoch: int, events: Iterable[Event],
               run_status: str | None = None) -> None:
        self._check_append()
        self._get_writer().put(("append", run_id, epoch, tuple(events), run_status))

    async def flush(self, run_id: str, epoch: int) -> None:
        if self._writer is not None and not self._closed:
            await self._writer.wait()
        raise_if_refused(self._failed, self._stale, run_id, epoch)

    def flush_sync(self, run_id: str | None = None, epoch: int = 0) -> None:
        """Block until everything appended so far is committed (for inline readers, scripts
        and tests; the runtime's driver uses ``await flush(...)``). With ``run_id``, raise
        as :meth:`flush` does for that writer."""
        if self._writer is not None and not self._closed:
            self._writer.wait_sync()
        if run_id is not None:
            raise_if_refused(self._failed, self._stale, run_id, epoch)

    def is_stale(self, run_id: str, epoch: int) -> bool:
        return (run_id, epoch) in self._stale

    def _stop_writer(self) -> bool:
        """Mark the store closed and stop the writer after it committed what is queued.
        Returns False when it was closed already."""
        with self._writer_lock:
            if self._closed:
                return False
            self._closed = True
        if self._writer is not None:
            self._writer.stop()
        return True

    def _lost(self, run_id: str, first_unsaved: int | None = None) -> str:
        """What of a run's events is durable, for an error that loses the rest."""
        saved = self._saved.get(run_id)
        if saved is None and first_unsaved is not None:
            saved = first_unsaved - 1
        if saved is None:
            return f"nothing of run {run_id!r} was saved"
        return f"nothing after seq {saved} of run {run_id!r} was saved"
