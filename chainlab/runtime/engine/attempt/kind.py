"""The one protocol every kind of step runs through (DESIGN §17, seed 004): the kernel,
recovery, the saga, fork and what-if call it and never ask which kind they hold.

=============  ============================================================================
protocol       what each kind does there
=============  ============================================================================
prepare        (:func:`.call.gate`, before anything else, for a kind that calls something)
               the confirmation for exactly these args and the budget: the rule every
               path goes through; a step that fails it waits for a person and holds nothing
start / wait   :meth:`Kind.run`: a worker took the step from the scheduler (a slot held
               while it runs). A tool call starts and waits for its body; a remote job
               submits once (write-ahead), records the handle and waits holding no slot; a
               sub-chain starts its steps; a ``for_each`` step grows its instances
record         each kind records its outcome with the attempt's events (:func:`.call.fate.record`
               for a call: retry, in_doubt or failed by the safety rule);
               :meth:`Kind.child_settled`: the last of a parent's steps finished (a
               sub-chain, the instances of a ``for_each`` step): it settles
recover        :meth:`Kind.recover` (synchronous, while the scheduler is rebuilt after a
               restart) and :meth:`Kind.reconcile` (what must await: a tool's reconcile, a
               job's find): an attempt that was under way when the process stopped
cancel         :meth:`Kind.cancel`: the run stops with the step unsettled
fork           :meth:`Kind.fork_decide`: a fork being planned decides the step (a
               :class:`Fork`: the fork's decision table): as one step, reused or run again
               (every kind but one), or a ``for_each`` step instance by instance, matched
               with the parent's instances by their args; :meth:`Kind.waiting_handle`: a
               remote job the fork may wait on too
=============  ============================================================================

The kinds, registered in :mod:`.kinds`: :class:`.call.ToolCall` (``call``),
:class:`.job.RemoteJob` (``job``), :class:`.chain.SubChain` (``chain``),
:class:`.for_each.ForEach` (``for_each``) and :class:`.agent.AgentStep` (``agent``). A new kind
of step is a new module here, named after it, and a line there, and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from chainlab.events import ErrorKind, EventKind, StepStatus
from chainlab.runtime.engine.scheduler import Phase

if TYPE_CHECKING:
    from chainlab.events import StepState
    from chainlab.plan.refs import Ref
    from chainlab.runtime.engine.compile import Graph, Node
    from chainlab.runtime.engine.core import RunCore
    from chainlab.tools import Tool

__all__ = ["Fork", "Kind", "Parent", "confirms_in_fork", "kind_of"]

S = StepStatus
K = EventKind


class Kind:
    """How one kind of step runs (the protocol above). Stateless: one object per kind,
    shared by every run; a run's state is the :class:`RunCore` passed in."""

    #: the kind's name (``Node.kind``)
    name: ClassVar[str] = ""
    #: it has steps of its own (a sub-chain's, a for_each step's instances): it holds no
    #: slot while they run, settles when they have, and a rollback undoes it through them
    has_children: ClassVar[bool] = False

    @staticmethod
    def children(k: RunCore, node: Node) -> list[str]:
        """Its steps (a parent's): compiled with it (a sub-chain's) or grown while the run
        goes (a for_each step's instances); none for a kind without steps of its own."""
        return node.children or k.state.children.get(node.id, [])

    async def run(self, k: RunCore, node: Node) -> None:
        """A worker took the step (it holds a slot until this returns): start an attempt
        and record what came of it."""
        raise NotImplementedError

    def child_settled(self, k: RunCore, node: Node) -> None:
        """Every step of this parent has finished (called once per settling)."""
        raise NotImplementedError(f"a {self.name} step has no steps of its own")

    def recover(self, k: RunCore, node: Node) -> bool:
        """The process stopped while the step was ``running``: settle it now where that
        can be decided at once; True when :meth:`reconcile` must still run (the driver
        awaits it)."""
        raise NotImplementedError

    async def reconcile(self, k: RunCore, node: Node) -> None:
        """The awaited part of :meth:`recover`."""

    def recount(self, k: RunCore, node: Node) -> None:
        """After a restart, once every step is rebuilt: a parent counts its open steps
        (settled when none is). Nothing for a kind without steps of its own."""

    def regrow(self, graph: Graph, nodes: Mapping[str, Node], parent: Node,
               payload: Mapping[str, Any]) -> list[Node]:
        """The nodes a recorded ``steps_added`` of this kind added (rebuilt after a
        restart, and by every reader of a stored run)."""
        raise NotImplementedError(f"a {self.name} step does not grow")

    def fork_decide(self, fork: Fork, node: Node, ps: StepState | None) -> None:
        """Decide the step in a fork being planned (DESIGN §11; ``ps``: its state in the
        parent run): as one step, by the fork's decision table (reused when it succeeded
        with the same tool, code and args, given, run again, or confirmed first), as every
        kind but a for_each step is (an agent step too: its model would choose its calls
        anew, so it is reused as a whole or asked again)."""
        fork.decide_one(node, ps)

    def waiting_handle(self, ps: StepState | None) -> dict[str, Any] | None:
        """What a fork of a run where this step still waits (``ps``: its state there) may
        wait on too instead of calling again (a remote job's recorded handle); else None."""
        return None

    def cancel(self, k: RunCore, node: Node) -> None:
        """The run stops while this step is unsettled (it never ran, waits for a person or
        a back-off): it is cancelled. A parent's steps were cancelled before it."""
        st = k.steps[node.id]
        if st.status in (S.PENDING, S.READY, S.WAITING_CONFIRMATION, S.RETRY_WAIT):
            k.emit(K.STEP_CANCELLED, node.id, payload={"reason": k.stop_reason
                                                       or str(k.stopping)})


