"""``Takeovers``: every way a STORED run is taken up by a
:class:`~chainlab.runtime.Runtime`, a part the Runtime holds (it holds a
:class:`~chainlab.runtime.host.Host` and nothing else; new runs begin in
:mod:`chainlab.runtime.starts`): :meth:`~Takeovers.resume` (check-and-claim, or a takeover
of a stale driver's run) and :meth:`~Takeovers.claimed` (a run a fleet worker's claim took:
a queued run from its start, else from its stored state). Both rebuild the run's state
from its log (``_rebuilt``: a run without events is refused unless it was enqueued, never
driven from scratch) and hand it to ``Host.launch`` through ``_recover``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chainlab.agent.adhoc import run_toolbox
from chainlab.errors import RunStateError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, RunStatus
from chainlab.events.status import DrivePhase
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, compile_chain
from chainlab.runtime.engine.recovery import recover_now
from chainlab.runtime.history.estimates import recorded_order
from chainlab.runtime.run import Run
from chainlab.store.base import RunRecord
from chainlab.store.queue import Claim

if TYPE_CHECKING:
    from chainlab.runtime.host import Host

__all__ = ["Takeovers"]


class Takeovers:
    """Takes stored runs up in this process on ``host`` (the Runtime's ``resume`` and
    ``claimed`` delegate here; their docstrings are the Runtime's)."""

    def __init__(self, host: Host):
        self.host = host

    async def resume(
        self, run_id: str, *, check: Callable[[RunState], None] | None = None,
        force: bool = False,
    ) -> Run:
        """See :meth:`chainlab.runtime.Runtime.resume`."""
        host = self.host
        known = host.known(run_id)
        if known is not None and known.driving:
            return known
        record = await host.run_io(host.store.get_run, run_id)
        if record.status == RunStatus.QUEUED:
            raise RunStateError(
                f"run {run_id!r} is queued in {record.queue!r}: a worker of that queue starts "
                f"it (chainlab worker --queue {record.queue}); it has nothing to resume yet",
                run_id=run_id, status=str(record.status))
        if not force:
            driver = await host.run_io(host.store.driver_of, run_id)
            host.liveness.refuse_live(driver, record)
        chain, graph, opts = self._compiled(record)
        me = host.liveness.identity()
        if force:
            # a takeover: claim FIRST (the old driver, busy or not, is fenced from here on),
            # then read the log, which nobody can extend any more
            # (another process that claimed since `record` was read wins: StaleEpochError)
            epoch = await host.run_io(host.store.claim, run_id, record.epoch, None, me)
            events = await host.run_io(host.store.load_events, run_id)
            state = self._rebuilt(record, events, graph)
            if check is not None:
                try:
                    check(state)
                except BaseException:
                    await host.run_io(host.store.clear_driver, run_id, me.driver_id)
                    raise
        else:
            events = await host.run_io(host.store.load_events, run_id)
            state = self._rebuilt(record, events, graph)
            if check is not None:
                check(state)
            # check-and-claim: the claim fails if anything was written since these events,
            # so the state rebuilt here (and checked) is exactly the state this process owns
            last = events[-1].seq if events else 0
            epoch = await host.run_io(host.store.claim, run_id, record.epoch, last, me)
        return await self._recover(chain, graph, opts, record, events, state, epoch)

    async def claimed(self, claim: Claim) -> Run:
        """See :meth:`chainlab.runtime.Runtime.claimed`."""
        host = self.host
        record = claim.record.with_(epoch=claim.epoch, status=RunStatus.RUNNING)
        chain, graph, opts = self._compiled(record)
        events = await host.run_io(host.store.load_events, record.run_id)
        if not events:  # enqueued and never started (only a queued run has no events)
            priority, order = await host.order(graph, chain.name, opts)
            kernel = host.new_kernel(record.run_id, graph,
                                     RunState(record.run_id, graph.nodes), opts,
                                     record.context, epoch=claim.epoch, priority=priority)
            kernel.budget_estimates = dict(order.get("budget_estimates") or {})
            host.open_log(kernel, chain, graph, record, order)
            if record.meta.get("paused"):
                kernel.pause_now(reason="enqueued paused (step-through)")
            run = host.handle(chain, kernel, record)
            host.launch(run, DrivePhase.START)
            return run
        state = self._rebuilt(record, events, graph)
        if claim.kind != "decided":
            return await self._recover(chain, graph, opts, record, events, state, claim.epoch)
        # the decisions that brought it back are applied BEFORE its driver starts: it never
        # settles (re-suspends) in between, which would give back the slot the claim took
        pending = await host.run_io(host.store.pending_requests, record.run_id, 0)
        run = await self._recover(chain, graph, opts, record, events, state, claim.epoch,
                                  launch=False)
        for request in pending:
            if not await host.liveness.answer(run, request):
                break
        host.launch(run, DrivePhase.RECOVER)
        return run

    def _compiled(self, record: RunRecord) -> tuple[Chain, Graph, RunOptions]:
        """A stored run's chain, compiled against this runtime's toolbox (its own sub-chains
        over the runtime's). Raises PlanError when the toolbox cannot run it."""
        chain = Chain.from_dict(record.chain)
        chains = dict(self.host.chains)
        chains.update({n: Chain.from_dict(c) for n, c in record.chains.items()})
        opts = RunOptions.model_validate(record.options)
        toolbox = run_toolbox(self.host.toolbox, record.meta, record.run_id)  # + its ad-hoc agent
        raise_for_problems(chain, toolbox, chains=chains)
        return chain, compile_chain(chain, toolbox, chains, opts), opts

    @staticmethod
    def _rebuilt(record: RunRecord, events: list[Event], graph: Graph) -> RunState:
        """The run's state from its log. A run with no event was never started and is
        refused, never driven from scratch: an enqueued one is started by a worker's claim
        only (:meth:`claimed`); any other did not complete its creation, and driving it from
        the start could repeat what the run it came from did."""
        if not events and record.queue is not None:
            raise RunStateError(
                f"run {record.run_id!r} of queue {record.queue!r} has not started yet: a "
                "worker of its queue starts it (the claim of a worker that died lapses)",
                run_id=record.run_id, status=str(record.status))
        if not events:
            raise RunStateError(
                f"run {record.run_id!r} has no events: its creation did not complete, so it "
                "is not resumed (that would run it from scratch); start the chain again or "
                "fork its parent", run_id=record.run_id, status=str(record.status))
        return RunState.from_events(record.run_id, events, graph.nodes)

    async def _recover(self, chain: Chain, graph: Graph, opts: RunOptions, record: RunRecord,
                       events: list[Event], state: RunState, epoch: int, *,
                       launch: bool = True) -> Run:
        """Drive a stored run this runtime now owns at ``epoch`` from its rebuilt state
        (``launch=False``: rebuilt, its driver not started yet; the caller launches it)."""
        run_id = record.run_id
        started: dict[str, Any] = next(
            (e.payload for e in events if e.kind == EventKind.RUN_STARTED), {}
        )
        kernel = self.host.new_kernel(run_id, graph, state, opts, record.context, epoch=epoch,
                                      priority=recorded_order(started, graph.nodes))
        kernel.budget_estimates = dict(started.get("budget_estimates") or {})
        was = state.status
        kernel.emit(
            EventKind.RUN_RESUMED,
            payload={"reason": "recovery", "epoch": epoch, "was": str(was),
                     **self.host.liveness.signature()},
            run_status=None
            if was in RUN_TERMINAL
            else (RunStatus.COMPENSATING if was == RunStatus.COMPENSATING else RunStatus.RUNNING),
        )
        run = self.host.handle(chain, kernel, record)
        if was in RUN_TERMINAL:
            self.host.keep(run)
            kernel.settled_status = was
            await kernel.commit()
        else:
            # rebuilt here, synchronously: control methods work as soon as this returns
            kernel.to_reconcile = recover_now(kernel)
            if launch:
                self.host.launch(run, DrivePhase.RECOVER)
        return run
