"""``Launching``: every way a NEW run of a :class:`~chainlab.runtime.runtime.Runtime`
begins, a base of that class. :meth:`~Launching.start` (a new run driven here),
:meth:`~Launching.enqueue` (a new run stored ``queued`` for the worker fleet) and
:meth:`~Launching.fork` (a new run from a finished or suspended one, previewed by
:meth:`~Launching.fork_plan`).

Creating a run is all or nothing (issue 36): what a new run must be is checked first
(``_admit``), and the record, its driver, the head of its log and its idempotency key are
stored in ONE transaction (``_create``, through ``store.create_run``): a refused write
leaves no run behind. A start and a fork then hand the run to ``_launch``
(:mod:`chainlab.runtime.hosting`), the one tail that drives every run; stored runs are
taken up in :mod:`chainlab.runtime.resuming`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from chainlab.errors import (
    IdempotencyKeyError,
    PlanError,
    Problem,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from chainlab.events import (
    EventKind,
    RunState,
    RunStatus,
    event_kind,
    read_run,
)
from chainlab.events.status import DrivePhase
from chainlab.plan.inputs import check_context
from chainlab.plan.schema import Chain, RunOptions
from chainlab.runtime.coordination.queue import concurrency_key, queue_name
from chainlab.runtime.engine.compile import Graph, used_chains
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.engine.recovery import recover_now
from chainlab.runtime.history.estimates import (
    budget_estimates,
    history,
    release_order,
)
from chainlab.runtime.history.fork import ForkPlan, fork_seed, plan_fork
from chainlab.runtime.hosting import Hosting
from chainlab.runtime.preparing import (
    Admitted,
    OpeningLog,
    adhoc_meta,
    request_hash,
    toolbox_of,
)
from chainlab.runtime.run import Run, RunOwner
from chainlab.store.base import RunRecord, check_run_id
from chainlab.store.queue import DEFAULT_QUEUE, Queue
from chainlab.tools import NotJSONError, to_json_value

if TYPE_CHECKING:
    from chainlab.store.base import Store

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
        idempotency_key: str | None = None,
    ) -> Run:
        """Validate ``chain`` and start a run in the background; returns its handle once the
        run is stored (its record, this runtime as its driver and the head of its log, in one
        transaction: all or nothing). With ``paused=True`` nothing starts until
        ``run.step()`` or ``run.unpause()``. ``planning``: ``(kind, payload)`` planning
        events to record at the head of the log (the planner's report, see
        chainlab.planner). ``idempotency_key``: a key naming this request: the same request
        again returns the run the first one started (``run.replayed`` is then True), never a
        second one.

        Raises PlanError if the chain (with this context) does not validate, InputError (a
        PlanError) if the context does not fit the chain's declared ``inputs``,
        IdempotencyKeyError (the key named another request), RunExistsError (``run_id`` is
        taken).
        """
        new = self._admit(chain, context, options, run_id=run_id, meta=meta,
                          key=idempotency_key, paused=paused)
        if idempotency_key is not None:
            found = await self._keyed(idempotency_key, new.record)
            if found is not None:
                return found
        for kind, _ in planning:
            if not str(kind).startswith("planning_"):
                raise ValueError(f"planning events are planning_*, got {kind!r}")

        def opening(kernel: Kernel) -> None:
            for kind, payload in planning:
                kernel.emit(event_kind(kind), payload=dict(payload))
            if paused:
                kernel.pause_now(reason="start paused (step-through)")

        priority, order = await self._order(new.graph, chain.name, new.options)
        try:
            kernel = await self._create(chain, new.graph, new.record, new.options, priority,
                                        order, then=opening, key=idempotency_key)
        except RunExistsError as exc:
            found = await self._keyed(exc.key, new.record) if exc.key else None
            if found is None:
                raise
            return found
        run = self._handle(chain, kernel, new.record)
        self._launch(run, DrivePhase.START)
        return run

    async def enqueue(
        self,
        chain: Chain,
        context: Mapping[str, Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        options: RunOptions | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        meta: Mapping[str, Any] | None = None,
        paused: bool = False,
    ) -> str:
        """Store a run as ``queued`` in ``queue`` and return its id without driving it: a
        worker of the fleet (``chainlab worker``, :class:`chainlab.runtime.Worker`) claims
        and drives it (DESIGN §19). Validated as :meth:`start` validates, and stored all or
        nothing; ``idempotency_key`` as for :meth:`start` (the same request again returns
        the same id). A chain's ``options.concurrency_key`` is resolved against the context
        now.

        Raises PlanError (the chain, context, options or concurrency key do not fit),
        ValueError (``queue`` is not a simple identifier), IdempotencyKeyError,
        RunExistsError, StoreError (e.g. a store that keeps no queue).
        """
        new = self._admit(chain, context, options, run_id=run_id, meta=meta,
                          key=idempotency_key, paused=paused, queue=queue_name(queue))
        if not isinstance(self.store, Queue):
            raise StoreError(f"{self.store!r} keeps no queue: enqueue into a SQLite file or a "
                             "PostgreSQL database (or a MemoryStore, for one process)")
        record = new.record.with_(concurrency_key=concurrency_key(new.options, new.record))
        if idempotency_key is not None:
            found = await self._key_names(idempotency_key, record)
            if found is not None:
                return found
        try:
            await self.run_io(self.store.create_run, record, None, (), idempotency_key)
        except RunExistsError as exc:
            found = await self._key_names(exc.key, record) if exc.key else None
            if found is None:
                raise
            return found
        return record.run_id

    def _admit(self, chain: Chain, context: Mapping[str, Any] | None,
               options: RunOptions | None, *, run_id: str | None,
               meta: Mapping[str, Any] | None, key: str | None, paused: bool = False,
               queue: str | None = None) -> Admitted:
        """A new run's record, checked (context, declared inputs, run id, chain with its
        options) and compiled: everything a start or an enqueue checks before it writes.
        Raises PlanError."""
        data = _gated(chain, context)  # (the chain's values: by Prepared.compile, once)
        data = check_context(chain, data)  # the declared inputs: checked, defaults filled
        if run_id is not None:
            try:
                check_run_id(run_id)
            except ValueError as exc:
                raise PlanError(Problem("invalid_field", str(exc), field="run_id")) from None
        opts = chain.options.merged(options)
        graph, chain_data = self._prepared.compile(chain, opts, data,
                                                   toolbox_of(self.toolbox, meta or {}),
                                                   self.chains)
        now = self.clock.now()
        extra: dict[str, Any] = {"paused": True} if paused and queue is not None else {}
        if key is not None:  # what makes a repeat the SAME request
            extra["idempotency_key"] = key
            extra["request_hash"] = request_hash(chain.model_dump_json(exclude_defaults=True),
                                                 data, options, run_id, queue, paused)
        record = RunRecord(
            run_id=run_id or self.id_factory(),
            chain_name=chain.name,
            status=RunStatus.QUEUED if queue is not None else RunStatus.RUNNING,
            epoch=1,
            created_at=now,
            updated_at=now,
            chain=chain_data,
            chains={n: c.to_dict() for n, c in used_chains(chain, self.chains).items()},
            context=data,
            options=opts.model_dump(mode="json", exclude_defaults=True),
            meta={**dict(meta or {}), **extra},
            queue=queue,
        )
        return Admitted(record, graph, opts)

    async def _keyed(self, key: str, record: RunRecord) -> Run | None:
        """A handle (``replayed`` set) of the run ``key`` names, see :meth:`_key_names`."""
        found = await self._key_names(key, record)
        if found is None:
            return None
        run = cast(RunOwner, self).get_run(found)  # (a Launching is always a Runtime)
        handle = Run(run.runtime, run.chain, run._kernel, run.record)
        handle.replayed = True
        return handle

    async def _key_names(self, key: str, record: RunRecord) -> str | None:
        """The run ``key`` names when this request is the one that made it, None when the
        key names no run yet. Raises IdempotencyKeyError when it names a run another
        request made."""
        found: str | None = await self.run_io(self.store.run_for_key, key)
        if found is None:
            return None
        existing = await self.run_io(self.store.get_run, found)
        if existing.meta.get("request_hash") != record.meta.get("request_hash"):
            raise IdempotencyKeyError(key, found)
        return found

    async def _order(self, graph: Graph, chain_name: str, opts: RunOptions
                     ) -> tuple[Callable[[str], float] | None, dict[str, Any]]:
        """The release order of a new run, and what ``run_started`` records of it."""
        if (opts.priority != "declaration" or opts.budget is not None) \
                and self._history is None:
            self._history = await self.run_io(history, self.store)
        priority, order = self._prepared.release_order(graph, chain_name, opts.priority,
                                                       self._history)
        if opts.budget is not None:  # what each step is expected to spend, recorded
            order = {**order, "budget_estimates": budget_estimates(graph.nodes, chain_name,
                                                                   self._history)}
        return priority, order

    async def _create(self, chain: Chain, graph: Graph, record: RunRecord, opts: RunOptions,
                      priority: Callable[[str], float] | None, order: dict[str, Any],
                      lineage: Mapping[str, Any] | None = None, *,
                      then: Callable[[Kernel], None] | None = None,
                      key: str | None = None) -> Kernel:
        """Store a new run (a start and a fork) all or nothing: its record, this runtime as
        its driver from the first moment, and the head of its log (``run_started``, then
        what ``then`` emits) in ONE transaction. A refused write (a value the store cannot
        keep, a key or id taken) leaves no run behind. Raises RunExistsError, StoreError."""
        opening = OpeningLog()
        state = RunState(record.run_id, graph.nodes)
        kernel = self._new_kernel(record.run_id, graph, state, opts, record.context, epoch=1,
                                  priority=priority)
        kernel.store = cast("Store", opening)  # (the head of the log goes to create_run)
        kernel.budget_estimates = dict(order.get("budget_estimates") or {})
        self._open_log(kernel, chain, graph, record, order, lineage)
        if then is not None:
            then(kernel)
        stored = record.with_(status=opening.status or record.status)
        await self.run_io(self.store.create_run, stored, self.liveness.identity(),
                          opening.events, key)
        kernel.store = self.store
        return kernel

    def _open_log(self, kernel: Kernel, chain: Chain, graph: Graph, record: RunRecord,
                  order: dict[str, Any], lineage: Mapping[str, Any] | None = None) -> None:
        """Emit ``run_started`` (a new run's first event), and learn the run's durations
        when it ends (before ``wait()`` returns, so the next start knows them)."""
        if self._history is not None:
            learned, state = self._history, kernel.state
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
                **self.liveness.signature(),
            },
            run_status=RunStatus.RUNNING,
        )

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
        return plan_fork(record, events, toolbox_of(self.toolbox, record.meta, run_id),
                         self.chains, origin=self._state_of, **edits)

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

        Returns once the fork is stored with its first events (its reused steps and what
        waits for a person first), in one transaction: a process that dies right after
        leaves a fork that a resume continues exactly, and a refused write (an output the
        store cannot keep) leaves no fork at all."""
        plan = await self.fork_plan(run_id, args=args, outputs=outputs, context=context,
                                    chain=chain, rerun=rerun)
        # the fork keeps the parent's ad-hoc agent: a later resume of the fork finds it
        parent = await self.run_io(self.store.get_run, run_id)
        meta = {**adhoc_meta(parent.meta), **dict(meta or {})}
        seed = fork_seed(plan, toolbox_of(self.toolbox, meta), self.chains,
                         run_id=self.id_factory(), now=self.clock.now(), meta=meta)
        graph, record = seed.graph, seed.record
        priority, order = release_order(graph.nodes, plan.chain.name, plan.options.priority,
                                        self._history)
        if plan.options.budget is not None:
            order = {**order, "budget_estimates": budget_estimates(
                graph.nodes, plan.chain.name, self._history)}
        def opening(kernel: Kernel) -> None:
            for kind, step_id, payload in seed.events:
                kernel.emit(kind, step_id, payload=payload)

        kernel = await self._create(plan.chain, graph, record, plan.options, priority, order,
                                    seed.lineage, then=opening)
        run = self._handle(plan.chain, kernel, record)
        kernel.to_reconcile = recover_now(kernel)  # reused steps are done: release the rest
        self._launch(run, DrivePhase.RECOVER)
        return run


def _gated(chain: Chain, context: Mapping[str, Any] | None) -> dict[str, Any]:
    """The context through the value gate. Raises PlanError naming the path of the bad
    value."""
    try:
        return to_json_value(dict(context or {}), "context")  # type: ignore[no-any-return]
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", str(exc), field=exc.path),
                        chain_name=chain.name) from None
