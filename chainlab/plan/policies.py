"""Rules as data (DESIGN §21): :class:`Policy`, a rule that decides calls of a tool whose
args match a condition, and the pure reading of a set of rules: which rules apply to a
call (:class:`Rules`, compiled once) and what is wrong with a rule against the tools it
names (:func:`policy_findings`, part of plan validation).

A rule's ``when`` is written in the grammar of a step's ``when:``
(:mod:`chainlab.plan.conditions`) and may read only the call's ``args`` (``args.amount``,
``args.items[0].sku``); nothing is ever eval'd. A condition that cannot be evaluated on a
call (a missing arg compared with ``<``) makes a ``reject`` or ``ask`` rule apply (fail
closed) and an ``approve`` rule not apply.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chainlab._text import did_you_mean, safe_repr
from chainlab.plan.conditions import Cmp, Expr, Lit, RefExpr, evaluate, iter_refs, parse_condition
from chainlab.plan.syntax import Ref, TemplateSyntaxError


class _Tools(Protocol):  # (what a toolbox gives these checks; toolbox_fit's ToolSource is one)
    def names(self) -> list[str]: ...

    def get(self, name: str) -> Any: ...


#: one thing wrong: (problem code, message, field), as chainlab.plan.toolbox_fit's Finding
Finding = tuple[str, str, str]

__all__ = ["DECISIONS", "Policy", "Rules", "args_refs", "args_resolver", "condition",
           "condition_like",
           "policy_findings"]

#: what a rule decides, strongest first (within a level reject > ask > approve)
DECISIONS = ("reject", "ask", "approve")


class Policy(BaseModel):
    """One rule: calls of ``tool`` (a name or a glob: ``refund``, ``mcp:*``) whose ``args``
    match ``when`` (empty: every call) get ``decision``. ``always_ask`` (with decision
    ``ask``): only a person may decide the call, never a grant or a reviewer."""

    # (strict like every plan model; defined here, below chainlab.plan.parts, which holds it)
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$", max_length=100)
    tool: str = Field(min_length=1, max_length=200)
    when: str = ""
    decision: Literal["approve", "reject", "ask"]
    reason: str = ""
    always_ask: bool = False

    @field_validator("when")
    @classmethod
    def _parses(cls, value: str) -> str:
        if value.strip():
            condition(value)  # raises ValueError saying where and what was expected
        return value

    @model_validator(mode="after")
    def _always_ask_asks(self) -> Policy:
        if self.always_ask and self.decision != "ask":
            raise ValueError(f"rule {self.id!r}: always_ask goes with decision 'ask', not "
                             f"{self.decision!r} (a person decides the call)")
        return self


def condition(text: str) -> Expr:
    """Parse a rule's or a grant's condition over ``args``. Raises ValueError naming where
    it fails and what was expected, or the reference that is not ``args.NAME``."""
    try:
        expr = parse_condition(text)
    except TemplateSyntaxError as exc:
        raise ValueError(f"condition does not parse: {exc}") from None
    for ref in iter_refs(expr):
        if not _is_args(ref) or not ref.path:
            raise ValueError(f"condition {text!r} reads {ref.source!r}: a rule reads only the "
                             "call's args (write args.NAME, e.g. args.amount <= 100)")
    return expr


def condition_like(args: Mapping[str, Any]) -> str:
    """A condition matching calls like one with ``args``, for a person to edit before a
    grant: a number at most this one, a string or a boolean equal (other values left out),
    e.g. ``args.amount <= 40 and args.currency == 'EUR'``. ``""`` when nothing fits."""
    parts = []
    for name, value in sorted(args.items()):
        if not _NAME.match(name):
            continue
        if isinstance(value, bool):
            parts.append(f"args.{name} == {'true' if value else 'false'}")
        elif isinstance(value, int | float):
            parts.append(f"args.{name} <= {value!r}")
        elif isinstance(value, str) and len(value) <= 200 and value.isprintable() \
                and "\\" not in value:
            parts.append(f"args.{name} == {json.dumps(value)}")
    return " and ".join(parts)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def args_refs(expr: Expr) -> list[str]:
    """The arg names a condition reads (``args.amount`` -> ``amount``), in order."""
    return [str(ref.path[0]) for ref in iter_refs(expr) if _is_args(ref) and ref.path]


def _is_args(ref: Ref) -> bool:
    return ref.root == "memory" and ref.target == "args"


def args_resolver(args: Mapping[str, Any]) -> Any:
    """How a rule's or a grant's condition reads ``args`` (``args.items[0].sku``; a path
    that is not there reads as null)."""

    def resolve(ref: Ref) -> Any:
        value: Any = args
        for key in ref.path:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return None
        return value

    return resolve


@dataclass(frozen=True, slots=True)
class _Compiled:
    policy: Policy
    expr: Expr | None
    glob: bool


class Rules:
    """A level of rules (the deployment's, or a run's) compiled once: which rules apply to a
    call, the tool's applicable rules found once per tool name."""

    __slots__ = ("_by_tool", "_rules", "policies")

    def __init__(self, policies: Iterable[Policy | Mapping[str, Any]] = ()):
        self.policies: tuple[Policy, ...] = tuple(
            p if isinstance(p, Policy) else Policy.model_validate(p) for p in policies)
        self._rules = tuple(
            _Compiled(p, condition(p.when) if p.when.strip() else None,
                      any(c in p.tool for c in "*?[")) for p in self.policies)
        self._by_tool: dict[str, tuple[_Compiled, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.policies)

    def matching(self, tool: str, args: Mapping[str, Any]) -> list[Policy]:
        """The rules that apply to a call of ``tool`` with ``args``, in their order."""
        rules = self._by_tool.get(tool)
        if rules is None:
            rules = self._by_tool[tool] = tuple(
                r for r in self._rules
                if (fnmatch.fnmatchcase(tool, r.policy.tool) if r.glob else tool == r.policy.tool))
        if not rules:
            return []
        resolve = args_resolver(args)
        out = []
        for r in rules:
            if r.expr is None:
                out.append(r.policy)
                continue
            try:
                hit = bool(evaluate(r.expr, resolve))
            except TypeError:  # cannot be evaluated on this call: fail closed
                hit = r.policy.decision != "approve"
            if hit:
                out.append(r.policy)
        return out


def fingerprint(levels: Sequence[Rules]) -> str:
    """A short hash of the rules in force (every level, in order): a grant records it and
    stops applying when it changes."""
    data = [[p.model_dump() for p in level.policies] for level in levels]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ============================================================ static checks (with the chain)
_ORDER = ("<", "<=", ">", ">=")
_JSON_OF = {bool: "boolean", int: "integer", float: "number", str: "string",
            type(None): "null", list: "array", dict: "object"}


def policy_findings(policies: Sequence[Policy], toolbox: _Tools | None,
                    where: str = "options.policies") -> tuple[list[Finding], list[str]]:
    """What is wrong with ``policies`` against ``toolbox``: findings ``(code, message,
    field)`` (an arg the tool does not have, a comparison its type cannot make) and warnings
    (a tool name or glob that matches no tool, with the names it could mean)."""
    findings: list[Finding] = []
    warnings: list[str] = []
    if toolbox is None:
        return findings, warnings
    names = toolbox.names()
    for i, p in enumerate(policies):
        field = f"{where}[{i}]"
        tools = [n for n in names if fnmatch.fnmatchcase(n, p.tool)]
        if not tools:
            warnings.append(f"rule {p.id!r} ({field}.tool): {p.tool!r} matches no tool"
                            f"{did_you_mean(p.tool.rstrip('*'), names, list_known=True)}")
            continue
        if not p.when.strip():
            continue
        expr = condition(p.when)
        for name in tools:
            findings += _arg_findings(p, expr, toolbox.get(name).input_schema(), name,
                                      f"{field}.when")
    return findings, warnings


def _arg_findings(p: Policy, expr: Expr, schema: Mapping[str, Any], tool: str,
                  field: str) -> list[Finding]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    out: list[Finding] = []
    for name in dict.fromkeys(args_refs(expr)):
        if name not in props:
            out.append(("invalid_field", f"rule {p.id!r} reads args.{name}, but tool {tool!r} "
                        f"has no arg {name!r}{did_you_mean(name, props, list_known=True)}",
                        field))
    for cmp in _comparisons(expr):
        ref, lit = (cmp.left, cmp.right) if isinstance(cmp.left, RefExpr) else \
            (cmp.right, cmp.left)
        if not (isinstance(ref, RefExpr) and isinstance(lit, Lit)) or not ref.ref.path:
            continue
        types = _types(props.get(str(ref.ref.path[0])))
        if len(ref.ref.path) != 1 or not types:
            continue
        got = _JSON_OF.get(type(lit.value), "")
        fits = got in types or (got == "integer" and "number" in types) or \
            (got == "number" and "integer" in types)
        if cmp.op in _ORDER:
            fits = fits and got in ("integer", "number", "string")
        if cmp.op in (*_ORDER, "==", "!=") and not fits:
            out.append(("reference_type", f"rule {p.id!r}: args.{ref.ref.path[0]} of tool "
                        f"{tool!r} is {'/'.join(types)} and cannot compare {cmp.op} "
                        f"{safe_repr(lit.value)}; compare it with a {types[0]} value", field))
    return out


def _comparisons(expr: Expr) -> list[Cmp]:
    out: list[Cmp] = []
    stack: list[Any] = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Cmp):
            out.append(e)
        for name in ("operand", "left", "right"):
            sub = getattr(e, name, None)
            if sub is not None:
                stack.append(sub)
    return out


def _types(prop: Mapping[str, Any] | None) -> list[str]:
    if not prop:
        return []
    t = prop.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    found = [x.get("type") for x in prop.get("anyOf", []) if isinstance(x, dict)]
    return [x for x in found if isinstance(x, str)] if all(isinstance(x, str)
                                                           for x in found) else []
