"""``RunView``: the read side of a run's handle (its state, live or stored; time travel
with ``state_at``; what a finished run did and what it would undo; the timeline views), and
``RunResult``, its summary. :class:`~chainlab.runtime.run.Run` adds to it what needs the run
driven by this process (waiting, the control verbs, the live event stream) and its rich
display; a handle of a stored run (no kernel) answers only what is here. A handle sees the
runtime that made it as :class:`RuntimeParts` (its parts and lifetime); the control verbs
see it as :class:`~chainlab.runtime.run.RunOwner`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from chainlab.errors import RunStateError, StaleEpochError, UnknownStepError
from chainlab.events import (
    RUN_TERMINAL,
    Event,
    RunState,
    RunStatus,
    StepState,
    read_run,
)
from chainlab.events.snapshots import FoldIndex
from chainlab.events.status import RELEASES_DEPENDANTS
from chainlab.plan.inputs import select_output
from chainlab.plan.schema import Chain, RunOptions
from chainlab.runtime.engine.attempt.kinds import KINDS
from chainlab.runtime.engine.growth import grown_graph
from chainlab.runtime.engine.saga import rollback_plan
from chainlab.runtime.preparing import toolbox_of
from chainlab.store.base import RunRecord

if TYPE_CHECKING:
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.compile import Graph
    from chainlab.runtime.engine.executors import Executor
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["RunResult", "RunView", "RuntimeParts"]


class RuntimeParts(Protocol):
    """A runtime's parts and lifetime, as a run's handle (and its driver's liveness) use
    them: :class:`~chainlab.runtime.hosting.Hosting` is exactly this, and so every
    :class:`~chainlab.runtime.Runtime`. Named here, below the runtime, so that a handle
    depends on what it uses of the runtime, not on the class that makes handles."""

    toolbox: Toolbox
    store: Store
    executor: Executor
    clock: Clock
    id_factory: Callable[[], str]

    @property
    def chains(self) -> Mapping[str, Chain]:
        """Chains usable as sub-chains."""

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a store method (in a worker thread when the store blocks)."""

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run a coroutine function in the background, in the runtime's lifetime."""


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


class RunView:
    """What a run's handle reads: status, steps, outputs, the stored log, its state at any
    event, and the views. Works for a run this process drives (read from its kernel) and
    for a stored one (read from the store once)."""

    def __init__(self, runtime: RuntimeParts, chain: Chain, kernel: Kernel | None,
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
