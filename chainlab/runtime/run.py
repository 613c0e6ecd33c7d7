"""``Run``: the handle every front end uses, and ``RunResult``, what waiting for it returns.

One handle, one module: what it reads (status, steps, outputs, the stored log, its state
at any event with ``state_at``, what a finished run did and would undo, the timeline views)
works for a run this process drives (read from its kernel) and for a stored one (read from
the store once); what needs the run driven here (waiting, the control verbs: pause, step,
cancel, approve, reject, resolve, jobs, rollback, breakpoints; the live event stream)
raises RunNotActiveError on a stored handle. Faults for a demo or a test are injected into
a driven run from outside it: :func:`chainlab.runtime.faults.inject`.

The module is over 400 lines on purpose: the reads and the verbs share the handle's state
(the kernel or the stored fold, the cached log and compile), and the two halves were one
class stacked across two files by size (``RunView`` < ``Run``, issue 44); a facade over two
parts would repeat forty members as one-line delegates. A handle of a run another process drives,
:class:`~chainlab.runtime.coordination.watching.WatchedRun`, is a subclass by behaviour (its
state follows the store; its verbs go through ``Runtime.decide``), not by size.

A handle holds the runtime that made it as a :class:`RunOwner`: what its verbs and the front
ends (through ``run.runtime``) use of a :class:`~chainlab.runtime.Runtime`. It is a protocol
because the Runtime makes handles (it imports this module): naming the class here would
close an import circle. A driver's liveness serves a run through the same ``run.runtime``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chainlab.errors import RunNotActiveError, RunStateError, StaleEpochError, UnknownStepError
from chainlab.events import (
    RUN_END_KINDS,
    RUN_TERMINAL,
    Event,
    RunState,
    RunStatus,
    StepState,
    read_run,
)
from chainlab.events.snapshots import FoldIndex
from chainlab.events.status import RELEASES_DEPENDANTS, DrivePhase
from chainlab.plan.inputs import select_output
from chainlab.plan.schema import Chain, RunOptions
from chainlab.runtime.engine import decisions
from chainlab.runtime.engine.attempt.kinds import KINDS
from chainlab.runtime.engine.budget import budget_of
from chainlab.runtime.engine.growth import grown_graph
from chainlab.runtime.engine.kernel import Kernel
from chainlab.runtime.engine.saga import rollback_plan
from chainlab.runtime.preparing import toolbox_of
from chainlab.store.base import RunRecord

if TYPE_CHECKING:
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.compile import Graph
    from chainlab.runtime.engine.executors import Executor
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["Run", "RunOwner", "RunResult"]


class RunOwner(Protocol):
    """What a run's handle (and a front end, through ``run.runtime``) uses of the
    :class:`~chainlab.runtime.Runtime` that made it: its parts (toolbox, store, executor,
    clock, chains, run ids), store calls off the loop and background tasks, a decision
    wherever the run is driven, a stored run taken up, a run's handle, and driving a run on
    (a rollback). A protocol, not the class, because the Runtime makes handles: this module
    naming it would close an import circle (runtime -> run -> runtime)."""

    @property
    def toolbox(self) -> Toolbox:
        """The runtime's tools."""

    @property
    def store(self) -> Store:
        """Where its runs are stored."""

    @property
    def executor(self) -> Executor:
        """What calls a tool's body."""

    @property
    def clock(self) -> Clock:
        """Its clock."""

    @property
    def id_factory(self) -> Callable[[], str]:
        """How it names a new run."""

    @property
    def chains(self) -> Mapping[str, Chain]:
        """Chains usable as sub-chains."""

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a store method (in a worker thread when the store blocks)."""

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run a coroutine function in the background, in the runtime's lifetime."""

    async def decide(self, run_id: str, step_id: str, action: str, *, by: str | None = None,
                     note: str | None = None, reason: str | None = None,
                     args: dict[str, Any] | None = None, output: Any = None,
                     retry: bool = False, fail: bool = False, timeout: float = 10.0,
                     budget: dict[str, Any] | None = None) -> str:
        """Decide a step wherever its run is driven (:meth:`Runtime.decide`)."""

    async def approve_all(self, run_id: str, step_id: str, *, by: str | None = None,
                          note: str | None = None, timeout: float = 10.0) -> list[str]:
        """Approve every step waiting at or under ``step_id``, each with its own args."""

    async def resume(self, run_id: str, *, check: Callable[[RunState], None] | None = None,
                     force: bool = False) -> Run:
        """Take the run over in this process (check-and-claim)."""

    def get_run(self, run_id: str) -> Run:
        """The run's handle: live if driven here, else a view of the store."""

    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` in the background (the one way a run is driven)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What ``await run.wait()`` returns."""

    run_id: str
    status: RunStatus
    outputs: dict[str, Any]
    steps: dict[str, str]
    waiting: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # the chain's declared ``output`` selected from a succeeded run (else None)
    output: Any = None

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.SUCCEEDED

    @property
    def suspended(self) -> bool:
        return self.status == RunStatus.SUSPENDED


class Run:
    """A run's handle: status, outputs, control, events and views.

    Reads work on any handle. Control methods are coroutines and need the run to be driven
    by this process (``runtime.start`` or ``runtime.resume``); otherwise they raise
    RunNotActiveError.
    """

    def __init__(self, runtime: RunOwner, chain: Chain, kernel: Kernel | None,
                 record: RunRecord):
        self.runtime = runtime
        self.chain = chain
        self.run_id = record.run_id
        self.record = record
        self._kernel = kernel
        self._static: RunState | None = None
        self._events: list[Event] | None = None  # the log of a finished stored run
        self._folds: FoldIndex | None = None  # state_at's snapshots (time travel)
        # (toolbox, its size, what compiled() answered): a stored run is compiled once
        self._compiled: tuple[Any, int, tuple[Graph, RunOptions] | None] | None = None
        #: True for the handle an idempotent start returned for a run an earlier call with
        #: the same ``idempotency_key`` (and the same request) made: nothing new started
        self.replayed = False

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> RunState:
        if self._kernel is not None:
            return self._kernel.state
        if self._static is None:
            _, events, self._static = read_run(self.runtime.store, self.run_id)
            if self._static.status in RUN_TERMINAL:
                self._events = events  # state_at folds prefixes of it (time travel)
        return self._static

    def state_at(self, seq: int) -> RunState:
        """The run's state right after its event ``seq`` (0: before any event): the fold of
        the stored prefix of its log. No tool runs; works for live, finished and stored
        runs alike. Raises RunStateError when the run has no event ``seq``."""
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"seq must be an int, got {type(seq).__name__}")
        last = self.state.last_seq
        if not 0 <= seq <= last:
            raise RunStateError(
                f"run {self.run_id!r} has events 1..{last}; there is no event {seq}",
                run_id=self.run_id, status=str(self.status),
            )
        events = self.history()
        if self._folds is None:  # snapshots every K events: a scrubber's positions cost
            step_ids = [s["id"] for s in self.record.chain.get("steps", [])]  # K folds
            self._folds = FoldIndex(self.run_id, step_ids)
        return self._folds.state_at(events, seq)

    def history(self) -> list[Event]:
        """The stored event log (blocking read): read once for a finished run this process
        does not drive (a scrubber folds prefixes of it again and again), read again (after
        a flush) for a live one."""
        if self._events is not None:
            return self._events
        store = self.runtime.store
        if self._kernel is not None:
            store.flush_sync()  # a live run's log may still sit in the group-commit queue
            return store.load_events(self.run_id)
        events = store.load_events(self.run_id)
        if self.state.status in RUN_TERMINAL and events and events[-1].seq == self.state.last_seq:
            self._events = events
        return events

    def event_list(self) -> list[Event]:
        """Stored events of the run (blocking read)."""
        return self.runtime.store.load_events(self.run_id)

    @property
    def last_seq(self) -> int:
        """The seq of the run's latest event (what ``state_at`` can reach)."""
        return self.state.last_seq

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """``{"forked_from": parent run id, "forked_at_seq": seq}`` for a fork, else None."""
        meta = self.record.meta
        if "forked_from" not in meta:
            return None
        return {k: meta[k] for k in ("forked_from", "forked_at_seq") if k in meta}

    @property
    def active(self) -> bool:
        """True when this process drives the run (its control methods work)."""
        return self._kernel is not None

    @property
    def driving(self) -> bool:
        """True while a driver of this process is (or is about to be) moving the run."""
        return self._kernel is not None and self._kernel.driving

    @property
    def fenced(self) -> bool:
        """True once another driver took the run over: this handle writes nothing more."""
        k = self._kernel
        return k is not None and isinstance(k.error, StaleEpochError)

    @property
    def epoch(self) -> int:
        """The epoch this handle writes with (the driver's), else the stored one."""
        return self._kernel.epoch if self._kernel is not None else self.record.epoch

    @property
    def status(self) -> RunStatus:
        """The fold's status; a run with no event yet has its record's (``queued``)."""
        return self.state.status or RunStatus(self.record.status)

    @property
    def steps(self) -> dict[str, StepState]:
        return self.state.steps

    @property
    def outputs(self) -> dict[str, Any]:
        return self.state.outputs

    @property
    def memory(self) -> dict[str, Any]:
        """Outputs by ``save_as`` key (top-level steps)."""
        return {
            s.save_as: self.steps[s.id].output
            for s in self.chain.steps
            if s.save_as
            and self.steps[s.id].status in RELEASES_DEPENDANTS
        }

    @property
    def toolbox(self) -> Toolbox:
        """Where this run's tools come from: its runtime's toolbox, with the run's ad-hoc
        agent when it has one (:func:`chainlab.runtime.preparing.toolbox_of`)."""
        return toolbox_of(self.runtime.toolbox, self.record.meta, self.run_id)

    def compiled(self) -> tuple[Graph, RunOptions] | None:
        """The run's graph as it grew (its for_each steps' instances included) and its
        options (None when this process lacks its tools)."""
        if self._kernel is not None:
            return grown_graph(self._kernel.graph, self.state, KINDS), self._kernel.options
        from chainlab.runtime.engine.compile import compile_chain

        toolbox = self.toolbox
        known = self._compiled
        if known is not None and known[0] is toolbox and known[1] == len(toolbox):
            found = known[2]  # a stored run's chain does not change: compiled once (a view
        else:  # asks at every redraw)
            options = RunOptions.model_validate(self.record.options)
            chains = dict(self.runtime.chains)
            chains.update({n: Chain.from_dict(c) for n, c in self.record.chains.items()})
            try:
                found = compile_chain(self.chain, toolbox, chains, options), options
            except (KeyError, LookupError):  # a tool this process does not have
                found = None
            self._compiled = (toolbox, len(toolbox), found)
        if found is None:
            return None
        return grown_graph(found[0], self.state, KINDS), found[1]

    def undoable(self) -> list[str]:
        """The completed steps a rollback would compensate now, most recent first (the
        saga's own plan; empty when nothing has a compensation)."""
        if self._kernel is None and not _may_compensate(self.chain, self.runtime.toolbox):
            return []  # no step can be compensated: no need to compile a stored run
        compiled = self.compiled()
        if compiled is None:
            return []
        graph, options = compiled
        has = {step_id: n.rollback is not None for step_id, n in graph.nodes.items()}
        return rollback_plan(self.state, has, strict=options.rollback_mode == "strict")[0]

    def waiting(self) -> dict[str, str]:
        """Steps that wait for a person: ``{step_id: waiting_confirmation | in_doubt}``."""
        return self.state.waiting()

    def transcript(self, step_id: str) -> list[dict[str, Any]]:
        """An agent step's turns as data: per turn the model's text, its calls (the step
        each became, its status and what the model was told, or why it was refused) and
        the turn's usage; the final answer last (DESIGN §18). Raises UnknownStepError."""
        from chainlab.agent.turns import transcript  # (a run with no agent never loads it)

        state = self.state
        if step_id not in state.steps:
            raise UnknownStepError(step_id, state.steps, run_id=self.run_id)
        return transcript(state, step_id)

    def result(self) -> RunResult:
        st = self.state
        return RunResult(
            run_id=self.run_id,
            status=self.status,
            outputs=st.outputs,
            steps={step_id: str(s.status) for step_id, s in st.steps.items()},
            waiting=self.waiting(),
            errors={step_id: s.error for step_id, s in st.steps.items() if s.error},
            output=select_output(self.chain, st.outputs, self.record.context)
            if self.status == RunStatus.SUCCEEDED else None,
        )

    # ------------------------------------------------------------------ step-through
    def ready_steps(self) -> list[str]:
        """Steps released and waiting for a slot (or the Step button), in release order."""
        return self._k().ready_steps() if self._kernel else []

    @property
    def paused(self) -> bool:
        return self._kernel is not None and self._kernel.sched.paused

    # ------------------------------------------------------------------ waiting
    async def wait(self) -> RunResult:
        """Return when the run is terminal or suspended (a paused run keeps waiting).
        Raises the error that stopped the run's driver (e.g. StaleEpochError)."""
        k = self._k()
        while True:
            if k.error is not None:
                raise k.error
            settled = k.settled_status
            if (
                settled is not None
                and (settled in RUN_TERMINAL or settled == RunStatus.SUSPENDED)
                and settled == k.state.status
            ):
                return self.result()
            await k.wait_settled()

    # ------------------------------------------------------------------ control
    def _k(self) -> Kernel:
        if self._kernel is None:
            raise RunNotActiveError(
                f"run {self.run_id!r} is not driven by this process; "
                f"`run = await runtime.resume({self.run_id!r})` first",
                run_id=self.run_id,
                status=str(self.status),
            )
        return self._kernel

    def _for_fleet(self) -> bool:
        """A stored handle of a run that belongs to a queue: a decision on it is left to the
        worker fleet, never applied by taking the run over here (DESIGN §19)."""
        return self._kernel is None and self.record.queue is not None

    async def pause(self) -> None:
        """Release nothing new until ``step()`` or ``resume()``; running steps finish."""
        k = self._k()
        if not k.sched.paused:
            k.pause_now()
        await k.commit()

    async def unpause(self) -> None:
        """Leave step-through mode: release ready steps again. (To take over a stored run,
        suspended or crashed, in this process: ``runtime.resume(run_id)``.)"""
        k = self._k()
        k.unpause()
        await k.commit()

    async def step(self, step_id: str | None = None) -> str:
        """Release exactly one ready step (the first, or ``step_id``); pauses the run first if
        needed. Returns the step id. Raises RunStateError if nothing (or not it) is ready."""
        return self._k().step_once(step_id)

    async def cancel(self) -> None:
        """Stop: running calls are cancelled, nothing new starts, then completed steps are
        compensated (unless ``compensate_on_failure`` is off)."""
        self._k().cancel()

    async def approve(
        self, step_id: str, args: dict[str, Any] | None = None, note: str | None = None,
        *, by: str | None = None, budget: dict[str, Any] | None = None,
    ) -> None:
        """Approve a step waiting for confirmation. With ``args``, run those instead (they are
        validated again). ``by`` says who approves (default ``user@host``), recorded with the
        approval. ``budget``: for a step that waits because the run's budget would be crossed
        (reason ``budget_exceeded``), the raised limits (merged over the current ones). Raises
        RunStateError if the step is not waiting (saying who decided it),
        DecisionError for args that do not fit, StaleEpochError when another driver took the
        run over (then nothing was approved and the step's call does not start here).
        On a stored handle of a queue's run, the approval goes to the fleet
        (``runtime.decide``: recorded, and applied by a worker)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "approve", args=args, note=note,
                                      by=by, budget=budget)
            return
        k = self._k()
        k.require_step(step_id)
        k.apply(decisions.approve(k.state, k.nodes[step_id].tool, step_id, args, note,
                                  by or decisions.requester(), budget, budget_of(k)))
        await k.commit()

    async def approve_all(self, step_id: str, note: str | None = None, *,
                          by: str | None = None) -> list[str]:
        """Approve every step waiting for confirmation at or under ``step_id`` (the waiting
        instances of a ``for_each`` step, the steps of a sub-chain), each with its OWN args,
        each recorded as its own approval. Returns the ids approved (none: nothing waited).
        Raises UnknownStepError, StaleEpochError as :meth:`approve` does."""
        k = self._k()
        k.require_step(step_id)
        ids = decisions.waiting_under(k.state, step_id)
        who = by or decisions.requester()
        for sid in ids:
            k.apply(decisions.approve(k.state, k.nodes[sid].tool, sid, None, note, who,
                                      None, budget_of(k)))
        if ids:
            await k.commit()
        return ids

    async def reject(self, step_id: str, reason: str = "rejected", *,
                     by: str | None = None) -> None:
        """Reject a waiting step: its dependants are skipped; under fail_fast the run rolls
        back. ``by`` says who rejects. Raises RunStateError if the step is not waiting.
        On a stored handle of a queue's run, it goes to the fleet (``runtime.decide``)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "reject", reason=reason, by=by)
            return
        k = self._k()
        k.apply(decisions.reject(k.state, step_id, reason, by or decisions.requester()))
        await k.commit()

    async def resolve(
        self,
        step_id: str,
        *,
        output: Any = None,
        retry: bool = False,
        fail: bool = False,
        note: str | None = None,
        by: str | None = None,
    ) -> None:
        """Decide an in-doubt step: it took effect with ``output``, or ``retry`` it, or
        ``fail`` it. ``by`` says who decides. Raises RunStateError if it is not in doubt,
        DecisionError for an output that does not fit. On a stored handle of a queue's run,
        it goes to the fleet (``runtime.decide``)."""
        if self._for_fleet():
            await self.runtime.decide(self.run_id, step_id, "resolve", output=output,
                                      retry=retry, fail=fail, note=note, by=by)
            return
        k = self._k()
        tool = k.nodes[step_id].tool if step_id in k.nodes else None
        k.apply(decisions.resolve(k.state, tool, step_id, output=output, retry=retry,
                                  fail=fail, note=note, by=by or decisions.requester()))
        await k.commit()

    async def complete_job(self, step_id: str, *, output: Any = None,
                           error: str | None = None, by: str | None = None) -> None:
        """Complete a waiting remote job from outside (its callback): with ``output`` (the
        step's output) or ``error`` (it failed). Stored until the job's waiter reads it.
        Raises RunStateError (not a waiting job; a second completion), DecisionError."""
        from chainlab.runtime.engine.attempt.job.wait import complete_job

        k = self._k()
        k.require_step(step_id)
        decisions.check_completion(k.state, step_id)
        complete_job(k, step_id, decisions.completion_payload(
            step_id, output=output, error=error, by=by or decisions.requester()))
        await k.commit()

    async def cancel_job(self, step_id: str) -> None:
        """Cancel one waiting remote job where it runs (``cancel(handle)``); its step fails
        (not retried) and the run goes on as after any failure (``run.cancel()`` cancels
        every waiting job, with the run). Raises RunStateError when the step is not a job
        that waits in this process."""
        from chainlab.runtime.engine.attempt.job.wait import cancel_job

        k = self._k()
        k.require_step(step_id)
        cancel_job(k, step_id)

    async def rollback(self) -> None:
        """Compensate completed steps in reverse completion order (stopping the run first if
        it is still going). On a rolled-back-with-failures run, retries what failed.
        Raises RunNotActiveError (not driven here), RunStateError (nothing to roll back)."""
        k = self._k()
        decisions.check_rollback(k.state)
        if await k.begin_rollback():
            self.runtime._launch(self, DrivePhase.ROLLBACK)

    def set_breakpoints(self, step_ids: Sequence[str]) -> None:
        """Pause before these steps start (replaces the current set). Raises
        UnknownStepError for an id that is not a step of the run."""
        k = self._k()
        for step_id in step_ids:
            k.require_step(step_id)
        k.sched.set_breakpoints(step_ids)  # a breakpoint set again fires again

    @property
    def breakpoints(self) -> set[str]:
        return set(self._k().sched.breakpoints) if self._kernel else set()

    # ------------------------------------------------------------------ events
    def subscribe(self, callback: Callable[[Any], None], *,
                  deltas: bool = False) -> Callable[[], None]:
        """Call ``callback(event)`` for every new event; returns an unsubscribe function.
        With ``deltas=True`` it is also called with each piece of a streamed model answer
        as it arrives (:class:`~chainlab.agent.model.ModelDelta`, ``kind ==
        "model_delta"``: an agent with ``stream=True``), in this process only, never stored
        (the turn comes whole as its event when it ends)."""
        k = self._k()
        k.subscribers.append(callback)
        if deltas:
            k.delta_subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in k.subscribers:
                k.subscribers.remove(callback)
            if callback in k.delta_subscribers:
                k.delta_subscribers.remove(callback)

        return unsubscribe

    async def events(self, *, history: bool = True) -> AsyncIterator[Event]:
        """Async stream of events (stored history first, then live) until the run is
        terminal."""
        k = self._k()
        send, receive = anyio.create_memory_object_stream[Event](float("inf"))
        unsubscribe = self.subscribe(send.send_nowait)
        try:
            last, last_kind = 0, ""
            if history:
                await k.commit()  # history = everything emitted so far
                for ev in await self.runtime.run_io(self.runtime.store.load_events, self.run_id):
                    last, last_kind = ev.seq, ev.kind
                    yield ev
            ended = k.state.status in RUN_TERMINAL and k.state.last_seq == last
            if ended and last_kind in RUN_END_KINDS:
                return  # the history already ends with the run's end
            if k.state.status in RUN_TERMINAL and k.settled_status in RUN_TERMINAL \
                    and not k.driving:
                # nothing more will come; what came while the history was read (the run
                # may have ended meanwhile) is in the subscription's buffer
                while True:
                    try:
                        ev = receive.receive_nowait()
                    except anyio.WouldBlock:
                        return
                    if ev.seq > last:
                        yield ev
            async with receive:
                async for ev in receive:
                    if ev.seq <= last:
                        continue
                    yield ev
                    if ev.kind in RUN_END_KINDS:
                        return
        finally:
            unsubscribe()
            send.close()

    # ------------------------------------------------------------------ views
    def attempts(self) -> Any:
        """Attempts and compensations as a DataFrame (see chainlab.timeline)."""
        from chainlab.timeline import attempts_frame

        return attempts_frame(self.runtime.store, self.run_id)

    def compensations(self) -> Any:
        from chainlab.timeline import compensations_frame

        return compensations_frame(self.runtime.store, self.run_id)

    def event_log(self) -> Any:
        from chainlab.timeline import events_frame

        return events_frame(self.runtime.store, self.run_id)

    def plot_timeline(self, **kwargs: Any) -> Any:
        from chainlab.timeline import plot_timeline

        return plot_timeline(self.runtime.store, self.run_id, **kwargs)

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from chainlab.render import run_mimebundle

        return run_mimebundle(self)

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.chain.name!r} {self.status}>"


def _may_compensate(chain: Chain, toolbox: Any) -> bool:
    """Whether any step of ``chain`` could have a compensation (its own ``rollback``, or its
    tool's ``compensate``); a step that calls no tool of ``toolbox`` (a sub-chain, an agent,
    a tool this process lacks) counts as one that could: the compiler knows."""
    for step in chain.steps:
        if step.tool not in toolbox or (step.rollback is not None and step.rollback != "none"):
            return True
        if step.rollback is None and toolbox.get(step.tool).compensate:
            return True
    return False
