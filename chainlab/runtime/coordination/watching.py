"""``WatchedRun``: the handle of a run that ANOTHER process drives, followed through the store.

Its state is the same fold as everywhere (:func:`chainlab.events.fold.read_run` for what is
stored, then :meth:`RunState.apply` for each event :meth:`Runtime.watch` yields), so a
front end (``chainlab watch``, ``%chain watch``) shows it with the views it uses for a run
it drives. Decisions (approve / reject / resolve) go through :meth:`Runtime.decide` (to the
live driver through the store, or this process takes the run over when none is alive);
controls that need the driver (pause, step, cancel, rollback, breakpoints) raise
RunNotActiveError naming who drives the run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunNotActiveError
from chainlab.events import RUN_END_KINDS, RUN_TERMINAL, Event, RunState, RunStatus, read_run
from chainlab.plan.schema import Chain
from chainlab.runtime.run import Run, RunResult
from chainlab.store.base import Notifier, RunRecord

if TYPE_CHECKING:
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.runtime.host import Host
    from chainlab.store.base import DriverInfo

__all__ = ["WatchedRun", "watch_events", "watch_run"]

_DRIVER_TTL_S = 1.0  # how long a read of the run's driver is shown before it is read again


async def watch_events(host: Host, run_id: str, *, after_seq: int = 0, follow: bool = False,
                       poll_interval: float = 0.05) -> AsyncIterator[Event]:
    """See :meth:`chainlab.runtime.Runtime.watch`: the run's committed events after
    ``after_seq``, in order, each once, until an event that ends the run (or, with
    ``follow``, until the caller stops). A run that has already ended with nothing after
    ``after_seq`` ends the stream at once."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) \
            or not 0 <= after_seq < 2**63:
        raise ValueError(f"after_seq must be a sequence number 0 <= after_seq < 2**63, got "
                         f"{after_seq!r}: pass the seq of the last event seen (0 for all)")
    store = host.store
    notifier = store if isinstance(store, Notifier) else None
    if notifier is not None:  # listen BEFORE the first read: no commit falls in between
        await host.run_io(notifier.wait_for_events, run_id, after_seq, 0.0)
    seen = after_seq
    idle = poll_interval
    while True:
        events = await host.run_io(store.load_events, run_id, seen)
        for ev in events:
            if ev.seq <= seen:  # never twice, whatever the store returns
                continue
            seen = ev.seq
            yield ev
            if not follow and ev.kind in RUN_END_KINDS:
                return
        if events:
            idle = poll_interval
            continue  # read on before waiting: more may be committed already
        if not follow:
            # the status commits with the run's last event: an ended run whose log has
            # nothing after `seen` will never have more (a stream begun after its end).
            # Its last events may have been committed between the read above and this
            # one: read once more before ending
            record = await host.run_io(store.get_run, run_id)
            if record.status in RUN_TERMINAL:
                for ev in await host.run_io(store.load_events, run_id, seen):
                    if ev.seq > seen:
                        seen = ev.seq
                        yield ev
                return
        if notifier is not None:
            await anyio.to_thread.run_sync(notifier.wait_for_events, run_id, seen,
                                           max(poll_interval, 1.0), abandon_on_cancel=True)
        else:
            await anyio.sleep(idle)
            idle = min(idle * 2, max(poll_interval, 1.0))


def watch_run(host: Host, run_id: str, *, poll_interval: float = 0.05) -> WatchedRun:
    """A :class:`WatchedRun` of ``run_id`` in ``host.store`` (a blocking read of what is
    stored; call :meth:`WatchedRun.start` or ``await run.wait()`` to follow it live).

    Raises RunNotFoundError for an unknown run, StoreError if the store cannot be read."""
    record, events, state = read_run(host.store, run_id)
    return WatchedRun(host, record, events, state, poll_interval=poll_interval)


