"""The fallback planner's default: compose a plausible chain from the toolbox's metadata.

Deterministic, no model. The rules, in order:

1. **Pick tools** whose name or description shares a word with the request (words are
   compared by a common prefix of 5 letters, so "estimate" meets "estimation" and "table"
   meets "tables"; a list of filler words is ignored). Tools that are another tool's
   ``compensate`` are left out (they undo, they do not do). Sub-chains are not composed.
2. **Order**: tools without side effects ("reads") first, side-effecting tools ("writes")
   last; within each group by where the request first mentions them, then toolbox order.
3. **Wire** each parameter, first match wins: a context key of the same name; a field of
   the same name in an earlier step's output schema; the whole output of an earlier step
   whose tool name shares a word with the parameter (types compatible); for a required
   list/object parameter, the latest earlier output of that type; for a required text
   parameter named like ``goal``/``request``/``query``, the request text; else a required
   parameter reads ``{{ context.NAME }}``. Optional parameters without a match are left out.
4. **Writes** depend on every read and run one after another (in order); each one is
   confirmed unless the policy exempts it.
5. A step that still has validation problems (e.g. a context key the context lacks) is
   left out with its dependants, and the explanation says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chainlab.errors import PlannerError
from chainlab.plan.schema import Chain, Step

if TYPE_CHECKING:
    from chainlab.tools import Tool, Toolbox

__all__ = ["Composition", "chain_name_for", "compose_chain", "words"]

_FILLER = (  # words never used to pick a tool
    "a an and are as at be by do for from get give has have in into is it its let make me my "
    "of on or our out over please put run set so than that the their them then there these "
    "this those to up us use using want we what when where which while who will with would "
    "you your all also any each every new current some just like need needs should could can")
_STOP = frozenset(_FILLER.split())
_TEXT_PARAMS = frozenset({"goal", "request", "prompt", "query", "text", "description",
                          "topic", "task", "instructions", "brief", "question", "message"})
_PREFIX = 5


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (split on anything but letters and digits, underscores
    too), filler words and one- or two-letter words removed."""
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) > 2 and w not in _STOP]


def _same_word(a: str, b: str) -> bool:
    n = min(_PREFIX, len(a), len(b))
    return a[:n] == b[:n]


def _overlap(a: list[str], b: list[str]) -> list[str]:
    return [w for w in a if any(_same_word(w, v) for v in b)]


def chain_name_for(request: str) -> str:
    """A chain name from the first words of the request (``plan-approval-system``)."""
    return "-".join(words(request)[:4])[:60] or "plan"


@dataclass(slots=True)
class Composition:
    """The composed chain and the reasons for it (joined into the description)."""

    chain: Chain
    picked: list[str]
    wiring: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def compose_chain(
    request: str, toolbox: Toolbox, context: Mapping[str, Any] | None
) -> Composition:
    """Compose a chain for ``request`` from ``toolbox`` (see the module docstring).

    Raises PlannerError when the toolbox is empty or no tool shares a word with the request.
    """
    if len(toolbox) == 0:
        raise PlannerError("the toolbox has no tools, so there is nothing to plan with; "
                           "register tools (@toolbox.tool) or a fallback template")
    request_words = words(request)
    undo = {t.compensate.tool for t in toolbox if t.compensate is not None}
    scored = []
    for index, tool in enumerate(toolbox):
        if tool.name in undo:
            continue
        hits = _overlap(words(tool.name), request_words) * 2 + \
            _overlap(words(tool.description), request_words)
        if hits:
            first = min(i for i, w in enumerate(request_words)
                        if any(_same_word(w, h) for h in hits))
            scored.append((tool.side_effects, first, index, tool))
    if not scored:
        raise PlannerError(
            f"no tool in toolbox {toolbox.name!r} shares a word with the request "
            f"{request[:80]!r}; known tools: {', '.join(toolbox.names())}. Name the tools' "
            "purpose in the request, or register a fallback template for it")
    tools = [t for *_, t in sorted(scored, key=lambda s: s[:3])]
    builder = _Builder(request, toolbox, context)
    builder.picked = [t.name for t in tools]
    for tool in tools:
        builder.add(tool)
    return builder.finish()


