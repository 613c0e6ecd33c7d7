"""``Runtime``: starts, enqueues, resumes, forks, lists and decides runs (``Run``, the handle,
is in run.py).

A facade that holds its parts, the way Temporal's ``Worker`` holds its activity and
workflow workers (issue 44): every public method and its docstring lives here and delegates
in one line to the part that does the work. ``self`` in a part means that part alone:

* :attr:`Runtime.host`, a :class:`~chainlab.runtime.host.Host`: the parts (toolbox, store,
  executor, clock, chains, liveness as a driver) and the lifetime (``spawn``, ``run_io``,
  ``aclose``), the runs it drives and the one tail that drives every run (``launch``);
* :attr:`Runtime.starts`, :class:`~chainlab.runtime.starts.Starts`: every way a NEW run
  begins (start, enqueue, fork);
* :attr:`Runtime.takeovers`, :class:`~chainlab.runtime.takeovers.Takeovers`: every way a
  STORED run is taken up (resume, a fleet worker's claim);
* :attr:`Runtime.experimenter`, :class:`~chainlab.runtime.experiments.ExperimentRunner`:
  experiments (many recorded runs replayed under a change, DESIGN §22).

Starts and Takeovers each hold the Host and nothing else; they inherit nothing. Reading runs
and deciding on them delegate to the coordination code (:mod:`.coordination.routing`,
:mod:`.coordination.watching`, :mod:`.coordination.inbox`), which works on the same parts
by their real types. A run's handle holds the Runtime as a
:class:`~chainlab.runtime.run.RunOwner` (a protocol: the handle sits below the class that
makes handles).

One async API. Scripts use ``runtime.run_sync(...)``; notebooks and widgets call the
coroutines on the kernel's running loop; there is no second, blocking copy of the methods.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio

from chainlab.runtime.experiments import Experiment, ExperimentRunner, Scorer
from chainlab.runtime.host import Host, new_run_id
from chainlab.runtime.run import Run, RunResult
from chainlab.runtime.starts import Starts
from chainlab.runtime.takeovers import Takeovers
from chainlab.store.queue import DEFAULT_QUEUE
from chainlab.tracing import tracing_for

if TYPE_CHECKING:
    from collections import ChainMap

    from chainlab.events import Event, RunState
    from chainlab.events.status import DrivePhase
    from chainlab.plan.policies import Policy
    from chainlab.plan.schema import Chain, RunOptions
    from chainlab.redaction import Redactor
    from chainlab.runtime.coordination.inbox import WaitingDecision
    from chainlab.runtime.coordination.liveness import Liveness
    from chainlab.runtime.coordination.watching import WatchedRun
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.executors import Executor
    from chainlab.runtime.history.experiment_plan import ExperimentPlan
    from chainlab.runtime.history.fork import ForkPlan
    from chainlab.store.base import RunRecord, Store
    from chainlab.store.experiments import ExperimentRecord
    from chainlab.store.queue import Claim
    from chainlab.tools import Toolbox

__all__ = ["Run", "RunResult", "Runtime", "new_run_id"]

class Runtime:
    """Starts, resumes and lists runs of chains built from one toolbox.

    ``store`` defaults to ``SQLiteStore(".chainlab/chainlab.db")``; pass ``MemoryStore()``
    for throwaway runs. ``executor`` defaults to :class:`LocalExecutor`; ``clock`` to the
    system clock; ``chains``: chains usable as sub-chains besides the toolbox's;
    ``id_factory`` names new runs; ``redact``: a function of a value returning it as it may
    leave the process (masked), applied to every value of its runs before it is stored,
    streamed, traced, exported or shown, while the tools and the model still see the real
    values (:mod:`chainlab.redaction`; a tool's own ``redact=`` applies first).
    While it drives a run it heartbeats it every ``heartbeat_s`` and reads decisions other
    processes send it every ``mailbox_poll_s`` (PostgreSQL: on NOTIFY); another driver is
    dead after ``stale_after_s`` without a beat (DESIGN §13,
    ``chainlab.runtime.coordination.liveness``).

    Traces (DESIGN §24, ``chainlab[otel]``): every run it drives is one OpenTelemetry trace
    in the GenAI conventions, sent to ``tracer_provider`` (default: the global provider when
    the application configured one; none, no cost; ``False``: never). ``capture_content``:
    args, outputs and model messages go to spans too (redacted first).
    ``policies``: the deployment's rules (DESIGN §21, :class:`chainlab.plan.policies.Policy`
    or its dict), in force before every run's own ``options.policies``, which cannot
    loosen them; checked against the toolbox here (PlanError for a rule that reads an arg
    its tool lacks; a warning for a tool glob that matches no tool).
    """

    #: the class of its :attr:`host`: a front end that drives runs on a loop of its own
    #: gives its own (:class:`chainlab.jupyter.runloop.LoopRuntime`)
    host_type: ClassVar[type[Host]] = Host

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
        tracer_provider: Any = None,
        capture_content: bool = False,
        redact: Redactor | None = None,
        policies: Sequence[Policy | Mapping[str, Any]] = (),
    ):
        #: its parts and lifetime, the runs it drives (:class:`~chainlab.runtime.host.Host`)
        self.host = self.host_type(self, toolbox, store, executor=executor, clock=clock,
                                   chains=chains, id_factory=id_factory,
                                   heartbeat_s=heartbeat_s, stale_after_s=stale_after_s,
                                   mailbox_poll_s=mailbox_poll_s, redact=redact,
                                   policies=policies)
        #: how its runs are traced (None: not at all; see :mod:`chainlab.tracing`)
        self.host.tracing = tracing_for(tracer_provider, capture_content=capture_content,
                                        redact=self.host.redact)  # (spans see events redacted)
        #: every way a new run begins (:class:`~chainlab.runtime.starts.Starts`)
        self.starts = Starts(self.host)
        #: every way a stored run is taken up (:class:`~chainlab.runtime.takeovers.Takeovers`)
        self.takeovers = Takeovers(self.host)
        #: experiments: many runs replayed under a change
        #: (:class:`~chainlab.runtime.experiments.ExperimentRunner`)
        self.experimenter = ExperimentRunner(self.host)

    # ------------------------------------------------------------------ its parts
    @property
    def toolbox(self) -> Toolbox:
        """The tools its runs call (``default_toolbox`` when none was given)."""
        return self.host.toolbox

    @property
    def store(self) -> Store:
        """Where its runs are stored."""
        return self.host.store

    @property
    def executor(self) -> Executor:
        """What calls a tool's body (a :class:`LocalExecutor` unless one was given)."""
        return self.host.executor

    @property
    def clock(self) -> Clock:
        """Its clock (the system clock unless one was given)."""
        return self.host.clock

    @property
    def id_factory(self) -> Callable[[], str]:
        """How it names a new run."""
        return self.host.id_factory

    @property
    def liveness(self) -> Liveness:
        """This runtime as a driver: its identity, heartbeat and mailbox settings."""
        return self.host.liveness

    @property
    def chains(self) -> ChainMap[str, Chain]:
        """Chains usable as sub-chains: those given here (assignments land here) over the
        toolbox's (read live)."""
        return self.host.chains

    # ------------------------------------------------------------------ lifetime
    async def __aenter__(self) -> Self:
        await self.host.enter()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self.host.exit(*exc)

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run ``coro_fn()`` in the background in this runtime (its task group, or a task on
        the running asyncio loop); :meth:`aclose` stops it."""
        self.host.spawn(coro_fn)

    async def aclose(self) -> None:
        """Stop driving every run of this runtime (their state stays in the store). A
        decision being answered is answered first (its requester waits for that answer)."""
        await self.host.aclose()

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``, a store read or write: in a worker thread when the store's
        calls block on I/O (``store.blocking``), else right here."""
        return await self.host.run_io(fn, *args)

    def driven(self, run_id: str) -> Run | None:
        """The handle of ``run_id`` if this runtime drives it right now, else None."""
        return self.host.driven(run_id)

    def release(self, run_id: str) -> bool:
        """Stop driving ``run_id`` here while it is suspended (it waits for a person and
        holds nothing: no call, no timer), leaving it in the store for whoever takes it up
        next (its driver row goes, so a decision on it is left to the store). A fleet
        worker releases every run that suspends: a suspended run holds no worker. Returns
        False (and does nothing) when the run is not driven here or not suspended."""
        return self.host.release(run_id)

    def _launch(self, run: Run, phase: DrivePhase) -> None:
        """Drive ``run`` from ``phase`` (a handle's rollback drives its run on)."""
        self.host.launch(run, phase)

    # ------------------------------------------------------------------ new runs
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
        return await self.starts.start(chain, context, options, run_id=run_id, meta=meta,
                                       paused=paused, planning=planning,
                                       idempotency_key=idempotency_key)

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
        return await self.starts.enqueue(chain, context, queue=queue, options=options,
                                         run_id=run_id, idempotency_key=idempotency_key,
                                         meta=meta, paused=paused)

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
        return await self.starts.fork_plan(run_id, args=args, outputs=outputs,
                                           context=context, chain=chain, rerun=rerun)

    def fork_plan_sync(self, run_id: str, **edits: Any) -> ForkPlan:
        """:meth:`fork_plan` from synchronous code (a blocking read of the store)."""
        return self.starts.fork_plan_sync(run_id, **edits)

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
        return await self.starts.fork(run_id, args=args, outputs=outputs, context=context,
                                      chain=chain, rerun=rerun, meta=meta)

    # ------------------------------------------------------------------ stored runs
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
        return await self.takeovers.resume(run_id, check=check, force=force)

    async def claimed(self, claim: Claim) -> Run:
        """Drive a run this runtime's worker claimed (:meth:`Queue.claim_next`: the claim
        already took the epoch and recorded the driver): a queued run from its start, any
        other from its stored state (a takeover, or a suspended run a person decided).

        Raises PlanError / ToolDefinitionError (this runtime's toolbox cannot run the
        chain: the caller hands the claim back), StaleEpochError."""
        return await self.takeovers.claimed(claim)

    # ------------------------------------------------------------------ reading runs
    def get_run(self, run_id: str) -> Run:
        """The handle of a run: live if this runtime drives it, else a read-only view of the
        store (control methods then raise RunNotActiveError)."""
        return self.host.get_run(run_id)

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

        # (an async generator itself, as before: a LoopRuntime hands it to its home loop)
        async for ev in watch_events(self.host, run_id, after_seq=after_seq, follow=follow,
                                     poll_interval=poll_interval):
            yield ev

    def estimates(self, chain: Chain) -> Any:
        """Expected duration of each step of ``chain`` (median, p90, samples, source: step
        history, tool history, the tool's hint, or the median of the known ones) as a pandas
        DataFrame (needs ``chainlab[jupyter]``); what ``priority="critical_path"`` ranks by."""
        from chainlab.timeline import estimates_frame

        return estimates_frame(self.host.estimates(chain))

    def runs(self, limit: int | None = None, *, chain: str | None = None,
             status: str | Sequence[str] | None = None,
             experiment: str | None = None) -> list[RunRecord]:
        """Runs in the store, newest first: ``chain`` (its name) and ``status`` (one or
        several) select among them, ``limit`` keeps the newest that many. An experiment's
        replays are left out unless ``experiment`` names it (then only its runs). Blocking
        read. The selection is what :meth:`experiment` takes as its ``runs``."""
        store = self.host.store
        # (a store written before experiments takes no ``experiment``: ask it only when set)
        listed = (lambda n: store.list_runs(n)) if experiment is None else (
            lambda n: store.list_runs(n, experiment=experiment))
        if chain is None and status is None:
            return listed(limit)
        wanted = {status} if isinstance(status, str) else set(status or ())
        found = [r for r in listed(None)
                 if (chain is None or r.chain_name == chain)
                 and (not wanted or str(r.status) in wanted)]
        return found[:limit] if limit else found

    def waiting_decisions(self) -> list[WaitingDecision]:
        """The team inbox: every waiting confirmation and in-doubt step of every unfinished
        run in the store, oldest first (:mod:`chainlab.runtime.coordination.inbox`). Blocking
        read."""
        from chainlab.runtime.coordination.inbox import waiting_decisions

        return waiting_decisions(self.host.store)

    def watch_run(self, run_id: str) -> WatchedRun:
        """A handle of a run driven by another process, followed live through the store
        (a :class:`chainlab.runtime.coordination.watching.WatchedRun`). Raises RunNotFoundError."""
        from chainlab.runtime.coordination.watching import watch_run

        return watch_run(self.host, run_id)

    def runs_frame(self, limit: int | None = None) -> Any:
        """Runs as a pandas DataFrame (needs ``chainlab[jupyter]``)."""
        from chainlab.timeline import runs_frame

        return runs_frame(self.host.store, limit)

    # ------------------------------------------------------------------ experiments
    async def experiment_plan(self, runs: Iterable[Any], **change: Any) -> ExperimentPlan:
        """What :meth:`experiment` would do, before anything runs: per recorded run its
        fork and, per step, the replay's decision (``live``: effect-free, it runs;
        ``recorded``: answered from the recording, never made; ``needs_live_effect``: a new
        side effect, NOT made, the replay stops there; ``ask``: a new side effect of a tool
        listed in ``live``, made only after a person approves it; ``at_run_time``: a side
        effect whose args are known only once upstream steps ran). ``change``: the keyword
        arguments of :meth:`experiment` but ``concurrency`` and ``name``. Raises as
        :meth:`experiment`; writes nothing."""
        return await self.experimenter.plan(runs, **change)

    async def experiment(self, runs: Iterable[Any], *, chain: Chain | None = None,
                         agents: Mapping[str, Any] | None = None,
                         tools: Iterable[Any] | None = None, context: Any = None,
                         live: Iterable[str] = (), recorded: bool = False,
                         scorers: Mapping[str, Scorer] | None = None, concurrency: int = 4,
                         name: str | None = None,
                         meta: Mapping[str, Any] | None = None) -> Experiment:
        """Replay recorded runs under a change and compare (DESIGN §22). ``runs``: run ids
        (or RunRecords: ``runtime.runs(chain=..., status=..., limit=...)``), each finished
        or suspended. The change: ``chain`` a new version of the chain; ``agents``
        ``{name: Agent}`` new instructions or another model; ``tools`` tools whose code
        changed (each replaces the tool of its name); ``context`` a mapping merged over the
        recorded context or a function of it.

        Each run is replayed as a NEW run marked as the experiment's (left out of ordinary
        run lists), up to ``concurrency`` at once; each call decided by its contract: an
        effect-free call runs live (from the recording with ``recorded=True`` when nothing
        changed it); a side-effecting call recorded with the same tool and args is answered
        from the recording and never made; a NEW side effect is not made: the replay stops
        there (outcome ``needs_live_effect``), unless its tool is in ``live``, and then it
        waits for a person's approval like any confirmation. A model request identical to a
        recorded one is answered from the recording (no tokens); a changed one asks the
        model. ``scorers``: ``{name: fn(original, new) -> number | bool}`` over
        :class:`RunResult` s (an error shows in its cell). ``meta``: kept with each replay
        (besides the experiment's id and its lineage), as :meth:`fork`'s.

        Returns when every replay is finished or waits for a person; the experiment is
        stored (:meth:`experiment_result`, :meth:`experiments`). Raises ExperimentError
        (runs missing or still running, runs of several chains without ``chain``, an agent
        the chains do not use, a scorer that is not callable: all listed) or the plan's
        PlanError for a change that does not validate; then nothing was started."""
        return await self.experimenter.run(
            runs, chain=chain, agents=agents, tools=tools, context=context, live=live,
            recorded=recorded, scorers=scorers, concurrency=concurrency, name=name, meta=meta)

    async def resume_experiment(self, experiment_id: str, *,
                                scorers: Mapping[str, Scorer] | None = None,
                                concurrency: int | None = None, force: bool = False,
                                **change: Any) -> Experiment:
        """Carry on a stored experiment that was interrupted (its process died, or it was
        stopped): the recorded runs it had not replayed yet are replayed, and each replay
        that is not finished is resumed (``force``: as :meth:`resume`); a recorded side
        effect is still answered from the recording, so none is made twice. The chain and
        a context mapping are read from the experiment's record; ``agents``, ``tools`` or a
        context function (Python objects, not stored) must be given again, and
        ``scorers`` to score the replays that finish now. Raises ExperimentNotFoundError,
        ExperimentError (a Python part of the change missing)."""
        return await self.experimenter.resume(experiment_id, scorers=scorers,
                                              concurrency=concurrency, force=force, **change)

    def experiment_result(self, experiment_id: str) -> Experiment:
        """A stored experiment read back (from any process): its rows compared from the
        stored runs as they are now (a replay resumed since shows its end) with the scores
        stored when it ran. Blocking read. Raises ExperimentNotFoundError."""
        return self.experimenter.result_sync(experiment_id)

    def experiments(self) -> list[ExperimentRecord]:
        """The stored experiments, newest first. Blocking read."""
        return self.experimenter.list_sync()

    def delete_experiment(self, experiment_id: str) -> list[str]:
        """Delete an experiment and its replays (their logs with them); returns the deleted
        run ids. The recorded runs are untouched. Raises ExperimentNotFoundError."""
        return self.experimenter.delete_sync(experiment_id)

    # ------------------------------------------------------------------ decisions
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
        grant: dict[str, Any] | None = None,
        roles: Sequence[str] | None = None,
    ) -> str:
        """``approve`` (``args``, ``note``, ``budget``: raise a run's budget, ``grant``: decide
        similar calls too, ``roles``: the roles of ``by``; see :meth:`Run.approve`), ``reject``
        (``reason``) or ``resolve`` (``output`` | ``retry`` | ``fail``, ``note``) step
        ``step_id`` of a run, wherever it is driven: by this runtime (applied here), by
        another live process (sent to it through the store; it applies the decision with the
        same checks and answers), or by nobody
        (this runtime takes the run over, applies it, and drives the run on). A run of a
        queue (DESIGN §19) is never taken over here: the decision is checked, recorded and
        left to the worker fleet, and the answer waited for up to ``timeout``. ``by`` says
        who decides (default ``user@host``). Returns ``"applied"``, or ``"recorded"`` for a
        queue's run no worker answered for yet (a worker applies it when one runs).

        Raises ValueError (unknown action, arguments of another action), RunNotFoundError,
        RunStateError / UnknownStepError / DecisionError (the step does not wait for this
        decision, or the args/output do not fit; from a remote driver: DecisionError with
        its message), DecisionTimeoutError (the live driver did not answer within
        ``timeout`` seconds), DriverAliveError (a driver appeared while taking over).
        """
        from chainlab.runtime.coordination.routing import decide, payload_for

        return await decide(self.host, self.takeovers, run_id, step_id, action, by=by,
                            timeout=timeout, payload=payload_for(
                                action, note=note, reason=reason, args=args, output=output,
                                retry=retry, fail=fail, budget=budget, grant=grant,
                                roles=roles))

    async def approve_all(self, run_id: str, step_id: str, *, by: str | None = None,
                          note: str | None = None, timeout: float = 10.0) -> list[str]:
        """Approve every step that waits for a confirmation at or under ``step_id`` (the
        waiting instances of a ``for_each`` step, the steps of a sub-chain), wherever the run
        is driven, each with its OWN args (:meth:`decide` once per step, each recorded as
        its own approval). A step decided meanwhile by someone else is left out. Returns the
        ids this call approved, in order. Raises RunNotFoundError, UnknownStepError, and as
        :meth:`decide` does."""
        from chainlab.runtime.coordination.routing import approve_all

        return await approve_all(self.host, self.takeovers, run_id, step_id, by=by,
                                 note=note, timeout=timeout)

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
        from chainlab.runtime.coordination.routing import complete_job

        return await complete_job(self.host, self.takeovers, run_id, step_id, output=output,
                                  error=error, by=by, timeout=timeout)

    # ------------------------------------------------------------------ blocking
    def decide_sync(self, run_id: str, step_id: str, action: str, **options: Any) -> str:
        """:meth:`decide` from synchronous code (a script, not a running event loop: there,
        ``await runtime.decide(...)``). When it takes the run over, it drives the run to its
        next resting state (ended or suspended) before returning, as :meth:`run_sync` does."""
        return anyio.run(_decided, self, run_id, step_id, action, options)

    def run_sync(
        self,
        chain: Chain,
        context: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Start a run and wait for it (terminal or suspended) from synchronous code."""
        return anyio.run(_ran, self, chain, context, options)


async def _decided(runtime: Runtime, run_id: str, step_id: str, action: str,
                   options: dict[str, Any]) -> str:
    """:meth:`Runtime.decide`, then the run taken over here to its next resting state."""
    try:
        outcome = await runtime.decide(run_id, step_id, action, **options)
        run = runtime.host.active(run_id)
        if run is not None and run.active:
            await run.wait()
        return outcome
    finally:
        await runtime.aclose()


async def _ran(runtime: Runtime, chain: Chain, context: Mapping[str, Any] | None,
               options: RunOptions | None) -> RunResult:
    """:meth:`Runtime.start`, then the run to its next resting state."""
    try:
        run = await runtime.start(chain, context, options)
        return await run.wait()
    finally:
        await runtime.aclose()
