"""``Runtime``: starts, resumes, forks and lists runs (``Run``, the handle, is in run.py).

Every way a run begins goes through :meth:`Runtime._launch`: a new run, a resumed one, a
fork and a rollback of a finished run. The coordination code (heartbeats, the mailbox,
decisions from other processes, watching) sees a runtime only through its
:class:`~chainlab.runtime.coordination.Host` members: ``store``, ``liveness``, ``run_io``,
``spawn``, ``driven`` and ``resume``.

One async API. Scripts use ``runtime.run_sync(...)``; notebooks and widgets call the
coroutines on the kernel's running loop; there is no second, blocking copy of the methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import weakref
from collections import ChainMap
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import PlanError, Problem, RunNotFoundError, StaleEpochError
from chainlab.events import (
    RUN_TERMINAL,
    Event,
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
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.compile import Graph, compile_chain, used_chains
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.engine.recovery import recover_now
from chainlab.runtime.history.estimates import (
    History,
    budget_estimates,
    estimate,
    history,
    recorded_order,
    release_order,
)
from chainlab.runtime.history.fork import ForkPlan, fork_seed, plan_fork
from chainlab.runtime.preparing import Prepared
from chainlab.runtime.run import Run, RunResult
from chainlab.store.base import RunRecord, Store, check_run_id
from chainlab.tools import NotJSONError, Toolbox, default_toolbox, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.coordination.inbox import WaitingDecision
    from chainlab.runtime.coordination.watching import WatchedRun

__all__ = ["Run", "RunResult", "Runtime", "new_run_id"]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class Runtime:
    """Starts, resumes and lists runs of chains built from one toolbox.

    ``store`` defaults to ``SQLiteStore(".chainlab/chainlab.db")``; pass ``MemoryStore()``
    for throwaway runs. ``executor`` defaults to :class:`LocalExecutor`.
    While it drives a run it heartbeats it every ``heartbeat_s`` and reads decisions other
    processes send it every ``mailbox_poll_s`` (PostgreSQL: on NOTIFY); another driver is
    dead after ``stale_after_s`` without a beat (DESIGN §13,
    ``chainlab.runtime.coordination.liveness``).
    """

    def __init__(
        self,
        toolbox: Toolbox | None = None,
        store: Store | None = None,
        *,
        executor: Executor | None = None,
        clock: Clock | None = None,
        chains: Mapping[str, Chain] | None = None,
        id_factory: Callable[[], str] = new_run_id,
        heartbeat_s: float = 2.0,
        stale_after_s: float = 10.0,
        mailbox_poll_s: float = 0.15,
    ):
        self.toolbox = toolbox if toolbox is not None else default_toolbox
        if store is None:
            from chainlab.store.sqlite import SQLiteStore

            store = SQLiteStore()
        self.store = store
        self.executor = executor or LocalExecutor()
        self._own_executor = executor is None  # made here: its idle threads end at aclose
        self.clock = clock or SystemClock()
        self._chains: dict[str, Chain] = dict(chains or {})
        self.id_factory = id_factory
        # this runtime as a driver: heartbeats, mailbox, who counts as alive (DESIGN §13)
        self.liveness = Liveness(heartbeat_s=heartbeat_s, stale_after_s=stale_after_s,
                                 poll_s=mailbox_poll_s)
        # runs that may still move (strongly held) and finished ones (only while someone
        # else holds the handle: a long-lived runtime must not keep every run in memory)
        self._active: dict[str, Run] = {}
        self._finished: weakref.WeakValueDictionary[str, Run] = weakref.WeakValueDictionary()
        self._prepared = Prepared()  # compiled chains and release orders, cached
        self._tasks: set[Any] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._history: History | None = None  # durations seen, for the release order

    @property
    def chains(self) -> ChainMap[str, Chain]:
        """Chains usable as sub-chains: those given here (assignments land here) over the
        toolbox's (read live)."""
        return ChainMap(self._chains, self.toolbox.chains)

    # ------------------------------------------------------------------ hosting
    async def __aenter__(self) -> Runtime:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        await self.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        result = await self._tg_cm.__aexit__(*exc)
        self._tg = None
        return result

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run ``coro_fn()`` in the background in this runtime (its task group, or a task on
        the running asyncio loop); :meth:`aclose` stops it."""
        if self._tg is not None:
            self._tg.start_soon(coro_fn)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "this event loop is not asyncio: use `async with Runtime(...) as runtime:` so "
                "runs have a task group to live in"
            ) from None
        task = loop.create_task(coro_fn())
        self._tasks.add(task)  # asyncio keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop driving every run of this runtime (their state stays in the store). A
        decision being answered is answered first (its requester waits for that answer)."""
        await self.liveness.answers_sent()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self._active.clear()
        await self.toolbox.aclose()  # its MCP sessions (they reopen on the next call)
        if self._own_executor and isinstance(self.executor, LocalExecutor):
            self.executor.close()  # idle worker threads end (they start again when needed)

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``, a store read or write: in a worker thread when the store's
        calls block on I/O (``store.blocking``), else right here."""
        if self.store.blocking:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    def driven(self, run_id: str) -> Run | None:
        """The handle of ``run_id`` if this runtime drives it right now, else None."""
        run = self._active.get(run_id)
        return run if run is not None and run.driving else None

    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background: the one way every run begins (a
        start, a resume, a fork, a rollback). Marked as driven before this returns, so a
        control call in between never starts a second driver; nothing here awaits."""
        kernel = run._kernel
        assert kernel is not None
        self._active[run.run_id] = run
        kernel.prepare_drive()
        self.spawn(lambda: self._drive(run, phase))

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
        try:
            data: dict[str, Any] = to_json_value(dict(context or {}))
        except NotJSONError as exc:
            raise PlanError(
                Problem("invalid_field", f"context must be JSON data: {exc}", field="context")
            ) from None
        data = check_context(chain, data)  # the declared inputs: checked, defaults filled
        if run_id is not None:
            try:
                check_run_id(run_id)
            except ValueError as exc:
                raise PlanError(Problem("invalid_field", str(exc), field="run_id")) from None
        opts = chain.options.merged(options)
        chain_json = chain.model_dump_json(exclude_defaults=True)
        graph, chain_data = self._prepared.compile(chain, chain_json, opts, data,
                                                   self.toolbox, self.chains)
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
        run = Run(self, chain, kernel, record)
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
        run = Run(self, chain, kernel, record)
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
        run = Run(self, plan.chain, kernel, record)
        kernel.to_reconcile = recover_now(kernel)  # reused steps are done: release the rest
        self._launch(run, DrivePhase.RECOVER)
        return run

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

    def get_run(self, run_id: str) -> Run:
        """The handle of a run: live if this runtime drives it, else a read-only view of the
        store (control methods then raise RunNotActiveError)."""
        live = self._active.get(run_id) or self._finished.get(run_id)
        if live is not None and not live.fenced:  # a fenced handle is nobody's live run
            return live
        record = self.store.get_run(run_id)
        return Run(self, Chain.from_dict(record.chain), None, record)

    async def watch(self, run_id: str, *, after_seq: int = 0, follow: bool = False,
                    poll_interval: float = 0.05) -> AsyncIterator[Event]:
        """The run's committed events after ``after_seq``, in order, each once, as they are
        committed, by this process or any other one using the same store (DESIGN §13).

        On PostgreSQL it waits for the commit's NOTIFY (``store.wait_for_events``); on other
        stores it polls the log by seq (``load_events(run_id, after_seq)``: only new events are
        read) every ``poll_interval`` seconds while events come, backing off to one poll a
        second while none do (a run that waits days for a person costs one read a second).
        Ends after an event that ends the run (``run_succeeded``, ``run_failed``, ...) unless
        ``follow`` (then it watches on, e.g. for a later ``run.rollback()``, until the caller
        stops iterating).

        Raises RunNotFoundError if the store has no such run, StoreError if it cannot be read.
        """
        from chainlab.runtime.coordination.watching import watch_events

        async for ev in watch_events(self, run_id, after_seq=after_seq, follow=follow,
                                     poll_interval=poll_interval):
            yield ev

    def estimates(self, chain: Chain) -> Any:
        """Expected duration of each step of ``chain`` (median, p90, samples, source: step
        history, tool history, the tool's hint, or the median of the known ones) as a pandas
        DataFrame (needs ``chainlab[jupyter]``); what ``priority="critical_path"`` ranks by."""
        from chainlab.timeline import estimates_frame

        if self._history is None:
            self._history = history(self.store)
        graph = compile_chain(chain, self.toolbox, self.chains, chain.options)
        return estimates_frame(estimate(graph.nodes, chain.name, self._history).values())

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs in the store, newest first."""
        return self.store.list_runs(limit)

    def waiting_decisions(self) -> list[WaitingDecision]:
        """The team inbox: every waiting confirmation and in-doubt step of every unfinished
        run in the store, oldest first (:mod:`chainlab.runtime.coordination.inbox`). Blocking
        read."""
        from chainlab.runtime.coordination.inbox import waiting_decisions

        return waiting_decisions(self.store)

    def watch_run(self, run_id: str) -> WatchedRun:
        """A handle of a run driven by another process, followed live through the store
        (a :class:`chainlab.runtime.coordination.watching.WatchedRun`). Raises RunNotFoundError."""
        from chainlab.runtime.coordination.watching import watch_run

        return watch_run(self, run_id)

    def runs_frame(self, limit: int | None = None) -> Any:
        """Runs as a pandas DataFrame (needs ``chainlab[jupyter]``)."""
        from chainlab.timeline import runs_frame

        return runs_frame(self.store, limit)

    async def decide(
        self,
        run_id: str,
        step_id: str,
        action: str,
        *,
        by: str | None = None,
        note: str | None = None,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
        output: Any = None,
        retry: bool = False,
        fail: bool = False,
        timeout: float = 10.0,
        budget: dict[str, Any] | None = None,
    ) -> str:
        """``approve`` (``args``, ``note``, ``budget``: raise a run's budget), ``reject``
        (``reason``) or ``resolve`` (``output`` | ``retry`` | ``fail``, ``note``) step
        ``step_id`` of a run, wherever it is driven: by this runtime (applied here), by
        another live process (sent to it through the store; it applies the decision with the
        same checks and answers), or by nobody
        (this runtime takes the run over, applies it, and drives the run on). ``by`` says
        who decides (default ``user@host``). Returns ``"applied"``.

        Raises ValueError (unknown action, arguments of another action), RunNotFoundError,
        RunStateError / UnknownStepError / DecisionError (the step does not wait for this
        decision, or the args/output do not fit; from a remote driver: DecisionError with
        its message), DecisionTimeoutError (the live driver did not answer within
        ``timeout`` seconds), DriverAliveError (a driver appeared while taking over).
        """
        from chainlab.runtime.coordination.routing import decide, payload_for

        payload = payload_for(action, note=note, reason=reason, args=args, output=output,
                              retry=retry, fail=fail, budget=budget)
        return await decide(self, run_id, step_id, action, by=by, payload=payload,
                            timeout=timeout)

    async def complete_job(self, run_id: str, step_id: str, *, output: Any = None,
                           error: str | None = None, by: str | None = None,
                           timeout: float = 10.0) -> str:
        """Complete the waiting remote job ``step_id`` of a run from outside (a callback):
        ``output=`` or ``error=``, wherever the run is driven (here, by another live process
        through the store's mailbox, or by nobody: then this runtime takes it over), as
        :meth:`decide` does. A completion that arrives before the job's waiter is armed is
        stored (``job_completed``) and read when it arms. Returns ``"applied"``.

        Raises RunStateError (not a waiting job; a second completion is refused),
        DecisionError (an output that is not JSON data), RunNotFoundError,
        DecisionTimeoutError."""
        from chainlab.runtime.coordination.routing import decide
        from chainlab.runtime.engine.decisions import completion_payload

        payload = completion_payload(step_id, output=output, error=error, by=None)
        payload.pop("by")
        return await decide(self, run_id, step_id, "complete_job", by=by, payload=payload,
                            timeout=timeout)

    def decide_sync(self, run_id: str, step_id: str, action: str, **options: Any) -> str:
        """:meth:`decide` from synchronous code (a script, not a running event loop: there,
        ``await runtime.decide(...)``). When it takes the run over, it drives the run to its
        next resting state (ended or suspended) before returning, as :meth:`run_sync` does."""

        async def main() -> str:
            try:
                outcome = await self.decide(run_id, step_id, action, **options)
                run = self._active.get(run_id)
                if run is not None and run._kernel is not None:
                    await run.wait()
                return outcome
            finally:
                await self.aclose()

        return anyio.run(main)

    def run_sync(
        self,
        chain: Chain,
        context: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Start a run and wait for it (terminal or suspended) from synchronous code."""

        async def main() -> RunResult:
            try:
                run = await self.start(chain, context, options)
                return await run.wait()
            finally:
                await self.aclose()

        return anyio.run(main)
