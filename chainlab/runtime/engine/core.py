"""One run's state as the engine's parts see it: :class:`RunCore`.

The graph (its nodes, grown while the run goes: DESIGN §17), the scheduler, the folded state,
the args each step runs with, the timers and calls in flight, the stop in progress, and the
two ways every change leaves the engine: :meth:`RunCore.emit` (fold, append, notify) and
:meth:`RunCore.commit` (the durability barrier).

A step's way through the graph (:mod:`.flow`), an attempt of each kind (:mod:`.attempt`),
recovery (:mod:`.recovery`) and the saga (:mod:`.saga`) work on a ``RunCore``; the
:class:`~chainlab.runtime.engine.kernel.Kernel` is the ``RunCore`` that drives (its loop,
its workers, a person's controls) and is the only part that knows them all. This module
imports none of them, so the engine's imports read bottom-up with no circle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.events import RUN_END_KINDS, Event, EventKind, RunState, RunStatus
from chainlab.events.fold import FOLD
from chainlab.events.status import StopReason
from chainlab.runtime.engine.scheduler import Scheduler

if TYPE_CHECKING:
    from chainlab.plan.schema import RunOptions
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.compile import Graph, Node
    from chainlab.runtime.engine.executors import Executor
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["RunCore"]

log = logging.getLogger("chainlab.runtime")
_EMPTY: dict[str, Any] = {}
_new_event = tuple.__new__


class RunCore:
    """The state of one run that the engine's parts share (see the module docstring)."""

    # kind name -> how each kind of step runs, set by the class that drives (the Kernel:
    # attempt.kinds.KINDS; asked through attempt.kind.kind_of, which is typed: this module
    # names no kind, not even a type)
    kinds: Mapping[str, Any]

    def __init__(
        self,
        *,
        run_id: str,
        graph: Graph,
        state: RunState,
        options: RunOptions,
        context: dict[str, Any],
        store: Store,
        executor: Executor,
        clock: Clock,
        epoch: int,
        toolbox: Toolbox,
        priority: Callable[[str], float] | None = None,
    ):
        self.run_id = run_id
        self.graph = graph
        # the graph's nodes; a run that grows gets a dict of its own (copied at its first
        # growth: the compiled graph is shared by every run of the chain)
        self.nodes: dict[str, Node] = graph.nodes
        self.state = state
        self.steps = state.steps
        self.options = options
        self.context = context
        self.store = store
        self.executor = executor
        self.clock = clock
        self.epoch = epoch
        self.toolbox = toolbox
        self.seq = state.last_seq
        self.sched = Scheduler(
            graph.topology,
            max_concurrency=1 if options.mode == "sequential" else options.max_concurrency,
            pools=options.pools,
            breakpoints=options.breakpoints,
            priority=priority,
        )
        self.args: dict[str, dict[str, Any]] = {}
        # how references read this run, one per namespace: id(ns) -> (ns, resolve), made
        # by flow.resolver
        self.resolvers: dict[int, tuple[Any, Callable[[Any], Any]]] = {}
        # a parent (sub-chain, for_each, agent step) -> how many of its steps have not
        # finished: it settles when this reaches 0 (O(1) per child, whatever their number)
        self.open_children: dict[str, int] = {}
        self.timers: dict[str, anyio.CancelScope] = {}
        self.jobs: dict[str, Any] = {}  # step id -> the waiter of a waiting remote job
        self.calls: dict[int, anyio.CancelScope] = {}  # worker scopes
        # one entry per timed-out body still running (a step retried twice has two)
        self.background: list[str] = []
        self.stopping: StopReason | None = None
        self.stop_reason: str = ""
        self.retry_failed = True  # a rollback retries compensations that failed before
        self.subscribers: list[Callable[[Event], None]] = []
        # subscribers that also take the model's pieces as they arrive (never stored)
        self.delta_subscribers: list[Callable[[Any], None]] = []
        self.on_end: Callable[[], None] | None = None  # called once, when the run first ends
        self._changed = anyio.Event()
        self.settled_status: RunStatus | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self.to_reconcile: list[Node] = []  # interrupted calls the driver reconciles
        self.deferred_timers: list[tuple[Node, float]] = []
        # what each step is expected to spend (cost, tokens, seconds), for options.budget
        self.budget_estimates: dict[str, dict[str, float]] = {}
        # what a kind keeps between the attempts of a step in this drive, by step id (the
        # agent kind: the request frame it last recorded, its request hash's state)
        self.memo: dict[str, Any] = {}
        # the drive (chainlab.runtime.engine.driver): its workers, whether it runs, the
        # first error that stopped it, and the settling a wait() waits for
        self.workers = 0
        self.idle: list[anyio.Event] = []
        self.closing = False
        self.driving = False
        self.error: BaseException | None = None
        self._settled = anyio.Event()
        self.drive_done = anyio.Event()
        self.drive_done.set()

    # ================================================================== events
    def emit(
        self,
        kind: EventKind,
        step_id: str | None = None,
        attempt: int | None = None,
        payload: dict[str, Any] = _EMPTY,
        run_status: RunStatus | None = None,
    ) -> Event:
        """Record one change: fold it, append it to the store, tell subscribers."""
        if kind.__class__ is not EventKind:
            raise TypeError(f"emit takes an EventKind, got {kind!r}")
        self.seq = seq = self.seq + 1
        run_id, epoch = self.run_id, self.epoch
        # tuple.__new__ is Event._make without its Python frame (three events per step)
        ev = _new_event(Event, (run_id, seq, self.clock.now(), epoch, kind, step_id, attempt,
                                payload))
        state = self.state  # folded: RunState.apply without its frame (the same handler)
        state.last_seq = seq
        state.epoch = epoch
        FOLD[kind](state, ev)
        self.store.append(run_id, epoch, (ev,), run_status)
        if self.subscribers:
            self._notify(ev)
        if kind in RUN_END_KINDS and self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end()
        return ev

    def _notify(self, ev: Event) -> None:
        for cb in list(self.subscribers):
            try:
                cb(ev)
            except Exception:  # a broken subscriber must not break the run
                log.exception("event subscriber %r failed on %s; removing it", cb, ev)
                self.subscribers.remove(cb)

    def tell(self, piece: Any) -> None:
        """Hand a piece of a model's answer (a ``model_delta`` notification, never stored)
        to the run's ``deltas=True`` subscribers, named with this run's id."""
        if not self.delta_subscribers:
            return
        piece = replace(piece, run_id=self.run_id)
        for cb in list(self.delta_subscribers):
            try:
                cb(piece)
            except Exception:  # a broken subscriber must not break the turn
                log.exception("delta subscriber %r failed; removing it", cb)
                self.delta_subscribers.remove(cb)

    def poke(self) -> None:
        """Tell the drive loop to look again."""
        self._changed.set()

    async def wait_changed(self) -> None:
        """Wait for the next :meth:`poke` (the drive loop looks again after each)."""
        await self._changed.wait()
        self._changed = anyio.Event()

    async def commit(self) -> None:
        """Wait until every event emitted so far is durable (DESIGN §7). Raises
        StaleEpochError when this driver was fenced, StoreError when the store failed."""
        await self.store.flush(self.run_id, self.epoch)

    def commit_inline(self) -> None:
        """:meth:`commit` without giving up the loop (the thread waits for the store's
        writer): for a caller that must not suspend, on a store read inline."""
        self.store.flush_sync(self.run_id, self.epoch)

    # ================================================================== the drive
    def prepare_drive(self) -> None:
        """Mark the run as driven from the moment a driver is scheduled (not when it first
        runs), so a control call in between never starts a second driver."""
        self.driving = True
        self.drive_done = anyio.Event()

    async def flush_and_signal(self) -> None:
        await self.store.flush(self.run_id, self.epoch)
        self.signal_settled()

    def signal_settled(self) -> None:
        self.settled_status = self.state.status
        self._settled.set()
        self._settled = anyio.Event()

    async def wait_settled(self) -> None:
        await self._settled.wait()

    # ================================================================== the graph
    def add_nodes(self, nodes: Iterable[Node]) -> list[str]:
        """Put grown steps (their ``steps_added`` is already recorded) into the graph and
        the scheduler; returns their ids. Blocked until their level starts
        (``sched.start``), as a sub-chain's steps are."""
        if self.nodes is self.graph.nodes:
            self.nodes = dict(self.nodes)
        added, step = self.nodes, self.state.step
        entries: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        for node in nodes:
            added[node.id] = node
            entries[node.id] = (node.deps, node.order)
            step(node.id)  # (a grown sub-chain's steps have no state until they do something)
        self.sched.grow(entries)
        return list(entries)

    # ================================================================== workers, stopping
    def wake_workers(self, reserve: int) -> None:
        """Make sure enough workers look at the scheduler (``reserve``: workers already
        about to look, e.g. the caller). The driving :class:`Kernel` starts them."""
        raise NotImplementedError

    def start_stopping(self, why: StopReason, reason: str) -> None:
        """Release nothing new; cancel back-off timers; running steps finish."""
        if self.stopping:
            return
        self.stopping = why
        self.stop_reason = reason
        self.sched.stop()
        self.settled_status = None  # wait() must wait for the end of the stop, not return
        # the status (e.g. suspended) it had before
        for scope in list(self.timers.values()):
            scope.cancel()
        self.poke()

    def waiting(self) -> dict[str, str]:
        return self.state.waiting()
