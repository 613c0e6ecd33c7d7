"""One follower of a run's COMMITTED event log per run, shared by every stream of it.

An SSE stream must replay exactly what the store holds (``id:`` is the event's seq: a
reconnect with ``Last-Event-ID`` gets the rest, nothing lost, nothing twice), so streams
never hand out an event that is only in memory: one that is emitted but not yet committed
would be lost if the server died before its commit, and its seq would be reused by the
run's next driver. A :class:`RunFeed` reads the log from the store, and 100 clients of one
run cost one read per batch, not 100.

When to read again: for a run this server drives, the run's own subscription wakes the feed
(then ``store.flush`` waits for that event's commit, usually a millisecond); for a run
another process drives, the feed polls the log by seq like :meth:`Runtime.watch` (every
``poll_s`` while events come, backing off to one read a second while none do) or, on
PostgreSQL, waits for the commit's NOTIFY.

A run this server drives also hands its feed the pieces of a streamed model answer as they
arrive (``model_delta``, DESIGN §24): never stored, they are kept only briefly (the last
:data:`DELTAS_KEPT`) and a stream gets those that arrive while it listens, never replayed.
A run another process drives has none here (its pieces stay in its driver's process).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import ChainlabError
from chainlab.events import MODEL_DELTA, RUN_END_KINDS, RUN_TERMINAL, Event
from chainlab.store.base import Notifier

if TYPE_CHECKING:
    from chainlab.runtime.run import Run
    from chainlab.runtime.runtime import Runtime

__all__ = ["DELTAS_KEPT", "Feeds", "RunFeed"]

log = logging.getLogger(__name__)
#: the pieces of streamed model answers a feed keeps for streams a little behind
DELTAS_KEPT = 1000


def _no_frame(_event: Event) -> bytes:
    return b""


class RunFeed:
    """The committed log of one run, read once and followed while anyone listens."""

    def __init__(self, runtime: Runtime, run_id: str, *, poll_s: float = 0.05,
                 idle_s: float = 1.0, encode: Callable[[Event], bytes] = _no_frame,
                 encode_delta: Callable[[Any], bytes] | None = None):
        self.runtime = runtime
        self.encode_delta = encode_delta
        self.deltas: list[bytes] = []  # the last pieces heard, encoded
        self.deltas_heard = 0  # how many were ever heard (a stream's cursor into them)
        self.run_id = run_id
        self.poll_s = poll_s
        self.idle_s = idle_s
        self.encode = encode
        self.events: list[Event] = []
        self.frames: list[bytes] = []  # each event encoded once, for all its streams
        self.seqs: list[int] = []  # bisect over seqs
        self.ended = False  # the run ended and its log holds nothing more
        self.error: BaseException | None = None
        self.listeners = 0
        self._changed = anyio.Event()
        self._wake = anyio.Event()
        self._subscribed: Run | None = None
        self._unsubscribe: list[object] = []
        self._running = False

    @property
    def last_seq(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    def after(self, seq: int) -> list[tuple[Event, bytes]]:
        """The events read so far with a seq above ``seq``, each with its frame."""
        i = bisect.bisect_right(self.seqs, seq)
        return list(zip(self.events[i:], self.frames[i:], strict=True))

    async def changed(self) -> None:
        """Wait until the feed read something new, ended, or failed."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _add(self, events: list[Event]) -> None:
        if events:
            self.events += events
            self.seqs += [ev.seq for ev in events]
            self.frames += [self.encode(ev) for ev in events]
            self._notify()

    def wake(self, _event: Event | None = None) -> None:
        self._wake.set()

    def heard(self, item: Any) -> None:
        """What the driven run tells: an event wakes the pump (it reads the committed log);
        a model's piece is kept for the streams listening now."""
        if getattr(item, "kind", None) != MODEL_DELTA:
            self.wake()
            return
        if self.encode_delta is None:
            return
        self.deltas.append(self.encode_delta(item))
        self.deltas_heard += 1
        if len(self.deltas) > DELTAS_KEPT:
            del self.deltas[:len(self.deltas) - DELTAS_KEPT]
        self._notify()

    def deltas_after(self, heard: int) -> list[bytes]:
        """The pieces heard after the first ``heard`` (those still kept)."""
        new = self.deltas_heard - heard
        return self.deltas[-new:] if new > 0 else []

    async def pump(self) -> None:
        """Follow the log until the run ends (and its end event was read) or nobody
        listens. A store error ends the feed with ``error`` set."""
        self._running = True
        store = self.runtime.store
        notifier = store if isinstance(store, Notifier) else None
        idle = self.poll_s
        try:
            if notifier is not None:  # listen BEFORE the first read
                await self.runtime.run_io(notifier.wait_for_events, self.run_id, 0, 0.0)
            while self.listeners > 0:
                self._follow_live_run()
                # cleared BEFORE the read: an event emitted while it runs wakes the wait
                self._wake = anyio.Event()
                new = await self.runtime.run_io(store.load_events, self.run_id, self.last_seq)
                new = [ev for ev in new if ev.seq > self.last_seq]
                if new:
                    self._add(new)
                    idle = self.poll_s
                    continue
                if (self.events and self.events[-1].kind in RUN_END_KINDS) or \
                        (await self.runtime.run_io(store.get_run, self.run_id)).status \
                        in RUN_TERMINAL:
                    # the status commits with the run's last events, maybe just after the
                    # read above: one more read, then nothing more comes
                    last = await self.runtime.run_io(store.load_events, self.run_id,
                                                     self.last_seq)
                    self._add([ev for ev in last if ev.seq > self.last_seq])
                    self.ended = True
                    return
                idle = await self._wait(notifier, idle)
        except Exception as exc:
            self.error = exc
        finally:
            self._running = False
            self._stop_following()
            self._notify()

    async def _wait(self, notifier: Notifier | None, idle: float) -> float:
        """Sleep until woken (a run driven here emitted), a NOTIFY, or ``idle`` seconds; then
        make sure what woke us is committed. Returns the next idle time."""
        live = self._subscribed is not None
        with anyio.move_on_after(self.idle_s if live else idle):
            if notifier is not None and not live:
                await anyio.to_thread.run_sync(notifier.wait_for_events, self.run_id,
                                               self.last_seq, idle, abandon_on_cancel=True)
            else:
                await self._wake.wait()
        run = self._subscribed
        if run is not None and self._wake.is_set():
            with contextlib.suppress(ChainlabError):  # fenced: the next read tells
                await self.runtime.store.flush(self.run_id, run.epoch)
        return min(idle * 2, self.idle_s)

    def _follow_live_run(self) -> None:
        """Subscribe to the run's handle while this server drives it (a decision may have
        taken it over, a resume started it, a fork created it, since the last look)."""
        run = self.runtime.driven(self.run_id)
        if run is self._subscribed:
            return
        self._stop_following()
        if run is not None:
            self._unsubscribe = [run.subscribe(self.heard, deltas=True)]
            self._subscribed = run

    def _stop_following(self) -> None:
        for unsubscribe in self._unsubscribe:
            with contextlib.suppress(Exception):
                unsubscribe()  # type: ignore[operator]
        self._unsubscribe = []
        self._subscribed = None