class _Builder:
    def __init__(self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None):
        self.request = request
        self.toolbox = toolbox
        self.context = context
        self.steps: list[Step] = []
        self.tools: dict[str, Tool] = {}
        self.wiring: list[str] = []
        self.dropped: list[str] = []
        self.picked: list[str] = []
        self.ancestors: dict[str, set[str]] = {}

    def add(self, tool: Tool) -> None:
        step_id = _unique(re.sub(r"[^A-Za-z0-9_-]", "_", tool.name),
                          {s.id for s in self.steps})
        args: dict[str, Any] = {}
        used: set[str] = set()
        wiring = []
        for name, info in tool.params.items():  # by the names args use (aliases)
            value, why, source = self.source(tool, name, info.is_required(), used)
            if value is None:
                continue
            if source is None and why.startswith("context.") and self.context is not None \
                    and name not in self.context:
                self.dropped.append(f"{tool.name}: nothing provides its required input "
                                    f"{name!r} (no earlier output fits, no context key)")
                return
            args[name] = value
            wiring.append(f"{step_id}.{name} <- {why}")
            if source is not None:
                used.add(source)
        self.wiring += wiring
        ancestors = self.closure(used)
        depends_on: list[str] = []
        if tool.side_effects:  # after every read, and after the previous write
            reads = [s.id for s in self.steps if not self.tools[s.id].side_effects]
            writes = [s.id for s in self.steps if self.tools[s.id].side_effects]
            for before in [*reads, *writes[-1:]]:
                if before not in ancestors:
                    depends_on.append(before)
                    ancestors |= self.closure({before})
        self.ancestors[step_id] = ancestors
        self.steps.append(Step(id=step_id, tool=tool.name, args=args, depends_on=depends_on,
                               description=tool.description.split("\n")[0][:200]))
        self.tools[step_id] = tool

    def closure(self, step_ids: set[str]) -> set[str]:
        """The steps and everything they depend on."""
        out = set(step_ids)
        for step_id in step_ids:
            out |= self.ancestors.get(step_id, set())
        return out

    def source(self, tool: Tool, name: str, required: bool,
               used: set[str]) -> tuple[Any, str, str | None]:
        """``(value, why, step it reads from)`` for one parameter; value None = leave out."""
        want = _types(tool.input_schema(), name)
        if self.context is not None and name in self.context:
            return f"{{{{ context.{name} }}}}", f"context.{name} (same name)", None
        for step in reversed(self.steps):
            out = self.tools[step.id].output_schema() or {}
            if name in _props(out) and _fits(_types(out, name), want):
                return f"{{{{ steps.{step.id}.output.{name} }}}}", \
                    f"steps.{step.id}.output.{name} (same field name)", step.id
        for step in reversed(self.steps):
            have = _types(self.tools[step.id].output_schema() or {}, None)
            if step.id not in used and _overlap(words(name), words(step.tool)) \
                    and _fits(have, want):
                return f"{{{{ steps.{step.id}.output }}}}", \
                    f"steps.{step.id}.output (name and type match)", step.id
        if required and want & {"array", "object"}:
            for step in reversed(self.steps):
                have = _types(self.tools[step.id].output_schema() or {}, None)
                if step.id not in used and have & want & {"array", "object"}:
                    kind = sorted(have & want)[0]
                    return f"{{{{ steps.{step.id}.output }}}}", \
                        f"steps.{step.id}.output (same type: {kind})", step.id
        if not required:
            return None, "", None
        if name in _TEXT_PARAMS and (not want or "string" in want):
            return self.request, "the request text", None
        return f"{{{{ context.{name} }}}}", \
            f"context.{name} (needed; pass it in the context)", None

    def finish(self) -> Composition:
        if not self.steps:
            raise PlannerError("the fallback planner could not compose a chain: "
                               + "; ".join(self.dropped))
        chain = Chain(name=chain_name_for(self.request), steps=self.steps)
        dropped = list(self.dropped)
        while True:
            bad: dict[str, str] = {}
            context = dict(self.context) if self.context is not None else None
            for p in chain.problems(self.toolbox, context=context):
                if p.step_id is not None and p.step_id not in bad:
                    bad[p.step_id] = f"[{p.code}] {p.message}"
            if not bad:
                break
            dropped += [f"{step_id}: {why}" for step_id, why in bad.items()]
            keep = [s.model_copy(update={"depends_on": [d for d in s.depends_on
                                                        if d not in bad]})
                    for s in chain.steps if s.id not in bad]
            chain = chain.model_copy(update={"steps": keep})
        if not chain.steps:
            raise PlannerError("the fallback planner could not compose a valid chain: "
                               + "; ".join(dropped))
        kept = set(chain.step_ids)
        wiring = [w for w in self.wiring if w.split(".", 1)[0] in kept]
        return Composition(chain, self.picked, wiring, dropped)


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return schema.get("$defs", {}).get(ref.split("/")[-1], {})
    return node


def _props(schema: dict[str, Any]) -> dict[str, Any]:
    return _resolve(schema, schema).get("properties", {})


def _types(schema: dict[str, Any], name: str | None) -> set[str]:
    """JSON types of property ``name`` (or of the whole schema when None); empty = any."""
    if name is None:
        node = _resolve(schema, schema)
    else:
        props = _props(schema)
        if name not in props:
            return set()
        node = _resolve(schema, props[name])
    found: set[str] = set()
    for option in node.get("anyOf", [node]):
        option = _resolve(schema, option)
        kind = option.get("type")
        if kind == "integer":
            found |= {"integer", "number"}
        elif isinstance(kind, str) and kind != "null":
            found.add(kind)
    return found


def _fits(have: set[str], want: set[str]) -> bool:
    return not have or not want or bool(have & want)
