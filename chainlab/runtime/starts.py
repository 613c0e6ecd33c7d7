"""``Starts``: every way a NEW run of a :class:`~chainlab.runtime.Runtime` begins, a part the
Runtime holds (it holds a :class:`~chainlab.runtime.host.Host` and nothing else):
:meth:`~Starts.start` (a new run driven here), :meth:`~Starts.enqueue` (a new run stored
``queued`` for the worker fleet) and :meth:`~Starts.fork` (a new run from a finished or
suspended one, previewed by :meth:`~Starts.fork_plan`).

Creating a run is all or nothing (issue 36): what a new run must be is checked first
(``_admit``), and the record, its driver, the head of its log and its idempotency key are
stored in ONE transaction (``_create``, through ``store.create_run``): a refused write
leaves no run behind. A start and a fork then hand the run to ``Host.launch``
(:mod:`chainlab.runtime.host`), the one tail that drives every run; stored runs are taken
up in :mod:`chainlab.runtime.takeovers`.
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
    RunState,
    RunStatus,
    event_kind,
    read_run,
)
from chainlab.events.status import DrivePhase
from chainlab.plan.inputs import check_context
from chainlab.plan.schema import Chain, RunOptions
from chainlab.redaction import REDACTED, redact_value
from chainlab.runtime.coordination.queue import concurrency_key, queue_name
from chainlab.runtime.engine.approvals import check_rules
from chainlab.runtime.engine.compile import Graph, used_chains
from chainlab.runtime.engine.masked import CONTEXT
from chainlab.runtime.engine.recovery import recover_now
from chainlab.runtime.history.estimates import budget_estimates, release_order
from chainlab.runtime.history.fork import ForkPlan, fork_seed, plan_fork
from chainlab.runtime.preparing import (
    Admitted,
    OpeningLog,
    adhoc_meta,
    request_hash,
    toolbox_of,
)
from chainlab.runtime.run import Run
from chainlab.store.base import RunRecord, check_run_id
from chainlab.store.queue import DEFAULT_QUEUE, Queue
from chainlab.tools import NotJSONError, to_json_value
from chainlab.tracing.context import kept_parent

if TYPE_CHECKING:
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.runtime.host import Host
    from chainlab.store.base import Store

__all__ = ["Starts"]


class Starts:
    """Starts, enqueues and forks runs on ``host`` (the Runtime's methods of the same names
    delegate here; their docstrings are the Runtime's)."""

    def __init__(self, host: Host):
        self.host = host

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
        """See :meth:`chainlab.runtime.Runtime.start`."""
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

        priority, order = await self.host.order(new.graph, chain.name, new.options)
        try:
            kernel = await self._create(chain, new.graph, new.record, new.options, priority,
                                        order, then=opening, key=idempotency_key)
        except RunExistsError as exc:
            found = await self._keyed(exc.key, new.record) if exc.key else None
            if found is None:
                raise
            return found
        run = self.host.handle(chain, kernel, new.record)
        self.host.launch(run, DrivePhase.START)
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
        """See :meth:`chainlab.runtime.Runtime.enqueue`."""
        new = self._admit(chain, context, options, run_id=run_id, meta=meta,
                          key=idempotency_key, paused=paused, queue=queue_name(queue))
        store = self.host.store
        if not isinstance(store, Queue):
            raise StoreError(f"{store!r} keeps no queue: enqueue into a SQLite file or a "
                             "PostgreSQL database (or a MemoryStore, for one process)")
        record = new.record.with_(concurrency_key=concurrency_key(new.options, new.record))
        if idempotency_key is not None:
            found = await self._key_names(idempotency_key, record)
            if found is not None:
                return found
        try:
            await self.host.run_io(store.create_run, record, None, (), idempotency_key)
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
        host = self.host
        if opts.policies:  # the run's rules against its tools (the chain's: with the chain)
            check_rules(opts.policies, toolbox_of(host.toolbox, meta or {}), "options.policies")
        graph, chain_data = host.prepared.compile(chain, opts, data,
                                                  toolbox_of(host.toolbox, meta or {}),
                                                  host.chains)
        now = host.clock.now()
        meta = kept_parent(meta)  # a traceparent that does not parse is not kept
        if host.tracing is not None:  # started inside a traced request: its child
            meta = host.tracing.parent_meta(meta)
        extra: dict[str, Any] = {"paused": True} if paused and queue is not None else {}
        if key is not None:  # what makes a repeat the SAME request
            extra["idempotency_key"] = key
            extra["request_hash"] = request_hash(chain.model_dump_json(exclude_defaults=True),
                                                 data, options, run_id, queue, paused)
        record = RunRecord(
            run_id=run_id or host.id_factory(),
            chain_name=chain.name,
            status=RunStatus.QUEUED if queue is not None else RunStatus.RUNNING,
            epoch=1,
            created_at=now,
            updated_at=now,
            chain=chain_data,
            chains={n: c.to_dict() for n, c in used_chains(chain, host.chains).items()},
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
        run = self.host.get_run(found)
        handle = Run(run.runtime, run.chain, run._kernel, run.record)
        handle.replayed = True
        return handle

    async def _key_names(self, key: str, record: RunRecord) -> str | None:
        """The run ``key`` names when this request is the one that made it, None when the
        key names no run yet. Raises IdempotencyKeyError when it names a run another
        request made."""
        found: str | None = await self.host.run_io(self.host.store.run_for_key, key)
        if found is None:
            return None
        existing = await self.host.run_io(self.host.store.get_run, found)
        if existing.meta.get("request_hash") != record.meta.get("request_hash"):
            raise IdempotencyKeyError(key, found)
        return found

    async def _create(self, chain: Chain, graph: Graph, record: RunRecord, opts: RunOptions,
                      priority: Callable[[str], float] | None, order: dict[str, Any],
                      lineage: Mapping[str, Any] | None = None, *,
                      then: Callable[[Kernel], None] | None = None,
                      key: str | None = None) -> Kernel:
        """Store a new run (a start and a fork) all or nothing: its record, this runtime as
        its driver from the first moment, and the head of its log (``run_started``, then
        what ``then`` emits) in ONE transaction. A refused write (a value the store cannot
        keep, a key or id taken) leaves no run behind. Raises RunExistsError, StoreError."""
        host = self.host
        context = self._shown_context(record.context)
        if context != record.context:  # marked: a resumed run knows it holds masks
            order = {**order, REDACTED: [CONTEXT]}
        opening = OpeningLog()
        state = RunState(record.run_id, graph.nodes)
        kernel = host.new_kernel(record.run_id, graph, state, opts, record.context, epoch=1,
                                 priority=priority)
        kernel.store = cast("Store", opening)  # (the head of the log goes to create_run)
        kernel.budget_estimates = dict(order.get("budget_estimates") or {})
        host.open_log(kernel, chain, graph, record, order, lineage)
        if then is not None:
            then(kernel)
        stored = record.with_(status=opening.status or record.status, context=context)
        await host.run_io(host.store.create_run, stored, host.liveness.identity(),
                          opening.events, key)
        kernel.store = host.store
        return kernel

    def _shown_context(self, context: dict[str, Any]) -> dict[str, Any]:
        """A new run's context as it is stored: through the runtime's redactor (the run's
        kernel keeps the real one). Raises RedactionError: nothing is stored."""
        redact = self.host.redact
        if redact is None or not context:
            return context
        return redact_value(context, redact, field="context")  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ time travel
    async def fork_plan(self, run_id: str, **edits: Any) -> ForkPlan:
        """See :meth:`chainlab.runtime.Runtime.fork_plan` (``edits``: its keyword arguments,
        named there once)."""
        return await self.host.run_io(lambda: self.fork_plan_sync(run_id, **edits))

    def fork_plan_sync(self, run_id: str, **edits: Any) -> ForkPlan:
        """See :meth:`chainlab.runtime.Runtime.fork_plan_sync`."""
        store = self.host.store
        record = store.get_run(run_id)
        events = store.load_events(run_id)
        return plan_fork(record, events, toolbox_of(self.host.toolbox, record.meta, run_id),
                         self.host.chains, origin=self._state_of, **edits)

    def _state_of(self, run_id: str) -> RunState | None:
        """A stored run's current state (None when the store has no such run)."""
        try:
            return read_run(self.host.store, run_id)[2]
        except RunNotFoundError:
            return None

    async def fork(self, run_id: str, *, meta: Mapping[str, Any] | None = None,
                   experiment: Mapping[str, Any] | None = None, plan: ForkPlan | None = None,
                   **edits: Any) -> Run:
        """See :meth:`chainlab.runtime.Runtime.fork` (``edits``: :meth:`fork_plan`'s).
        ``experiment`` and ``plan``: an experiment's replay, its recording and its fork
        plan made already (:mod:`chainlab.runtime.experiments`)."""
        if plan is None:
            plan = await self.fork_plan(run_id, **edits)
        # the fork keeps the parent's ad-hoc agent: a later resume of the fork finds it
        host = self.host
        parent = await host.run_io(host.store.get_run, run_id)
        meta = {**adhoc_meta(parent.meta), **dict(meta or {})}
        seed = fork_seed(plan, toolbox_of(host.toolbox, meta), host.chains,
                         run_id=host.id_factory(), now=host.clock.now(), meta=meta,
                         experiment=experiment)
        graph, record = seed.graph, seed.record
        priority, order = release_order(graph.nodes, plan.chain.name, plan.options.priority,
                                        host.history)
        if plan.options.budget is not None:
            order = {**order, "budget_estimates": budget_estimates(
                graph.nodes, plan.chain.name, host.history)}

        def opening(kernel: Kernel) -> None:
            for kind, step_id, payload in seed.events:
                kernel.emit(kind, step_id, payload=payload)

        kernel = await self._create(plan.chain, graph, record, plan.options, priority, order,
                                    seed.lineage, then=opening)
        run = host.handle(plan.chain, kernel, record)
        kernel.to_reconcile = recover_now(kernel)  # reused steps are done: release the rest
        host.launch(run, DrivePhase.RECOVER)
        return run


def _gated(chain: Chain, context: Mapping[str, Any] | None) -> dict[str, Any]:
    """The context through the value gate. Raises PlanError naming the path of the bad
    value."""
    try:
        return to_json_value(dict(context or {}), "context")  # type: ignore[no-any-return]
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", str(exc), field=exc.path),
                        chain_name=chain.name) from None
