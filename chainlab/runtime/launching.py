"""``Launching``: every way a run of a :class:`~chainlab.runtime.runtime.Runtime` begins, a
base of that class. :meth:`~Launching.start` (a new run), :meth:`~Launching.resume` (a
stored run claimed by this process: check-and-claim, or a takeover) and
:meth:`~Launching.fork` (a new run from a finished or suspended one, previewed by
:meth:`~Launching.fork_plan`) each build a kernel (``_new_kernel``; a new run's log opens
in ``_create``) and hand the run to ``_launch``, as ``run.rollback()`` does with its own:
the one tail that marks the run as driven here and drives it in the background
(``_drive``: heartbeat and mailbox while it moves, then the run leaves the active set).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from chainlab.errors import PlanError, Problem, RunNotFoundError, StaleEpochError
from chainlab.events import (
    RUN_TERMINAL,
    EventKind,
    RunState,
    RunStatus,
    event_kind,
    read_run,
)
from chainlab.events.status import DrivePhase
from chainlab.plan.inputs import check_context
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, compile_chain, used_chains
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.engine.recovery import recover_now
from chainlab.runtime.history.estimates import (
    budget_estimates,
    history,
    recorded_order,
    release_order,
)
from chainlab.runtime.history.fork import ForkPlan, fork_seed, plan_fork
from chainlab.runtime.hosting import Hosting
from chainlab.runtime.run import Run
from chainlab.store.base import RunRecord, check_run_id
from chainlab.tools import NotJSONError, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.runtime import Runtime

__all__ = ["Launching"]


class Launching(Hosting):
    """Starts, resumes and forks runs (the launch surface of
    :class:`~chainlab.runtime.runtime.Runtime`, its one subclass)."""

    # ------------------------------------------------------------------ runs
    async def start(
        self,
        chain: Chain,
        context: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
        *,
        run_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        paused: bool = False,
        planning: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> Run:
        """Validate ``chain`` and start a run in the background; returns its handle at once.
        With ``paused=True`` nothing starts until ``run.step()`` or ``run.unpause()``.
        ``planning``: ``(kind, payload)`` planning events to record at the head of the log
        (the planner's report, see chainlab.planner).

        Raises PlanError if the chain (with this context) does not validate, InputError (a
        PlanError) if the context does not fit the chain's declared ``inputs``.
        """
        data = _gated(chain, context)  # (the chain's values: by Prepared.compile, once)
        data = check_context(chain, data)  # the declared inputs: checked, defaults filled
        if run_id is not None:
            try:
                check_run_id(run_id)
            except ValueError as exc:
                raise PlanError(Problem("invalid_field", str(exc), field="run_id")) from None
        opts = chain.options.merged(options)
        graph, chain_data = self._prepared.compile(chain, opts, data, self.toolbox,
                                                   self.chains)
        run_id = run_id or self.id_factory()
        now = self.clock.now()
        record = RunRecord(
            run_id=run_id,
            chain_name=chain.name,
            status=RunStatus.RUNNING,
            epoch=1,
            created_at=now,
            updated_at=now,
            chain=chain_data,
            chains={n: c.to_dict() for n, c in used_chains(chain, self.chains).items()},
            context=data,
            options=opts.model_dump(mode="json", exclude_defaults=True),
            meta=dict(meta or {}),
        )
        if (opts.priority != "declaration" or opts.budget is not None) \
                and self._history is None:
            self._history = await self.run_io(history, self.store)
        priority, order = self._prepared.release_order(graph, chain.name, opts.priority,
                                                       self._history)
        if opts.budget is not None:  # what each step is expected to spend, recorded
            order = {**order, "budget_estimates": budget_estimates(graph.nodes, chain.name,
                                                                   self._history)}
        kernel = await self._create(chain, graph, record, opts, priority, order)
        for kind, payload in planning:
            if not str(kind).startswith("planning_"):
                raise ValueError(f"planning events are planning_*, got {kind!r}")
            kernel.emit(event_kind(kind), payload=dict(payload))
        if paused:
            kernel.pause_now(reason="start paused (step-through)")
        run = self._handle(chain, kernel, record)
        self._launch(run, DrivePhase.START)
        return run

    async def _create(self, chain: Chain, graph: Graph, record: RunRecord, opts: RunOptions,
                      priority: Callable[[str], float] | None, order: dict[str, Any],
                      lineage: Mapping[str, Any] | None = None) -> Kernel:
        """Store a new run, with this runtime as its driver from the first moment, and open
        its log with ``run_started`` (a start and a fork)."""
        await self.run_io(self.store.create_run, record, self.liveness.identity())
        state = RunState(record.run_id, graph.nodes)
        kernel = self._new_kernel(record.run_id, graph, state, opts, record.context, epoch=1,
                                  priority=priority)
        kernel.budget_estimates = dict(order.get("budget_estimates") or {})
        if self._history is not None:  # learn the durations when the run ends, before
            learned = self._history  # wait() returns, so the next start knows them
            kernel.on_end = lambda: learned.add_run(chain.name, state.attempts)
        kernel.emit(
            EventKind.RUN_STARTED,
            payload={
                "chain": chain.name,
                "steps": len(graph.nodes),
                "context_keys": sorted(record.context),
                "options": record.options,
                **order,
                **(lineage or {}),
            },
            run_status=RunStatus.RUNNING,
        )
        return kernel

    async def resume(
        self, run_id: str, *, check: Callable[[RunState], None] | None = None,
        force: bool = False,
    ) -> Run:
        """Continue a run from the store in this process (after a crash, a suspension, or to
        roll it back). Takes the next epoch: an older writer can no longer commit.

        ``check(state)`` runs on the stored state before the run is claimed and may raise to
        refuse (e.g. "is this step still waiting for my approval?"): the check and the claim
        are one step, because the claim fails if anything was written since that state.

        A run another process drives (its heartbeat is fresh) is refused unless ``force``; a
        run whose driver went stale is taken over. Either way the old driver is fenced: it
        commits nothing after the claim.

        Raises RunNotFoundError, DriverAliveError (another live process drives it),
        StaleEpochError (another process resumed it, or wrote to it, since it was read), or
        what ``check`` raises.
        """
        active = self._active.get(run_id) or self._finished.get(run_id)
        if active is not None and active.driving:
            return active
        record = await self.run_io(self.store.get_run, run_id)
        if not force:
            await self.liveness.refuse_live(self, record)
        chain = Chain.from_dict(record.chain)
        chains = dict(self.chains)
        chains.update({n: Chain.from_dict(c) for n, c in record.chains.items()})
        opts = RunOptions.model_validate(record.options)
        raise_for_problems(chain, self.toolbox, chains=chains)
        graph = compile_chain(chain, self.toolbox, chains, opts)
        me = self.liveness.identity()
        if force:
            # a takeover: claim FIRST (the old driver, busy or not, is fenced from here on),
            # then read the log, which nobody can extend any more
            # (another process that claimed since `record` was read wins: StaleEpochError)
            epoch = await self.run_io(self.store.claim, run_id, record.epoch, None, me)
            events = await self.run_io(self.store.load_events, run_id)
            state = RunState.from_events(run_id, events, graph.nodes)
            if check is not None:
                try:
                    check(state)
                except BaseException:
                    await self.run_io(self.store.clear_driver, run_id, me.driver_id)
                    raise
        else:
            events = await self.run_io(self.store.load_events, run_id)
            state = RunState.from_events(run_id, events, graph.nodes)
            if check is not None:
                check(state)
            # check-and-claim: the claim fails if anything was written since these events,
            # so the state rebuilt here (and checked) is exactly the state this process owns
            last = events[-1].seq if events else 0
            epoch = await self.run_io(self.store.claim, run_id, record.epoch, last, me)
        started: dict[str, Any] = next(
            (e.payload for e in events if e.kind == EventKind.RUN_STARTED), {}
        )
        kernel = self._new_kernel(run_id, graph, state, opts, record.context, epoch=epoch,
                              priority=recorded_order(started, graph.nodes))
        kernel.budget_estimates = dict(started.get("budget_estimates") or {})
        was = state.status
        kernel.emit(
            EventKind.RUN_RESUMED,
            payload={"reason": "recovery", "epoch": epoch, "was": str(was)},
            run_status=None
            if was in RUN_TERMINAL
            else (RunStatus.COMPENSATING if was == RunStatus.COMPENSATING else RunStatus.RUNNING),
        )
        run = self._handle(chain, kernel, record)
        if was in RUN_TERMINAL:
            self._active[run_id] = run
            kernel.settled_status = was
            await kernel.commit()
        else:
            # rebuilt here, synchronously: control methods work as soon as this returns
            kernel.to_reconcile = recover_now(kernel)
            self._launch(run, DrivePhase.RECOVER)
        return run

    # ------------------------------------------------------------------ time travel
    async def fork_plan(
        self,
        run_id: str,
        *,
        args: Mapping[str, Mapping[str, Any]] | None = None,
        outputs: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        chain: Chain | None = None,
        rerun: Sequence[str] | str | None = None,
    ) -> ForkPlan:
        """What :meth:`fork` would do with these edits, one row per step (reuse, override,
        rerun, confirm, with the reason), before anything runs. Nothing is written.

        Raises RunNotFoundError, RunStateError (the run is still running), UnknownStepError,
        PlanError (edited args/context/chain that do not validate), DecisionError (an output
        that does not fit its tool's output schema)."""
        return await self.run_io(
            lambda: self.fork_plan_sync(run_id, args=args, outputs=outputs, context=context,
                                        chain=chain, rerun=rerun))

    def fork_plan_sync(self, run_id: str, **edits: Any) -> ForkPlan:
        """:meth:`fork_plan` from synchronous code (a blocking read of the store)."""
        record = self.store.get_run(run_id)
        events = self.store.load_events(run_id)
        return plan_fork(record, events, self.toolbox, self.chains, origin=self._state_of,
                         **edits)

    def _state_of(self, run_id: str) -> RunState | None:
        """A stored run's current state (None when the store has no such run)."""
        try:
            return read_run(self.store, run_id)[2]
        except RunNotFoundError:
            return None

    async def fork(
        self,
        run_id: str,
        *,
        args: Mapping[str, Mapping[str, Any]] | None = None,
        outputs: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        chain: Chain | None = None,
        rerun: Sequence[str] | str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Run:
        """Start a NEW run from a suspended or finished one (DESIGN §11): steps that would
        do exactly what they did are reused (their tools are not called), edited or failed
        ones and their descendants run again; a side-effecting step that must run again
        waits for approval. With no edits: retry from the failure. The parent is untouched.

        ``args``: ``{step_id: {arg: value}}`` merged over a step's args; ``outputs``:
        ``{step_id: output}`` recorded instead of running; ``context`` merged over the
        parent's; ``chain`` replaces the parent's chain; ``rerun``: steps to run again;
        ``meta``: kept with the new run (besides its lineage, ``forked_from`` and
        ``forked_at_seq``). Raises as :meth:`fork_plan` (then nothing is written).

        Returns once the fork's first events (its reused steps and what waits for a person
        first) are durable: a process that dies right after still leaves a fork that a
        resume continues exactly."""
        plan = await self.fork_plan(run_id, args=args, outputs=outputs, context=context,
                                    chain=chain, rerun=rerun)
        seed = fork_seed(plan, self.toolbox, self.chains, run_id=self.id_factory(),
                         now=self.clock.now(), meta=meta)
        graph, record = seed.graph, seed.record
        priority, order = release_order(graph.nodes, plan.chain.name, plan.options.priority,
                                        self._history)
        if plan.options.budget is not None:
            order = {**order, "budget_estimates": budget_estimates(
                graph.nodes, plan.chain.name, self._history)}
        kernel = await self._create(plan.chain, graph, record, plan.options, priority, order,
                                    seed.lineage)
        for kind, step_id, payload in seed.events:
            kernel.emit(kind, step_id, payload=payload)
        if self.store.blocking:
            await kernel.commit()
        else:  # an inline store (memory; a notebook's): durable without a suspension
            kernel.commit_inline()
        run = self._handle(plan.chain, kernel, record)
        kernel.to_reconcile = recover_now(kernel)  # reused steps are done: release the rest
        self._launch(run, DrivePhase.RECOVER)
        return run

    # ------------------------------------------------------------------ driving
    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background: the one way every run begins (a
        start, a resume, a fork, a rollback). Marked as driven before this returns, so a
        control call in between never starts a second driver; nothing here awaits."""
        kernel = run._kernel
        assert kernel is not None
        self._active[run.run_id] = run
        kernel.prepare_drive()
        self.spawn(lambda: self._drive(run, phase))

    async def _drive(self, run: Run, phase: DrivePhase) -> None:
        kernel = run._kernel
        assert kernel is not None
        async with self.liveness.attend(self, run):  # heartbeat + mailbox while it drives
            await kernel.drive(phase)
        if self._active.get(run.run_id) is not run:
            return
        if isinstance(kernel.error, StaleEpochError):  # fenced: another driver took it over
            del self._active[run.run_id]  # (get_run now reads the store, not this handle)
        elif kernel.state.status in RUN_TERMINAL:
            del self._active[run.run_id]
            self._finished[run.run_id] = run

    def _new_kernel(
        self,
        run_id: str,
        graph: Any,
        state: RunState,
        opts: RunOptions,
        context: dict[str, Any],
        *,
        epoch: int,
        priority: Callable[[str], float] | None = None,
    ) -> Kernel:
        return Kernel(
            run_id=run_id,
            graph=graph,
            state=state,
            options=opts,
            context=context,
            store=self.store,
            executor=self.executor,
            clock=self.clock,
            epoch=epoch,
            toolbox=self.toolbox,
            priority=priority,
        )

    def _handle(self, chain: Chain, kernel: Kernel, record: RunRecord) -> Run:
        """The live handle of a run this runtime is about to drive. (A Launching is always
        a Runtime, its one subclass: the handle holds the whole runtime.)"""
        return Run(cast("Runtime", self), chain, kernel, record)


def _gated(chain: Chain, context: Mapping[str, Any] | None) -> dict[str, Any]:
    """The context through the value gate. Raises PlanError naming the path of the bad
    value."""
    try:
        return to_json_value(dict(context or {}), "context")  # type: ignore[no-any-return]
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", str(exc), field=exc.path),
                        chain_name=chain.name) from None
