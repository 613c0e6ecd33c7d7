"""A validated chain compiled for the scheduler: flat nodes, sub-chains expanded.

Sub-chain steps become *group* nodes: when a group starts, its children (ids namespaced
``parent/child``) are released on the same scheduler; the group holds no slot and completes
when its children are done. A sub-chain that declares ``inputs`` gets its group's args
checked against them (defaults filled in) and one that declares an ``output`` gives it as
the group's output (:mod:`chainlab.plan.inputs`). A step's args are rendered by one small
object that walks them (templates parsed once, cached by their text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from chainlab.errors import InputError
from chainlab.plan.graph import dependencies
from chainlab.plan.inputs import fit_args
from chainlab.plan.refs import Expr, Ref, has_template, parse_condition, render_value
from chainlab.plan.schema import Chain, RetryPolicy, Rollback, RunOptions, Step
from chainlab.runtime.engine.scheduler import Topology

if TYPE_CHECKING:
    from chainlab.tools import Tool, Toolbox

__all__ = ["Graph", "Namespace", "Node", "compile_chain", "compile_value", "used_chains"]

DEFAULT_RETRY = RetryPolicy()
Renderer = Callable[[Callable[[Ref], Any]], Any]


@dataclass(frozen=True, slots=True)
class Namespace:
    """How references resolve for a node: its id prefix, its sub-chain group (whose args are
    the context) and the save_as keys visible to it."""

    prefix: str
    group: str | None
    save_as: Mapping[str, str]


@dataclass(slots=True, eq=False)
class Node:
    id: str
    step: Step
    tool: Tool | None
    order: tuple[int, ...]
    deps: tuple[str, ...]
    ns: Namespace
    render_args: Renderer
    static_args: dict[str, Any] | None
    when: Expr | None
    retry: RetryPolicy
    timeout_s: float | None
    rollback: Rollback | None
    group: str | None = None
    succ: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    subchain: Chain | None = None  # the chain a group node runs
    # a sub-chain step (no tool of its own); a field, not a property: read once per step
    is_group: bool = field(init=False)
    # whether the step waits for a person, when that does not depend on its args (None:
    # the tool's requires_confirmation is a function of them)
    fixed_confirm: bool | None = field(init=False)

    def __post_init__(self) -> None:
        self.is_group = self.tool is None
        if self.step.confirm is not None:
            self.fixed_confirm = self.step.confirm
        elif self.tool is None:
            self.fixed_confirm = False
        elif callable(self.tool.requires_confirmation):
            self.fixed_confirm = None
        else:
            self.fixed_confirm = bool(self.tool.requires_confirmation)

    def needs_confirmation(self, args: Mapping[str, Any]) -> bool:
        if self.fixed_confirm is not None:
            return self.fixed_confirm
        assert self.tool is not None  # (fixed_confirm is None only for a tool's rule)
        return self.tool.needs_confirmation(args)


@dataclass(slots=True)
class Graph:
    nodes: dict[str, Node]
    top: list[str]  # top-level node ids in declaration order
    # the scheduler's static view, built once and shared by every run of this graph
    topology: Topology = field(init=False)

    def __post_init__(self) -> None:
        self.topology = Topology({step_id: (n.deps, n.order) for step_id, n in self.nodes.items()})


def compile_value(value: Any) -> tuple[Renderer, bool]:
    """The renderer of a JSON value's templates and whether it has none: ``(render,
    is_static)``, where ``render(resolve)`` gives the value with every template resolved.
    One small object per value: it walks the value when called, each template parsed once
    (:func:`~chainlab.plan.refs.parse_template` caches them), where a closure per part cost a
    10,000-step chain 1.6 KB per step (issue 38)."""
    if not has_template(value):
        return partial(_as_is, value), True
    return partial(render_value, value), False


def _as_is(value: Any, resolve: Callable[[Ref], Any]) -> Any:
    return value


def compile_chain(
    chain: Chain, toolbox: Toolbox, chains: Mapping[str, Chain], options: RunOptions
) -> Graph:
    """Compile a VALIDATED chain (and its sub-chains) into scheduler nodes."""
    nodes: dict[str, Node] = {}
    top = _compile_level(chain, toolbox, chains, options, nodes, prefix="", group=None, order=())
    return Graph(nodes, top)


def _compile_level(
    chain: Chain,
    toolbox: Toolbox,
    chains: Mapping[str, Chain],
    options: RunOptions,
    nodes: dict[str, Node],
    *,
    prefix: str,
    group: str | None,
    order: tuple[int, ...],
) -> list[str]:
    deps = dependencies(chain)
    save_as = {s.save_as: prefix + s.id for s in chain.steps if s.save_as}
    ns = Namespace(prefix, group, save_as)
    ids = []
    for i, step in enumerate(chain.steps):
        step_id = prefix + step.id
        tool = None if step.is_subchain else toolbox.get(step.tool)
        child = chains[step.subchain_name or ""] if step.is_subchain else None
        render, static = compile_value(step.args)
        if child is not None and child.inputs is not None:
            render, static = _fitting(child, render), False
        node = Node(
            id=step_id,
            step=step,
            tool=tool,
            order=(*order, i),
            deps=tuple(prefix + d for d in sorted(deps[step.id])),
            ns=ns,
            render_args=render,
            static_args=dict(step.args) if static else None,
            when=parse_condition(step.when) if step.when else None,
            retry=(
                step.retry
                or (tool.retry if tool else None)
                or options.default_retry
                or DEFAULT_RETRY
            ),
            timeout_s=step.timeout_s
            or (tool.timeout_s if tool else None)
            or options.default_timeout_s,
            rollback=_rollback(step, tool),
            group=group,
            subchain=child,
        )
        nodes[step_id] = node
        ids.append(step_id)
        if child is not None:
            node.children = _compile_level(
                child,
                toolbox,
                chains,
                options,
                nodes,
                prefix=step_id + "/",
                group=step_id,
                order=node.order,
            )
    for step_id in ids:
        for d in nodes[step_id].deps:
            nodes[d].succ.append(step_id)
    return ids


def _fitting(child: Chain, render: Renderer) -> Renderer:
    """A sub-chain step's args renderer that checks them against the child's declared inputs
    and fills in its defaults (a misfit fails the step before it starts, as a bad reference
    does)."""
    def fitted(resolve: Callable[[Ref], Any]) -> Any:
        try:
            return fit_args(child, render(resolve))
        except InputError as exc:
            raise TypeError("; ".join(p.message for p in exc.problems)) from None

    return fitted


def _rollback(step: Step, tool: Tool | None) -> Rollback | None:
    if step.rollback == "none":
        return None
    if isinstance(step.rollback, Rollback):
        return step.rollback
    return tool.compensate if tool is not None else None


def used_chains(chain: Chain, chains: Mapping[str, Chain],
                seen: dict[str, Chain] | None = None) -> dict[str, Chain]:
    """The sub-chains ``chain`` uses, recursively, by name."""
    seen = {} if seen is None else seen
    for step in chain.steps:
        name = step.subchain_name
        if name and name not in seen and name in chains:
            seen[name] = chains[name]
            used_chains(chains[name], chains, seen)
    return seen
