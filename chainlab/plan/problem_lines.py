"""Problems pointed at the lines of the YAML/JSON text a chain was loaded from (plan
validation's last pass): a step's problem at its field, a chain-level one (``options``,
``inputs``, ``output``) at its key, a duplicate step id at both of its lines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chainlab.errors import Problem
from chainlab.plan.yamltext import Lines

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData

__all__ = ["duplicate_message", "with_lines"]


def with_lines(
    chain: ChainData, problems: list[Problem], at: Mapping[int, int], first: Mapping[int, int]
) -> list[Problem]:
    """Point problems at lines of the text the chain was loaded from (when it was).

    ``at`` maps a problem (by ``id``) to the index of the step it is about (its id may be
    repeated); ``first`` maps a duplicate_step problem to the index of the first step with
    that id: the problem names both lines."""
    source = chain._source
    if not source or "\n" not in source.strip() or not problems:
        return problems  # a one-line text (compact JSON from a model): lines tell nothing
    lines = Lines(source)  # composed once, for all the problems
    index = {s.id: i for i, s in reversed(list(enumerate(chain.steps)))}
    out = []
    for p in problems:
        path: tuple[Any, ...] = ()
        if id(p) in first and p.step_id is not None:
            one, two = (lines.locate(("steps", i, "id")) for i in (first[id(p)], at[id(p)]))
            if one is not None and two is not None:
                out.append(replace(p, line=two,
                                   message=duplicate_message(p.step_id, (one, two))))
                continue
        if id(p) in at or p.step_id in index:
            path = ("steps", at[id(p)] if id(p) in at else index[str(p.step_id)])
            if p.field:
                path += tuple(p.field.split("."))
        elif p.field and p.field.split(".")[0] in ("options", "inputs", "output"):
            path = tuple(p.field.split("."))
        line = lines.locate(path) if path else None
        out.append(replace(p, line=line) if line is not None else p)
    return out


def duplicate_message(step_id: str, lines: tuple[int, int] | None = None) -> str:
    where = f" (lines {lines[0]} and {lines[1]})" if lines else ""
    return f"step id {step_id!r} is used more than once{where}; give each step its own id"

