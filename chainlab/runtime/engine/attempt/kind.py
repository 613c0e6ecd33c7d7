"""The one protocol every kind of step runs through (DESIGN §17, seed 004): the kernel,
recovery, the saga and fork call it and never ask which kind they hold.

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
=============  ============================================================================

The kinds, registered in :mod:`.kinds`: :class:`.call.ToolCall` (``call``),
:class:`.job.RemoteJob` (``job``), :class:`.chain.SubChain` (``chain``),
:class:`.for_each.ForEach` (``for_each``) and :class:`.agent.AgentStep` (``agent``). A new kind
of step is a new module here, named after it, and a line there, and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chainlab.events import ErrorKind, EventKind, StepStatus
from chainlab.runtime.engine.scheduler import Phase

if TYPE_CHECKING:
    from chainlab.events import StepState
    from chainlab.runtime.engine.compile import Graph, Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["Kind", "Parent", "kind_of"]

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
    #: its steps are made while the run goes (``steps_added``), not compiled with the chain
    grows: ClassVar[bool] = False
    #: a fork grows it again and decides its steps one by one (a for_each step's instances,
    #: by their args); a kind that grows but is not (an agent step: its model chooses its
    #: calls anew) is decided as one step: reused, or run again
    regrows_in_fork: ClassVar[bool] = False

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