class Parent(Kind):
    """A kind whose step has steps of its own (a sub-chain, a for_each step): it holds no
    slot while they run and settles when the last of them has finished."""

    has_children = True
    #: what it is called in a message ("sub-chain", "for_each step")
    what: ClassVar[str] = "parent"

    def recover(self, k: RunCore, node: Node) -> bool:
        """Its steps recover one by one; it keeps holding no slot (:meth:`recount` settles
        it once they have all been rebuilt)."""
        k.args[node.id] = dict(k.steps[node.id].args or {})
        k.sched.park(node.id)
        return False

    def recount(self, k: RunCore, node: Node) -> None:
        """After a restart: how many of its steps are still open; settled when none is."""
        ids = self.children(k, node)
        left = sum(1 for step_id in ids if k.sched.phase(step_id) != Phase.DONE)
        k.open_children[node.id] = left
        if left == 0:
            self.child_settled(k, node)

    def cancel(self, k: RunCore, node: Node) -> None:
        """The run stops (its steps were cancelled first): a parent whose steps failed
        fails with them; else it is cancelled."""
        st = k.steps[node.id]
        if st.status == S.RUNNING:
            steps = k.steps
            bad = [c for c in self.children(k, node)
                   if steps[c].status in (S.FAILED, S.REJECTED, S.IN_DOUBT)]
            if bad:
                k.emit(K.STEP_FAILED, node.id, st.attempts, {
                    "error_kind": ErrorKind.EXECUTION_FAILED,
                    "error": f"{self.what} stopped: "
                    + ", ".join(f"{c} {steps[c].status}" for c in bad[:20])
                    + (f" (+{len(bad) - 20} more)" if len(bad) > 20 else "")})
            else:
                k.emit(K.STEP_CANCELLED, node.id, st.attempts, {"reason": k.stop_reason})
        elif st.status in (S.PENDING, S.READY, S.WAITING_CONFIRMATION):
            k.emit(K.STEP_CANCELLED, node.id, payload={"reason": k.stop_reason})


def kind_of(k: RunCore, node: Node) -> Kind:
    """How ``node`` runs in ``k`` (its kind: a tool call, a remote job, a sub-chain, a
    for_each step ...): what every part of the engine asks instead of switching on a kind."""
    kind: Kind = k.kinds[node.kind]
    return kind


def confirms_in_fork(tool: Tool | None) -> bool:
    """A call of ``tool`` that a fork runs again waits for a person first: it changes the
    world and the run forked from may have made it already (unless the tool is idempotent
    and can reconcile: it finds its own effect). The one rule for the fork's plan and for
    what a for_each step or an agent grows in the fork."""
    return tool is not None and tool.side_effects and not (tool.idempotent and tool.reconcile)


class Fork(Protocol):
    """A fork being planned (DESIGN §11), as a kind deciding its step sees it: the fork's
    graph, what the parent run did and the decision table's own verbs
    (:class:`chainlab.runtime.history.fork_rules.Planner` is one). A kind decided as one step
    hands it back (:meth:`decide_one`); a for_each step reads its list and decides each of
    its instances, then records its rows (:meth:`row`, :meth:`decided`)."""

    @property
    def graph(self) -> Graph:
        """The fork's graph."""

    @property
    def outputs(self) -> Mapping[str, Any]:
        """The outputs a person gives instead of running, by step id."""

    def decide_one(self, node: Node, ps: StepState | None) -> None:
        """The decision table for a step decided as one (reuse, override, rerun, confirm,
        attach a job still waiting)."""

    def parent_children(self, step_id: str) -> list[dict[str, Any]]:
        """What each step the parent run grew under ``step_id`` did there, in order: its
        ``status``, ``args``, ``args_hash``, ``output``, ``error``, and whether it can be
        ``reusable`` (with ``source_run``, ``source_attempt``, ``code``, ``origin``,
        ``tool``: where its effect was really made). Handed to the fork's run as well,
        which reuses by it as the step grows there."""

    def read(self, node: Node, ref: Ref) -> tuple[Any, str | None]:
        """The value ``ref`` (in ``node``'s namespace) has in the fork now, ``(value,
        None)``; or ``(None, why)`` when it is not known before the fork runs."""

    def args_of(self, node: Node) -> dict[str, Any] | None:
        """``node``'s args in the fork, or None when they are not known before it runs."""

    def condition_changed(self, node: Node) -> str | None:
        """Why a step the parent ran would not run the same way now because of its
        ``when``; None when it would."""

    def checked_output(self, node: Node, value: Any) -> Any:
        """An output a person gives for ``node``, checked against its tool. Raises
        DecisionError."""

    def row(self, step_id: str, tool: str, decision: str, reason: str, **fields: Any) -> Any:
        """A row of the fork plan (``decision``: reuse, override, rerun, confirm); ``fields``
        are the row's others (``args``, ``output``, ``parent_status``, ...)."""

    def decided(self, node: Node, ps: StepState | None, row: Any, *,
                instances: Sequence[Any] = (), same_output: bool = False) -> None:
        """Record ``node``'s row, with the rows of the steps it grows in the fork when known
        (``instances``); ``same_output``: the fork's output of the step is the parent's
        although it runs again (every instance reused)."""
