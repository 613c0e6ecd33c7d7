"""``Runtime``: starts, resumes and lists runs (``Run``, the handle, is in handle.py).

One async API. Scripts use ``runtime.run_sync(...)``; notebooks and widgets call the
coroutines on the kernel's running loop; there is no second, blocking copy of the methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import weakref
from collections import ChainMap
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import (
    PlanError,
    Problem,
)
from chainlab.events import (
    RUN_END_KINDS,
    RUN_TERMINAL,
    Event,
    EventKind,
    RunState,
    RunStatus,
    event_kind,
)
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.engine.clock import Clock, SystemClock
from chainlab.runtime.engine.compile import Graph, compile_chain
from chainlab.runtime.engine.executors import Executor, LocalExecutor
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.history.estimates import (
    History,
    estimate,
    history,
    recorded_order,
    release_order,
)
from chainlab.runtime.history.fork import ForkPlan
from chainlab.runtime.run import Run, RunResult
from chainlab.store.base import RunRecord, Store
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
        self._compiled: dict[str, tuple[Graph, dict[str, Any]]] = {}
        self._tasks: set[Any] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._history: History | None = None  # durations seen, for the release order
        self._orders: dict[tuple[int, str, str], tuple[Any, ...]] = {}  # see _release_order

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

    def _spawn(self, coro_fn: Callable[[], Any]) -> None:
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
        """Stop driving every run of this runtime (their state stays in the store)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self._active.clear()

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        if getattr(self.store, "blocking", True):
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

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

        Raises PlanError if the chain (with this context) does not validate.
        """
        try:
            data: dict[str, Any] = to_json_value(dict(context or {}))
        except NotJSONError as exc:
            raise PlanError(
                Problem("invalid_field", f"context must be JSON data: {exc}", field="context")
            ) from None
        opts = chain.options.merged(options)
        chain_json = chain.model_dump_json(exclude_defaults=True)
        graph, chain_data = self._prepare(chain, chain_json, opts, data)
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
            chains={n: c.to_dict() for n, c in self._used_chains(chain, self.chains).items()},
            context=data,
            options=opts.model_dump(mode="json", exclude_defaults=True),
            meta=dict(meta or {}),
        )
        if opts.priority != "declaration" and self._history is None:
            self._history = await self._blocking(history, self.store)
        priority, order = self._release_order(graph, chain.name, opts.priority)
        await self._blocking(self.store.create_run, record)
        state = RunState(run_id, graph.nodes)
        kernel = self._kernel(run_id, graph, state, opts, data, epoch=1, priority=priority)
        if self._history is not None:  # learn the durations when the run ends, before
            learned = self._history  # wait() returns, so the next start knows them
            kernel.on_end = lambda: learned.add_run(chain.name, state.attempts)
        kernel.emit(
            EventKind.RUN_STARTED,
            payload={
                "chain": chain.name,
                "steps": len(graph.nodes),
                "context_keys": sorted(data),
                "options": record.options,
                **order,
            },
            run_status=RunStatus.RUNNING,
        )
        for kind, payload in planning:
            if not str(kind).startswith("planning_"):
                raise ValueError(f"planning events are planning_*, got {kind!r}")
            kernel.emit(event_kind(kind), payload=dict(payload))
        if paused:
            kernel.pause_now(reason="start paused (step-through)")
        run = Run(self, chain, kernel, record)
        self._active[run_id] = run
        kernel.prepare_drive()
        self._spawn(lambda: self._drive(run, "start"))
        return run

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
        if active is not None and active._kernel is not None and active._kernel.driving:
            return active
        record = await self._blocking(self.store.get_run, run_id)
        if not force:
            await self.liveness.refuse_live(self, record)
        chain = Chain.from_dict(record.chain)
        chains = dict(self.chains)
        chains.update({n: Chain.from_dict(c) for n, c in record.chains.items()})
        opts = RunOptions.model_validate(record.options)
        raise_for_problems(chain, self.toolbox, chains=chains)
        graph = compile_chain(chain, self.toolbox, chains, opts)
        events = await self._blocking(self.store.load_events, run_id)
        state = RunState.from_events(run_id, events, graph.nodes)
        if check is not None:
            check(state)
        started: dict[str, Any] = next(
            (e.payload for e in events if e.kind == EventKind.RUN_STARTED), {}
        )
        # check-and-claim: the claim fails if anything was written since these events, so
        # the state rebuilt here (and checked) is exactly the state this process now owns
        last = events[-1].seq if events else 0
        epoch = await self._blocking(self.store.claim, run_id, record.epoch, last)
        kernel = self._kernel(run_id, graph, state, opts, record.context, epoch=epoch,
                              priority=recorded_order(started, graph.nodes))
        was = state.status
        kernel.emit(
            EventKind.RUN_RESUMED,
            payload={"reason": "recovery", "epoch": epoch, "was": str(was)},
            run_status=None
            if was in RUN_TERMINAL
            else (RunStatus.COMPENSATING if was == RunStatus.COMPENSATING else RunStatus.RUNNING),
        )
        run = Run(self, chain, kernel, record)
        self._active[run_id] = run
        if was in RUN_TERMINAL:
            kernel.settled_status = was
            await kernel.store.flush(run_id, epoch)
        else:
            from chainlab.runtime.engine.recovery import recover_now

            # rebuilt here, synchronously: control methods work as soon as this returns
            kernel.to_reconcile = recover_now(kernel)
            kernel.prepare_drive()
            self._spawn(lambda: self._drive(run, "recover"))
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
        return await self._blocking(
            lambda: self.fork_plan_sync(run_id, args=args, outputs=outputs, context=context,
                                        chain=chain, rerun=rerun))

    def fork_plan_sync(self, run_id: str, **edits: Any) -> ForkPlan:
        """:meth:`fork_plan` from synchronous code (a blocking read of the store)."""
        from chainlab.runtime.history.fork import plan_fork

        record = self.store.get_run(run_id)
        events = self.store.load_events(run_id)
        return plan_fork(record, events, self.toolbox, self.chains, **edits)

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
        ``forked_at_seq``). Raises as :meth:`fork_plan` (then nothing is written)."""
        from chainlab.runtime.history.fork import start_fork

        plan = await self.fork_plan(run_id, args=args, outputs=outputs, context=context,
                                    chain=chain, rerun=rerun)
        return await start_fork(self, plan, meta)

    def _release_order(
        self, graph: Graph, chain_name: str, policy: str
    ) -> tuple[Callable[[str], float] | None, dict[str, Any]]:
        """The release order for a start, re-ranked after 1, 2, 4, 8, 16 and then every 32
        learned runs (medians barely move after a few samples; ranking costs O(steps) per
        start, which a tight loop of short runs would pay every time)."""
        if policy == "declaration" or self._history is None:
            return release_order(graph.nodes, chain_name, policy, self._history)
        learned = self._history.runs
        key = (id(graph), chain_name, policy)
        cached = self._orders.get(key)
        if cached is not None and cached[0] is graph and (
            learned == cached[1] or (learned < 16 and learned & (learned - 1))
            or (learned >= 16 and learned - cached[1] < 32)
        ):
            return cached[2], cached[3]
        priority, order = release_order(graph.nodes, chain_name, policy, self._history)
        if len(self._orders) >= 64:
            self._orders.pop(next(iter(self._orders)))
        self._orders[key] = (graph, learned, priority, order)
        return priority, order

    def _prepare(
        self, chain: Chain, chain_json: str, opts: RunOptions, context: dict[str, Any]
    ) -> tuple[Graph, dict[str, Any]]:
        """Validate and compile, cached by content: starting the same chain again (a loop in
        a script, a benchmark, a notebook re-run) skips both. Returns the graph and the
        chain as JSON data (read-only: shared by the records of its runs)."""
        chains = self.chains
        used = self._used_chains(chain, chains)
        key = "\x1f".join(
            [
                chain_json,
                opts.model_dump_json(),
                ",".join(sorted(context)),
                *(c.model_dump_json() for c in used.values()),
            ]
        )
        cached = self._compiled.get(key)
        if cached is None:
            checked = chain if opts == chain.options else chain.model_copy(update={"options": opts})
            raise_for_problems(checked, self.toolbox, context=context, chains=chains)
            cached = compile_chain(chain, self.toolbox, chains, opts), json.loads(chain_json)
            if len(self._compiled) >= 64:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[key] = cached
        return cached

    async def _drive(self, run: Run, phase: str) -> None:
        kernel = run._kernel
        assert kernel is not None
        async with self.liveness.attend(self, run):  # heartbeat + mailbox while it drives
            await kernel.drive(phase)
        if kernel.state.status in RUN_TERMINAL and self._active.get(run.run_id) is run:
            del self._active[run.run_id]
            self._finished[run.run_id] = run

    def _kernel(
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

    def _used_chains(
        self, chain: Chain, chains: Mapping[str, Chain], seen: dict[str, Chain] | None = None
    ) -> dict[str, Chain]:
        seen = {} if seen is None else seen
        for step in chain.steps:
            name = step.subchain_name
            if name and name not in seen and name in chains:
                seen[name] = chains[name]
                self._used_chains(chains[name], chains, seen)
        return seen

    def get_run(self, run_id: str) -> Run:
        """The handle of a run: live if this runtime drives it, else a read-only view of the
        store (control methods then raise RunNotActiveError)."""
        live = self._active.get(run_id) or self._finished.get(run_id)
        if live is not None:
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
        wait = getattr(self.store, "wait_for_events", None)
        if wait is not None:  # listen BEFORE the first read: no commit falls in between
            await self._blocking(wait, run_id, after_seq, 0.0)
        seen = after_seq
        idle = poll_interval
        while True:
            events = await self._blocking(self.store.load_events, run_id, seen)
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
            if wait is not None:
                await anyio.to_thread.run_sync(wait, run_id, seen, max(poll_interval, 1.0),
                                               abandon_on_cancel=True)
            else:
                await anyio.sleep(idle)
                idle = min(idle * 2, max(poll_interval, 1.0))

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
    ) -> str:
        """``approve`` (``args``, ``note``), ``reject`` (``reason``) or ``resolve``
        (``output`` | ``retry`` | ``fail``, ``note``) step ``step_id`` of a run, wherever it is
        driven: by this runtime (applied here), by another live process (sent to it through
        the store; it applies the decision with the same checks and answers), or by nobody
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
                              retry=retry, fail=fail)
        return await decide(self, run_id, step_id, action, by=by, payload=payload,
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
