"""Plan validation: collect EVERY problem, then raise one PlanError. The structure (ids,
references, the graph, options, sub-chains) is checked here, the fit to a toolbox (tools,
args, pools) in :mod:`chainlab.plan.toolbox_fit`.

Problem codes (stable strings, documented in README):
duplicate_step, unknown_dependency, self_dependency, cycle, unknown_tool, unknown_reference,
duplicate_save_as, invalid_args, bad_template, bad_condition, recursive_chain, invalid_field,
bad_syntax, reference_type, bad_for_each, and for declared inputs (:mod:`chainlab.plan.inputs`)
undeclared_input, missing_input, invalid_input.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab._text import did_you_mean
from chainlab.errors import CycleError, PlanError, Problem, by_line
from chainlab.plan.graph import find_cycle, ref_target, value_refs
from chainlab.plan.inputs import (
    context_problems,
    declaration_problems,
    subchain_arg_findings,
    undeclared_reference,
)
from chainlab.plan.parts import INDEX_NAME, RESERVED_KEYS, Rollback
from chainlab.plan.policies import policy_findings
from chainlab.plan.problem_lines import duplicate_message, with_lines
from chainlab.plan.refs import (
    ROOTS,
    Ref,
    TemplateSyntaxError,
    is_local,
    iter_refs,
    parse_condition,
    parse_template,
)
from chainlab.plan.reftypes import SourceTypes
from chainlab.plan.toolbox_fit import Finding, arg_findings, pool_findings, rollback_tool, step_tool

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData, Step
    from chainlab.plan.toolbox_fit import ToolSource
    from chainlab.tools.contract import Tool

__all__ = ["PROBLEM_CODES", "find_problems", "raise_for_problems"]

PROBLEM_CODES = (
    "duplicate_step",
    "unknown_dependency",
    "self_dependency",
    "cycle",
    "unknown_tool",
    "unknown_reference",
    "duplicate_save_as",
    "invalid_args",
    "bad_template",
    "bad_condition",
    "recursive_chain",
    "invalid_field",
    "bad_syntax",
    "reference_type",
    "bad_for_each",
    "undeclared_input",
    "missing_input",
    "invalid_input",
)


def raise_for_problems(
    chain: ChainData,
    toolbox: ToolSource | None,
    *,
    context: Mapping[str, Any] | None = None,
    chains: Mapping[str, ChainData] | None = None,
) -> None:
    """Raise PlanError (CycleError when a cycle is among the problems) if anything is wrong."""
    problems, cycle = _collect(chain, toolbox, context, chains)
    if cycle:
        raise CycleError(problems, cycle, chain_name=chain.name)
    if problems:
        raise PlanError(problems, chain_name=chain.name)


def find_problems(
    chain: ChainData,
    toolbox: ToolSource | None,
    *,
    context: Mapping[str, Any] | None = None,
    chains: Mapping[str, ChainData] | None = None,
) -> list[Problem]:
    """Every problem of the chain, sorted by line when the chain was loaded from text
    (:func:`chainlab.errors.by_line`), else in a stable order (by step, then by check)."""
    return _collect(chain, toolbox, context, chains)[0]


def _collect(
    chain: ChainData,
    toolbox: ToolSource | None,
    context: Mapping[str, Any] | None,
    chains: Mapping[str, ChainData] | None,
) -> tuple[list[Problem], list[str] | None]:
    known_chains = dict(toolbox.chains if toolbox is not None else {})
    known_chains.update(chains or {})
    checker = _Checker(chain, toolbox, context, known_chains)
    checker.run()
    checker.check_output()
    checker.problems += declaration_problems(chain)
    if context is not None:  # against the declared inputs (when there are)
        checker.problems += context_problems(chain, context)
    checker.check_subchains(stack=(chain.name,), prefix="")
    return by_line(with_lines(chain, checker.problems, checker.at, checker.first)), \
        checker.cycle


class _Checker:
    def __init__(
        self,
        chain: ChainData,
        toolbox: ToolSource | None,
        context: Mapping[str, Any] | None,
        chains: dict[str, ChainData],
    ):
        self.chain = chain
        self.toolbox = toolbox
        self.context = context
        self.chains = chains
        self.problems: list[Problem] = []
        self.cycle: list[str] | None = None
        self.ids = [s.id for s in chain.steps]
        self.idset = set(self.ids)
        self.save_as: dict[str, str] = {}
        # id(problem) -> index of its step (ids may repeat); of the first step with its id
        self.at: dict[int, int] = {}
        self.first: dict[int, int] = {}
        self._index = {id(step): i for i, step in enumerate(chain.steps)}
        self.types: SourceTypes | None = None  # (built in run(), once save_as is known)

    def add(
        self, code: str, message: str, step: Step | None = None, field: str | None = None
    ) -> None:
        self.problems.append(Problem(code, message, step.id if step else None, field))
        if step is not None and id(step) in self._index:
            self.at[id(self.problems[-1])] = self._index[id(step)]

    # ------------------------------------------------------------------ the checks
    def run(self) -> None:
        first_at: dict[str, int] = {}
        for i, step in enumerate(self.chain.steps):
            if step.id in first_at:
                self.add("duplicate_step", duplicate_message(step.id), step, "id")
                self.first[id(self.problems[-1])] = first_at[step.id]
            first_at.setdefault(step.id, i)
            if step.save_as:
                if step.save_as in self.save_as:
                    first = self.save_as[step.save_as]
                    self.add(
                        "duplicate_save_as",
                        f"save_as key {step.save_as!r} is already used by step {first!r}",
                        step,
                        "save_as",
                    )
                else:
                    self.save_as[step.save_as] = step.id
        # the reference type check's view of the chain: built once, with every save_as key
        self.types = SourceTypes(self.chain, self.toolbox, self.context, self.save_as) \
            if self.toolbox is not None else None
        deps: dict[str, set[str]] = {sid: set() for sid in self.ids}
        for step in self.chain.steps:
            deps[step.id] |= self.check_step(step)
        self.check_options()
        cycle = find_cycle(deps, self.ids)
        if cycle:
            self.cycle = cycle
            self.problems.append(
                Problem(
                    "cycle",
                    f"dependency cycle {' -> '.join(cycle)}; remove one of these "
                    "dependencies (explicit depends_on or a reference)",
                    cycle[0],
                    "depends_on",
                )
            )

    def check_step(self, step: Step) -> set[str]:
        deps: set[str] = set()
        for dep in step.depends_on:
            if dep == step.id:
                self.add(
                    "self_dependency", f"step {step.id!r} depends on itself", step, "depends_on"
                )
            elif dep not in self.idset:
                self.add(
                    "unknown_dependency",
                    f"depends on unknown step {dep!r}{did_you_mean(dep, self.ids)}",
                    step,
                    "depends_on",
                )
            else:
                deps.add(dep)
        names = step.local_names
        for field, refs in self.step_refs(step):
            for ref in refs:  # (item and index are bound in the args and when, not the list)
                if field == "for_each" or not is_local(ref, names):
                    deps |= self.check_ref(step, field, ref, allow_io=False)
        self.check_for_each(step)
        tool = self.check_tool(step)
        if tool is not None:
            self.check_args(step, tool, step.args, "args")
            if self.types is not None:  # references whose type cannot fit their field
                self.add_all(step, self.types.findings(step, tool))
        self.check_rollback(step, tool)
        return deps

    def step_refs(self, step: Step) -> list[tuple[str, list[Ref]]]:
        out = []
        for key, value in step.args.items():
            try:
                out.append((f"args.{key}", list(value_refs(value))))
            except TemplateSyntaxError as exc:
                self.add("bad_template", str(exc), step, f"args.{key}")
        if step.when is not None:
            try:
                out.append(("when", list(iter_refs(parse_condition(step.when)))))
            except TemplateSyntaxError as exc:
                self.add("bad_condition", str(exc), step, "when")
        if step.for_each is not None:
            try:
                out.append(("for_each", list(parse_template(step.for_each).refs)))
            except TemplateSyntaxError as exc:
                self.add("bad_template", str(exc), step, "for_each")
        return out

    def check_for_each(self, step: Step) -> None:
        """A ``for_each`` is one whole reference; its item name collides with no root, memory
        key or ``index``; ``as`` and ``max_concurrency`` come only with a ``for_each``."""
        if step.for_each is None:
            for field, value in (("as", step.as_), ("max_concurrency", step.max_concurrency)):
                if value is not None:
                    self.add("bad_for_each", f"{field!r} is only meaningful with 'for_each' "
                             "(the list the step runs once per item of)", step, field)
            return
        try:
            whole = parse_template(step.for_each).whole
        except TemplateSyntaxError:
            whole = None  # (reported as bad_template by step_refs)
        else:
            if whole is None:
                self.add("bad_for_each",
                         f"for_each {step.for_each!r} must be one whole reference to a list, "
                         "e.g. '{{ steps.split.output }}' or '{{ context.items }}'",
                         step, "for_each")
        name = step.item_name
        clash = None
        if name.lower() in RESERVED_KEYS or name in ROOTS:
            clash = "a reference root or keyword"
        elif name == INDEX_NAME:
            clash = "the name of the item's position"
        elif name in self.save_as:
            clash = f"the memory key step {self.save_as[name]!r} saves"
        if clash is not None:
            self.add("bad_for_each", f"as {name!r} collides with {clash}; choose another name "
                     "for the item (e.g. 'as: row')", step, "as")

    def check_output(self) -> None:
        """The chain's ``output`` refers to steps, memory keys and inputs that exist."""
        try:
            refs = list(value_refs(self.chain.output))
        except TemplateSyntaxError as exc:
            self.add("bad_template", str(exc), None, "output")
            return
        for ref in refs:
            self.check_ref(None, "output", ref, allow_io=False)

    def check_ref(self, step: Step | None, field: str, ref: Ref, *, allow_io: bool
                  ) -> set[str]:
        if ref.root in ("input", "output"):
            if not allow_io:
                self.add(
                    "unknown_reference",
                    f"{ref.source!r}: '{ref.root}' is only available in rollback args",
                    step,
                    field,
                )
            return set()
        if ref.root == "context":
            undeclared = undeclared_reference(self.chain, ref)
            if undeclared is not None:
                self.add("undeclared_input", undeclared, step, field)
            elif (
                self.chain.inputs is None
                and self.context is not None
                and ref.path
                and isinstance(ref.path[0], str)
                and ref.path[0] not in self.context
            ):
                self.add(
                    "unknown_reference",
                    f"{ref.source!r}: the context has no key {ref.path[0]!r}"
                    f"{did_you_mean(ref.path[0], self.context)}",
                    step,
                    field,
                )
            return set()
        target = ref_target(ref, self.save_as)
        if target is None:
            if ref.root == "memory" and not ref.source.startswith("memory.") \
                    and ref.target in ("item", INDEX_NAME):
                self.add("unknown_reference", f"{ref.source!r}: {ref.target!r} is only bound "
                         "in the args and when of a for_each step (the item it runs for, and "
                         "its position)", step, field)
                return set()
            self.add("unknown_reference", self.unknown_key(ref), step, field)
            return set()
        if target not in self.idset:
            self.add(
                "unknown_reference",
                f"{ref.source!r}: no step {target!r}{did_you_mean(target, self.ids)}",
                step,
                field,
            )
            return set()
        if step is not None and target == step.id and not allow_io:
            self.add(
                "self_dependency", f"{ref.source!r} refers to the step's own output", step, field
            )
            return set()
        return {target}

    def unknown_key(self, ref: Ref) -> str:
        """The message for a memory key (``memory.KEY`` or a bare ``KEY``) no step saves; a
        bare key close to a root (``step`` for ``steps``) suggests the root first."""
        keys = list(self.save_as)
        if ref.source.startswith("memory."):
            return (
                f"{ref.source!r}: no step saves {ref.target!r} as a memory key"
                f"{did_you_mean(str(ref.target), keys)}"
            )
        near_root = difflib.get_close_matches(str(ref.target), ROOTS, n=1, cutoff=0.6)
        hint = did_you_mean(str(ref.target), near_root or keys)
        return (
            f"{ref.source!r}: {ref.target!r} is neither a root ({', '.join(ROOTS)}) nor a "
            f"save_as key{hint}"
        )

    def add_all(self, step: Step, findings: list[Finding]) -> None:
        for code, message, field in findings:
            self.add(code, message, step, field)

    def check_tool(self, step: Step) -> Tool | None:
        tool, findings = step_tool(step, self.toolbox, self.chains)
        self.add_all(step, findings)
        return tool

    def check_args(self, step: Step, tool: Tool, args: Mapping[str, Any], field: str) -> None:
        self.add_all(step, arg_findings(tool, args, field))

    def check_rollback(self, step: Step, tool: Tool | None) -> None:
        rb = step.rollback
        if rb is None and tool is not None and tool.compensate is not None:
            rb = tool.compensate  # the tool's default compensation is checked like a step's
        if not isinstance(rb, Rollback):
            return
        for key, value in rb.args.items():
            try:
                refs = list(value_refs(value))
            except TemplateSyntaxError as exc:
                self.add("bad_template", str(exc), step, f"rollback.args.{key}")
                continue
            for ref in refs:
                self.check_ref(step, f"rollback.args.{key}", ref, allow_io=True)
        if self.toolbox is None:
            return
        rb_tool, findings = rollback_tool(rb, self.toolbox)
        self.add_all(step, findings)
        if rb_tool is not None:
            self.check_args(step, rb_tool, rb.args, "rollback.args")

    def _in_subchain(self, path: str) -> bool:
        """``parent/child`` names a step of a sub-chain (as run steps are namespaced)."""
        head, _, rest = path.partition("/")
        step = next((s for s in self.chain.steps if s.id == head), None)
        chain = self.chains.get(step.subchain_name or "") if step is not None else None
        while chain is not None and rest:
            head, _, rest = rest.partition("/")
            step = next((s for s in chain.steps if s.id == head), None)
            if step is None:
                return False
            if not rest:
                return True
            chain = self.chains.get(step.subchain_name or "")
        return False

    def check_options(self) -> None:
        for bp in self.chain.options.breakpoints:
            if bp not in self.idset and not self._in_subchain(bp):
                self.problems.append(
                    Problem(
                        "invalid_field",
                        f"breakpoint on unknown step {bp!r}{did_you_mean(bp, self.ids)}",
                        None,
                        "options.breakpoints",
                    )
                )
        if self.toolbox is None:
            return
        for step, finding in pool_findings(self.chain, self.toolbox):
            self.add_all(step, [finding])
        # the chain's rules (DESIGN §21): what their conditions read fits the tools they name
        # (a glob matching no tool is a warning, given where a run starts)
        for code, message, field in policy_findings(self.chain.options.policies,
                                                     self.toolbox)[0]:
            self.problems.append(Problem(code, message, None, field))

    # ------------------------------------------------------------------ sub-chains
    def check_subchains(self, stack: tuple[str, ...], prefix: str) -> None:
        # a sub-chain is checked once however many steps call it (its problems are repeated
        # under each caller's id): the work grows with the chains, not with the callers
        checked: dict[str, tuple[list[Problem], set[str]]] = {}
        for step in self.chain.steps:
            name = step.subchain_name
            if name is None or name not in self.chains:
                continue
            if name in stack:
                path = " -> ".join((*stack, name))
                self.add("recursive_chain", f"sub-chain recursion {path}", step, "tool")
                continue
            child = self.chains[name]
            if name not in checked:
                sub = _Checker(child, self.toolbox, None, self.chains)
                sub.run()
                sub.check_subchains((*stack, name), prefix)
                checked[name] = sub.problems, _context_keys(child)
            problems, needed = checked[name]
            for p in problems:
                step_id = f"{step.id}/{p.step_id}" if p.step_id else step.id
                field = p.field if p.step_id else f"chain:{name}.{p.field or ''}".rstrip(".")
                self.problems.append(Problem(p.code, p.message, step_id, field))
            self.add_all(step, subchain_arg_findings(step.args, child, needed))
            if self.types is not None:  # references whose type cannot fit a declared input
                self.add_all(step, self.types.subchain_findings(step, child))


def _context_keys(chain: ChainData) -> set[str]:
    """The context keys a chain's steps refer to (what a caller's args must give it)."""
    reader = _Checker(chain, None, None, {})
    refs = [r for s in chain.steps for _, rs in reader.step_refs(s) for r in rs]
    return {r.path[0] for r in refs
            if r.root == "context" and r.path and isinstance(r.path[0], str)}