class Feeds:
    """The feeds of the runs being streamed now (a feed lives while it has listeners)."""

    def __init__(self, runtime: Runtime, *, poll_s: float = 0.05,
                 encode: Callable[[Event], bytes] = _no_frame,
                 encode_delta: Callable[[Any], bytes] | None = None):
        self.runtime = runtime
        self.poll_s = poll_s
        self.encode = encode  # an event as its streams send it (the SSE frame)
        self.encode_delta = encode_delta  # a model's piece as its streams send it
        self.feeds: dict[str, RunFeed] = {}

    @contextlib.asynccontextmanager
    async def listen(self, run_id: str) -> AsyncIterator[RunFeed]:
        """The run's feed, followed while the body runs."""
        feed = self.feeds.get(run_id)
        if feed is None or feed.error is not None:
            feed = self.feeds[run_id] = RunFeed(self.runtime, run_id, poll_s=self.poll_s,
                                                encode=self.encode,
                                                encode_delta=self.encode_delta)
        feed.listeners += 1
        if not feed._running and not feed.ended:
            feed._running = True  # (before the task runs: the next listener must not start one)
            self.runtime.spawn(feed.pump)
        try:
            yield feed
        finally:
            feed.listeners -= 1
            if feed.listeners == 0:
                feed.wake()  # let its pump see that nobody listens any more
                if self.feeds.get(run_id) is feed:
                    del self.feeds[run_id]

    async def events(self, run_id: str, after: int, *,
                     opened: Callable[[int], object] | None = None, deltas: bool = False
                     ) -> AsyncIterator[list[tuple[Event, bytes]] | bytes | None]:
        """Every committed event of the run after seq ``after`` with its frame, in order,
        each once, in batches (what the feed read at once: a stream sends a batch in one
        write), until the run has ended and its log holds nothing more; then None once
        (the end of the log). The first end is not the last word: a run that succeeded and
        was rolled back later has the rollback's events after its ``run_succeeded``, and
        they are sent too. A run that has ended with nothing after ``after`` gives None at
        once. Raises what stopped the feed (a StoreError). ``opened`` is told the log's last
        seq once the feed has read it, before the first batch. ``deltas``: also the pieces
        of streamed model answers heard from now on, each as its frame (bytes), between the
        batches."""
        async with self.listen(run_id) as feed:
            heard = feed.deltas_heard
            while opened is not None and not (feed.events or feed.ended or feed.error):
                await feed.changed()
            if opened is not None:
                opened(feed.last_seq)
            seen = after
            while True:
                pieces = feed.deltas_after(heard) if deltas else []
                if pieces:
                    heard = feed.deltas_heard
                    yield b"".join(pieces)
                    continue
                batch = feed.after(seen)
                if batch:
                    seen = batch[-1][0].seq
                    yield batch
                    continue
                if feed.error is not None:
                    raise feed.error
                if feed.ended and feed.last_seq <= seen:
                    yield None
                    return
                await feed.changed()
