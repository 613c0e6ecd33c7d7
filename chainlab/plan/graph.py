"""The dependency graph of a chain: explicit and data edges, cycles, topological order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from chainlab.plan.refs import (
    Ref,
    TemplateSyntaxError,
    is_local,
    iter_refs,
    parse_condition,
    parse_template,
)

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData, Step

__all__ = ["Edge", "dependencies", "edges", "find_cycle", "topological_order", "value_refs"]


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` must finish before ``target``. ``kind`` says why: an explicit
    ``depends_on`` or a data reference (``label`` holds the reference text)."""

    source: str
    target: str
    kind: Literal["explicit", "data"]
    label: str | None = None


def value_refs(value: Any) -> Iterator[Ref]:
    """Every reference in a JSON value's strings. Raises TemplateSyntaxError."""
    if isinstance(value, str):
        if "{{" in value:
            yield from parse_template(value).refs
    elif isinstance(value, dict):
        for v in value.values():
            yield from value_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from value_refs(v)


def step_refs(step: Step) -> list[Ref]:
    """References in a step's args, condition and ``for_each`` (not its rollback), except the
    names a ``for_each`` step binds per instance (``item``, ``index``). Raises on bad
    syntax."""
    refs = list(value_refs(step.args))
    if step.when is not None:
        refs.extend(iter_refs(parse_condition(step.when)))
    if step.for_each is not None:  # (the list itself is read outside any instance)
        names = step.local_names
        refs = [r for r in refs if not is_local(r, names)]
        refs.extend(parse_template(step.for_each).refs)
    return refs


def ref_target(ref: Ref, save_as: Mapping[str, str]) -> str | None:
    """The step a reference depends on, or None (context, unknown key)."""
    if ref.root == "steps":
        return ref.target
    if ref.root == "memory" and ref.target is not None:
        return save_as.get(ref.target)
    return None


def edges(chain: ChainData, *, lenient: bool = True) -> list[Edge]:
    """All edges in declaration order; explicit first per step, then data edges (one per
    distinct source, labelled with the first reference). With ``lenient``, steps whose
    templates do not parse contribute only their explicit edges."""
    save_as = {s.save_as: s.id for s in chain.steps if s.save_as}
    ids = {s.id for s in chain.steps}
    out: list[Edge] = []
    for step in chain.steps:
        seen: set[str] = set()
        for dep in step.depends_on:
            if dep not in seen and dep in ids:
                seen.add(dep)
                out.append(Edge(dep, step.id, "explicit"))
        try:
            refs = step_refs(step)
        except TemplateSyntaxError:
            if not lenient:
                raise
            refs = []
        for ref in refs:
            src = ref_target(ref, save_as)
            if src is None or src in seen or src not in ids:
                continue
            seen.add(src)
            out.append(Edge(src, step.id, "data", ref.source))
    return out


def dependencies(chain: ChainData) -> dict[str, set[str]]:
    """``{step_id: ids it depends on}`` = depends_on UNION data references: the sources of
    :func:`edges` (without making an Edge per dependency: a 10,000-step start makes 10,000).
    Raises TemplateSyntaxError."""
    save_as = {s.save_as: s.id for s in chain.steps if s.save_as}
    deps: dict[str, set[str]] = {s.id: set() for s in chain.steps}
    for step in chain.steps:
        found = deps[step.id]
        found.update(dep for dep in step.depends_on if dep in deps)
        for ref in step_refs(step):
            src = ref_target(ref, save_as)
            if src is not None and src in deps:
                found.add(src)
    return deps


def find_cycle(deps: Mapping[str, set[str]], order: list[str]) -> list[str] | None:
    """A cycle as a path in run order (``['a', 'b', 'a']`` = a feeds b feeds a), or None.

    Deterministic: searched from steps in declaration order. Unknown ids are ignored.
    """
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(order, WHITE)
    index = {sid: i for i, sid in enumerate(order)}
    for start in order:
        if color[start] != WHITE:
            continue
        # iterative DFS over "depends on" edges; the stack holds the current path
        stack: list[tuple[str, Iterator[str]]] = []
        color[start] = GREY
        stack.append((start, iter(sorted(deps.get(start, ()), key=lambda d: index.get(d, -1)))))
        while stack:
            node, it = stack[-1]
            for dep in it:
                if dep not in color:
                    continue
                if color[dep] == GREY:
                    path = [n for n, _ in stack]
                    cycle = [*path[path.index(dep) :], dep]
                    return list(reversed(cycle))  # dependency -> dependent
                if color[dep] == WHITE:
                    color[dep] = GREY
                    children = sorted(deps.get(dep, ()), key=lambda d: index.get(d, -1))
                    stack.append((dep, iter(children)))
                    break
            else:
                color[node] = BLACK
                stack.pop()
    return None


def topological_order(deps: Mapping[str, set[str]], order: list[str]) -> list[str]:
    """Kahn's algorithm releasing ready steps in declaration order (the scheduler's
    sequential order). Assumes no cycle."""
    import heapq

    index = {sid: i for i, sid in enumerate(order)}
    indeg = {sid: len([d for d in deps.get(sid, ()) if d in index]) for sid in order}
    succ: dict[str, list[str]] = {sid: [] for sid in order}
    for sid in order:
        for d in deps.get(sid, ()):
            if d in succ:
                succ[d].append(sid)
    heap = [index[s] for s in order if indeg[s] == 0]
    heapq.heapify(heap)
    out: list[str] = []
    while heap:
        sid = order[heapq.heappop(heap)]
        out.append(sid)
        for nxt in succ[sid]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                heapq.heappush(heap, index[nxt])
    return out
