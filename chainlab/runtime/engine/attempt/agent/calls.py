"""The steps an agent's model's calls become: the write side of a recorded turn (what the
turn is and how it is read back: :mod:`chainlab.agent.turns`).

A call's step is ``AGENT/TURN.N`` (``help/2.1``: turn 2, first call): an ordinary step of its
tool for every rule (attempts, retry safety, in_doubt, confirmation bound to its own args,
compensation), its kind the tool's (a call, a remote job, an agent) or ``chain`` for a
sub-chain, compiled under it as a sub-chain step's are. It is ``contained``: what becomes of
it (a failure, a rejection) is the model's to read, never a failure of the run by itself.
:func:`grow_calls` makes them when the turn is recorded and again after a restart (and for
every reader of a stored run); in a fork, :func:`fork_confirm` says which wait for a person.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chainlab.agent.turns import call_plan_step
from chainlab.runtime.engine.attempt.kind import confirms_in_fork
from chainlab.runtime.engine.compile import DEFAULT_RETRY, Node, compile_level

if TYPE_CHECKING:
    from chainlab.agent.turns import TurnRecorded
    from chainlab.runtime.engine.compile import Graph

__all__ = ["call_step_id", "fork_confirm", "grow_calls", "refused_streak"]

_CHAIN = "chain:"


def call_step_id(agent_id: str, turn: int, index: int) -> str:
    """The step id of call ``index`` (0-based) of turn ``turn`` of agent step ``agent_id``."""
    return f"{agent_id}/{turn}.{index + 1}"


def grow_calls(graph: Graph, nodes: Mapping[str, Node], parent: Node,
               recorded: TurnRecorded) -> list[Node]:
    """The nodes a recorded turn adds: its calls in the model's order, then (a sub-chain
    called as a tool) the sub-chain's steps under each such call."""
    options = graph.options
    turn = recorded.turn
    out: list[Node] = []
    inner: dict[str, Node] = {}
    for call in recorded.made:
        step_id, name, args = call.step_id, call.tool, call.args
        chain = graph.chains[name[len(_CHAIN):]] if name.startswith(_CHAIN) else None
        tool = None if chain is not None else graph.toolbox.get(name)
        node = Node(
            id=step_id, step=call_plan_step(name),
            tool=tool, order=(*parent.order, turn, call.index), deps=(), ns=parent.ns,
            render_args=_given(args), static_args=args, when=None,
            retry=(tool.retry if tool else None) or options.default_retry or DEFAULT_RETRY,
            timeout_s=(tool.timeout_s if tool else None) or options.default_timeout_s,
            rollback=tool.compensate if tool is not None else None,
            kind="chain" if chain is not None else tool.kind,  # type: ignore[union-attr]
            group=parent.id, subchain=chain,
            units=tool.resources if tool is not None and tool.resources else None,
            contained=True)
        out.append(node)
        if chain is not None:
            node.children = compile_level(graph, chain, inner, prefix=node.id + "/",
                                          group=node.id, order=node.order)
    for below in inner.values():  # a sub-chain the model called: its steps are the call's
        below.contained = True
    out.extend(inner.values())
    return out


def _given(args: dict[str, Any]) -> Any:
    """The renderer of args the model gave (nothing in them is a reference)."""
    return lambda resolve: args


def fork_confirm(nodes: Iterable[Node], parent_run: str | None) -> dict[str, Any]:
    """In a fork (DESIGN §11), the calls a re-asked agent makes that would change the world
    (and such steps of a sub-chain it calls) wait for a person first: the agent of the run
    it forks may have made them already. ``{step_id: card}`` for ``confirm_first``."""
    card = {"fork": {
        "parent_run": parent_run, "reason": "an agent step asked again in a fork",
        "note": f"this run is a fork of run {parent_run}: the agent's model chose this call "
                "anew, and the parent run's agent may have made it already"}}
    return {node.id: card for node in nodes if confirms_in_fork(node.tool)}


def refused_streak(turns: Sequence[TurnRecorded]) -> int:
    """How many of the last turns made no step (every call refused, or a final answer that
    did not fit): a model that keeps doing that is stopped."""
    n = 0
    for turn in reversed(turns):
        if not turn.fruitless:
            break
        n += 1
    return n
