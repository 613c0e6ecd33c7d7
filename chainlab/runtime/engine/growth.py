"""A run's grown graph, rebuilt from its log (DESIGN §17): each ``steps_added`` event, in log
order, adds the nodes its parent's kind says (:meth:`.attempt.kind.Kind.regrow`).

:func:`regrow` puts them into a run being taken over (recovery, before the scheduler is
rebuilt); :func:`grown_nodes` gives them to a reader of a stored run (fork, what-if, the
views), so every reader sees the same graph the run had."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from chainlab.runtime.engine.attempt.kind import kind_of
from chainlab.runtime.engine.compile import Graph

if TYPE_CHECKING:
    from chainlab.events import RunState
    from chainlab.runtime.engine.attempt.kind import Kind
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["grown_graph", "grown_nodes", "regrow"]


def grown_nodes(graph: Graph, state: RunState, kinds: Mapping[str, Kind]) -> dict[str, Node]:
    """The nodes of ``graph`` plus every node the run (folded as ``state``) grew; the
    compiled graph itself is not changed."""
    if not state.growth:
        return graph.nodes
    nodes = dict(graph.nodes)
    for parent_id, payload in state.growth:
        parent = nodes[parent_id]
        for node in kinds[parent.kind].regrow(graph, nodes, parent, payload):
            nodes[node.id] = node
    return nodes


def grown_graph(graph: Graph, state: RunState, kinds: Mapping[str, Kind]) -> Graph:
    """``graph`` as the run (folded as ``state``) grew it: a new :class:`Graph` whose nodes
    include the grown ones, each parent listing its grown steps as ``children`` (so a
    reader walks a grown parent as it walks a sub-chain). ``graph`` itself is unchanged."""
    if not state.growth:
        return graph
    nodes = grown_nodes(graph, state, kinds)
    for parent_id, ids in state.children.items():
        node = nodes[parent_id]
        nodes[parent_id] = replace(node, children=list(ids), succ=list(node.succ))
    return Graph(nodes, graph.top, graph.toolbox, graph.chains, graph.options)


def regrow(k: RunCore) -> None:
    """Put the steps a run grew before it was taken over into its graph and scheduler."""
    for parent_id, payload in k.state.growth:
        parent = k.nodes[parent_id]
        k.add_nodes(kind_of(k, parent).regrow(k.graph, k.nodes, parent, payload))
