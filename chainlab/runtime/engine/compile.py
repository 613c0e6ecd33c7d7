"""A validated chain compiled for the scheduler: flat nodes, sub-chains expanded.

Each node names its *kind* (``call``, ``job``, ``chain``, ``for_each``, ...: how it runs is
that kind's business, :mod:`chainlab.runtime.engine.attempt.kinds`): the step says what it is
(``chain:NAME``, ``for_each``), else its tool does (``Tool.kind``).

Sub-chain steps become *parent* nodes: when one starts, its children (ids namespaced
``parent/child``) are released on the same scheduler; it holds no slot and completes when
its children are done. A sub-chain that declares ``inputs`` gets its step's args checked
against them (defaults filled in) and one that declares an ``output`` gives it as the
step's output (:mod:`chainlab.plan.inputs`). A ``for_each`` step is a parent whose children
are made at run time, one per item (:class:`Each` is how; :func:`compile_level` compiles a
sub-chain under an instance). A step's args are rendered by one small object that walks
them (templates parsed once, cached by their text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from chainlab.errors import InputError
from chainlab.plan.graph import dependencies
from chainlab.plan.inputs import fit_args
from chainlab.plan.refs import (
    Expr,
    Ref,
    has_template,
    parse_condition,
    parse_template,
    render_value,
)
from chainlab.plan.schema import Chain, RetryPolicy, Rollback, RunOptions, Step
from chainlab.runtime.engine.scheduler import Topology

if TYPE_CHECKING:
    from chainlab.tools import Tool, Toolbox

__all__ = ["Each", "Graph", "Namespace", "Node", "compile_chain", "compile_level",
           "compile_value", "used_chains"]

DEFAULT_RETRY = RetryPolicy()
Renderer = Callable[[Callable[[Ref], Any]], Any]


@dataclass(frozen=True, slots=True)
class Each:
    """How a ``for_each`` step makes its instances: the list it runs over, and what every
    instance shares (compiled once, whatever the number of items)."""

    source: Ref  # the whole reference to the list
    kind: str  # the instances' kind (the step's, as if it had no for_each)
    render_args: Renderer
    static_args: dict[str, Any] | None
    when: Expr | None
    retry: RetryPolicy
    timeout_s: float | None
    rollback: Rollback | None
    units: Mapping[str, int] | None  # each instance's pool units (its tool's; its step's cap)
    pool: str | None  # the pool that caps the step's instances in flight (max_concurrency)
    limit: int | None  # that cap


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
    kind: str = "call"  # how it runs: the name of its attempt kind (attempt.kinds)
    # the parent it settles: its sub-chain's step, its for_each step, its agent step
    group: str | None = None
    succ: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    subchain: Chain | None = None  # the chain a sub-chain step (or its instances) runs
    # a for_each instance: its item and its position (None: not an instance); its args and
    # `when` read them as {{ item }} (or the step's `as` name) and {{ index }}
    item: Any = None
    index: int | None = None
    each: Each | None = None  # a for_each step: how its instances are made
    units: Mapping[str, int] | None = None  # the pool units it takes (its tool's resources)
    # an agent's call (or a step of a sub-chain an agent called): what becomes of it is the
    # model's to read, so its failure or rejection never stops or fails the run by itself
    contained: bool = False
    # whether the step waits for a person, when that does not depend on its args (None:
    # the tool's requires_confirmation is a function of them)
    fixed_confirm: bool | None = field(init=False)
    # its tool has a serial key (resolved from its args when it is ready)
    keyed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.keyed = self.each is None and self.tool is not None \
            and self.tool.serial_key is not None
        if self.each is not None:
            self.fixed_confirm = False  # each instance asks for itself, with its own args
        elif self.step.confirm is not None:
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
    # what it was compiled with: a step that grows at run time compiles with them too
    toolbox: Toolbox
    chains: Mapping[str, Chain]
    options: RunOptions
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
    return Graph(nodes, top, toolbox, chains, options)


def compile_level(graph: Graph, chain: Chain, nodes: dict[str, Node], *, prefix: str,
                  group: str, order: tuple[int, ...]) -> list[str]:
    """Compile ``chain``'s steps into ``nodes`` as the children of ``group`` (ids under
    ``prefix``), with what ``graph`` was compiled with: a sub-chain run by a step that grew
    at run time (a ``for_each`` instance). Returns the children's ids."""
    return _compile_level(chain, graph.toolbox, graph.chains, graph.options, nodes,
                          prefix=prefix, group=group, order=order)


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
        kind = "chain" if child is not None else tool.kind  # type: ignore[union-attr]
        retry = (step.retry or (tool.retry if tool else None) or options.default_retry
                 or DEFAULT_RETRY)
        timeout_s = step.timeout_s or (tool.timeout_s if tool else None) \
            or options.default_timeout_s
        when = parse_condition(step.when) if step.when else None
        units = tool.resources if tool is not None and tool.resources else None
        each = None
        if step.for_each is not None:  # a parent of its instances, made at run time
            each = _each(step, step_id, kind, render, static, when, retry, timeout_s, tool,
                         units)
            kind, render, static, when, units = "for_each", _NO_ARGS, True, None, None
        node = Node(
            id=step_id,
            step=step,
            tool=tool,
            order=(*order, i),
            deps=tuple(prefix + d for d in sorted(deps[step.id])),
            ns=ns,
            render_args=render,
            static_args=(dict(step.args) if each is None else {}) if static else None,
            when=when,
            retry=retry,
            timeout_s=timeout_s,
            rollback=None if each is not None else _rollback(step, tool),
            kind=kind,
            group=group,
            subchain=child,
            each=each,
            units=units,
        )
        nodes[step_id] = node
        ids.append(step_id)
        if child is not None and each is None:
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


def _no_args(resolve: Callable[[Ref], Any]) -> Any:
    return {}


_NO_ARGS: Renderer = _no_args


def _each(step: Step, step_id: str, kind: str, render: Renderer, static: bool,
          when: Expr | None, retry: RetryPolicy, timeout_s: float | None, tool: Tool | None,
          units: Mapping[str, int] | None) -> Each:
    source = parse_template(step.for_each or "").whole
    assert source is not None  # (validated: one whole reference)
    pool = f"{step_id}[*]" if step.max_concurrency is not None else None
    return Each(
        source=source, kind=kind, render_args=render,
        static_args=dict(step.args) if static else None, when=when, retry=retry,
        timeout_s=timeout_s, rollback=_rollback(step, tool),
        units={**(units or {}), pool: 1} if pool is not None else units,
        pool=pool, limit=step.max_concurrency)


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
    if not chains:  # (none to use: every start of a runtime without sub-chains)
        return seen
    for step in chain.steps:
        name = step.subchain_name
        if name and name not in seen and name in chains:
            seen[name] = chains[name]
            used_chains(chains[name], chains, seen)
    return seen