class WatchedRun(Run):
    """A run driven elsewhere, followed live (``runtime.watch``) into the same fold.

    ``await run.wait()`` returns when the run ends, or (with ``settle_on_suspend``, the
    default, as for a driven run) when it waits for a person. ``subscribe(callback)`` gets
    every event once, in order, as it is committed by the driver.

    A subclass of :class:`~chainlab.runtime.run.Run` by behaviour, not by size: the same
    reads over a state that follows the store, verbs that go through ``Runtime.decide``.
    ``runtime`` is the Runtime (its decisions), ``host`` its parts (the store, liveness,
    the task its following runs in)."""

    def __init__(self, host: Host, record: RunRecord, events: list[Event],
                 state: RunState, *, poll_interval: float = 0.05):
        super().__init__(host.owner, Chain.from_dict(record.chain), None, record)
        self.host = host
        self._static = state
        self._log = list(events)
        self._subscribers: list[Callable[[Event], None]] = []
        self._changed: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._following = False
        self.poll_interval = poll_interval
        self.settle_on_suspend = True
        self.error: BaseException | None = None  # what stopped the following (a store error)
        self.last_decision: str | None = None  # what Runtime.decide answered last
        self._driver: tuple[float, DriverInfo | None] | None = None  # (read at, driver)
        self._taken_over: list[Callable[[Run], None]] = []

    # ------------------------------------------------------------------ who drives it
    def driver(self) -> DriverInfo | None:
        """The run's driver as its heartbeats say (host, pid, epoch, last beat), or None
        when no driver beats for it (or the store keeps no heartbeats)."""
        now = time.monotonic()
        if self._driver is not None and now - self._driver[0] < _DRIVER_TTL_S:
            return self._driver[1]  # a redraw asks often; heartbeats come every few seconds
        info = self.host.store.driver_of(self.run_id)
        self._driver = (now, info)
        return info

    def driven_by(self) -> str:
        """Who drives the run, as a phrase: ``driven by pid 123 on host 'x' (epoch 4)``
        while that driver lives (its heartbeat is fresh; on this host, its process exists:
        the runtime's one rule, ``Liveness.live_driver``); else that its driver is gone, or
        that nobody drives it, and what a decision taken here then does (on a run of a
        worker fleet's queue: it is left to the fleet)."""
        queue = self.record.queue
        if queue is not None and self.status == RunStatus.SUSPENDED:  # it holds no worker
            return (f"no worker while it waits for a person (a decision taken here is left "
                    f"to the fleet of queue {queue!r})")
        info = self.driver()
        if self.status in RUN_TERMINAL:
            return "not driven (the run has ended)"
        if info is None and queue is not None:  # a worker fleet's run
            return (f"no worker right now (a decision taken here is left to the fleet of "
                    f"queue {queue!r})")
        takes = "a decision taken here takes the run over in this process"
        if info is None:
            return f"no live driver ({takes})"
        current = replace(self.record, status=self.status, epoch=info.epoch)
        if info.driver_id != self.host.liveness.driver_id \
                and self.host.liveness.live_driver(info, current) is None:
            age = info.age(time.time())
            return (f"its driver, {info.describe()}, is gone (no heartbeat for {age:.0f} s); "
                    f"{takes}")
        return f"driven by {info.describe()}"

    @property
    def following(self) -> bool:
        """True while new events are being read from the store."""
        return self._following

    # ------------------------------------------------------------------ following
    def start(self) -> None:
        """Follow the run in the background on the running loop (idempotent); nothing to do
        for a run that has ended."""
        if self._following or self.status in RUN_TERMINAL:
            return
        self._following = True
        self.host.spawn(self._pump)

    def stop(self) -> None:
        """Stop following (the widget was closed, the command was interrupted, a decision
        here took the run over): nothing more is read from now on."""
        if self._scope is not None:
            self._scope.cancel()  # (the reading task ends at its next wait)
            self._scope = None
            self._following = False

    async def _pump(self) -> None:
        scope = anyio.CancelScope()
        self._scope = scope
        try:
            with scope:
                async for ev in watch_events(self.host, self.run_id,
                                             after_seq=self.state.last_seq, follow=True,
                                             poll_interval=self.poll_interval):
                    self._apply(ev)
                    if self.status in RUN_TERMINAL:
                        break
        except Exception as exc:  # the store went away: say so to whoever waits
            self.error = exc
        finally:
            if self._scope is scope:  # (not a newer reading task's)
                self._scope = None
                self._following = False
            self._notify()

    def _apply(self, ev: Event) -> None:
        self.state.apply(ev)
        self._log.append(ev)
        for callback in list(self._subscribers):
            callback(ev)
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait(self) -> RunResult:
        """Follow the run until it ends (or suspends, with ``settle_on_suspend``). Raises
        the StoreError that stopped the following."""
        while True:
            if self.error is not None:
                raise self.error
            status = self.status
            if status in RUN_TERMINAL or (self.settle_on_suspend
                                          and status == RunStatus.SUSPENDED):
                return self.result()
            self.start()
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def subscribe(self, callback: Callable[[Any], None], *,
                  deltas: bool = False) -> Callable[[], None]:
        """Call ``callback(event)`` for every event read from now on; returns an
        unsubscribe function. ``deltas`` is taken and gives nothing more: a streamed model
        answer's pieces stay in the process that drives the run (each turn's text comes
        here with its event, when the turn is recorded)."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    async def events(self, *, history: bool = True) -> AsyncIterator[Event]:
        """The run's events (the stored ones first, with ``history``) until it ends."""
        async for ev in watch_events(self.host, self.run_id,
                                     after_seq=0 if history else self.state.last_seq,
                                     poll_interval=self.poll_interval):
            yield ev

    def history(self) -> list[Event]:
        """The events read so far (stored, then followed)."""
        return list(self._log)

    def event_list(self) -> list[Event]:
        return list(self._log)

    # ------------------------------------------------------------------ decisions
    async def approve(self, step_id: str, args: dict[str, Any] | None = None,
                      note: str | None = None, *, by: str | None = None,
                      budget: dict[str, Any] | None = None) -> None:
        """Approve through :meth:`Runtime.decide` (``last_decision`` says how it went);
        ``budget`` raises the run's budget. Raises DecisionError with the driver's message
        when it refuses."""
        await self._decide(step_id, "approve", args=args, note=note, by=by, budget=budget)

    async def approve_all(self, step_id: str, note: str | None = None, *,
                          by: str | None = None) -> list[str]:
        """Approve every step waiting at or under ``step_id`` through
        :meth:`Runtime.approve_all` (each with its own args). Returns the ids approved."""
        done: list[str] = await self.runtime.approve_all(self.run_id, step_id, note=note, by=by)
        self.last_decision = "applied" if done else self.last_decision
        self._after_decision()
        return done

    async def reject(self, step_id: str, reason: str = "rejected", *,
                     by: str | None = None) -> None:
        """Reject through :meth:`Runtime.decide`."""
        await self._decide(step_id, "reject", reason=reason, by=by)

    async def resolve(self, step_id: str, *, output: Any = None, retry: bool = False,
                      fail: bool = False, note: str | None = None,
                      by: str | None = None) -> None:
        """Resolve an in-doubt step through :meth:`Runtime.decide`."""
        await self._decide(step_id, "resolve", output=output, retry=retry, fail=fail, note=note,
                           by=by)

    async def _decide(self, step_id: str, action: str, **fields: Any) -> None:
        self.last_decision = await self.runtime.decide(self.run_id, step_id, action, **fields)
        self._after_decision()

    def _after_decision(self) -> None:
        live = self.runtime.get_run(self.run_id)
        if live.active:  # nobody drove it: this process took it over and drives it now
            self.stop()
            for callback in list(self._taken_over):
                callback(live)

    def on_taken_over(self, callback: Callable[[Run], None]) -> None:
        """Call ``callback(live_run)`` when a decision taken here took the run over (no
        driver was alive): from then on this process drives it, through ``live_run``."""
        self._taken_over.append(callback)

    def _k(self) -> Kernel:
        raise RunNotActiveError(
            f"run {self.run_id!r} is {self.driven_by()}, not by this process: "
            "pause, step, continue, cancel, rollback and breakpoints act in the driving "
            "process; approve / reject / resolve work here (they go through the store)",
            run_id=self.run_id, status=str(self.status))

    def __repr__(self) -> str:
        return f"<WatchedRun {self.run_id} {self.chain.name!r} {self.status}>"
