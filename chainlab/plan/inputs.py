"""Declared inputs and the selected output of a chain (the plan's interface).

A chain may declare what it takes and what it gives::

    inputs:
      customer: {type: string, description: who the rows are for}
      limit: {type: integer, default: 10}
    output: "{{ steps.finalize.output }}"

``inputs`` maps a context key to an :class:`Input` (a JSON Schema type, a default, a
description, whether it is required); ``output`` is a JSON value whose templates select the
run's result from its step outputs (``RunResult.output``). Both are optional: a chain without
them reads any context key and has no selected output, as before.

When inputs are declared they are the chain's whole context: a ``{{ context.KEY }}`` of a key
not declared is a problem (``undeclared_input``), and a context is checked against them before
a run starts (:func:`check_context`: a missing required key is ``missing_input``, a value of
the wrong type ``invalid_input``, an extra key ``undeclared_input``), with the defaults filled
in. A sub-chain's inputs are the args of the step that calls it, and its output that step's
output. Every front end (``runtime.start``, ``chainlab validate``, the planner's schema, the
designer's context form) asks this module instead of checking on its own.

The type check is JSON's (``type`` and ``enum``), in the standard library: the plan layer
needs no ``jsonschema`` package for it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, JsonValue, model_validator

from chainlab._text import did_you_mean, safe_repr
from chainlab.errors import InputError, Problem
from chainlab.plan.parts import PlanModel
from chainlab.plan.refs import Ref, RefError, TemplateSyntaxError, render_value, walk_path

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain

__all__ = [
    "JSON_TYPES",
    "Input",
    "apply_defaults",
    "check_context",
    "context_problems",
    "declaration_problems",
    "fit_args",
    "inputs_json_schema",
    "json_equal",
    "needed_inputs",
    "select_output",
    "subchain_arg_findings",
    "undeclared_reference",
    "value_type",
]

JsonType = Literal["string", "integer", "number", "boolean", "array", "object", "null"]
JSON_TYPES: tuple[str, ...] = ("string", "integer", "number", "boolean", "array", "object",
                               "null")


class Input(PlanModel):
    """One declared input: a context key the chain reads (a sub-chain: an arg of its step).

    ``type``: a JSON Schema type name, or a list of them (None: any JSON value).
    ``required``: a run cannot start without it; by default an input is required unless it
    has a ``default``. An input that is neither given nor required nor defaulted is null.
    """

    type: JsonType | list[JsonType] | None = None
    description: str = ""
    default: JsonValue = None
    required: bool | None = None
    enum: list[JsonValue] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _explicit_null_default(self) -> Input:
        # ``default: null`` written out: the input is optional (and stays so when the chain is
        # dumped, which leaves a null default out)
        if "default" in self.model_fields_set and self.default is None and self.required is None:
            self.required = False
        return self

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None

    @property
    def types(self) -> tuple[str, ...] | None:
        if self.type is None:
            return None
        return (self.type,) if isinstance(self.type, str) else tuple(self.type)

    def type_text(self) -> str:
        """``string``, ``integer | null``, ``any``."""
        types = self.types
        return " | ".join(types) if types else "any"

    def json_schema(self) -> dict[str, Any]:
        """This input as a JSON Schema (what the planner and the designer are shown)."""
        out: dict[str, Any] = {}
        types = self.types
        if types:
            out["type"] = types[0] if len(types) == 1 else list(types)
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.description:
            out["description"] = self.description
        if self.default is not None:
            out["default"] = self.default
        return out

    def summary(self) -> str:
        """``string, required: who asks`` / ``integer, default 10``: one line for a person."""
        parts = [self.type_text() if self.enum is None
                 else "one of " + ", ".join(safe_repr(v) for v in self.enum)]
        if self.default is not None:
            parts.append(f"default {safe_repr(self.default)}")
        elif self.is_required:
            parts.append("required")
        else:
            parts.append("optional")
        return ", ".join(parts) + (f": {self.description}" if self.description else "")

    def misfit(self, value: Any) -> str | None:
        """Why ``value`` does not fit this input (None when it does). An input that is not
        required may be null (what it is when it is left out)."""
        if value is None and not self.is_required:
            return None
        types = self.types
        kind = value_type(value)
        if types and not (kind in types or (kind == "integer" and "number" in types)):
            return f"is {safe_repr(value)} ({kind}), but it is declared as {self.type_text()}"
        if self.enum is not None and not any(json_equal(value, v) for v in self.enum):
            allowed = ", ".join(safe_repr(v) for v in self.enum)
            return f"is {safe_repr(value)}, but it must be one of {allowed}"
        return None


def value_type(value: Any) -> str:
    """The JSON type name of a JSON value (a bool is ``boolean``, not ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values as JSON Schema's ``enum`` and ``const`` see it: numbers by
    their value (``1`` equals ``1.0``), but a boolean is never a number (``true`` is not
    ``1``, which Python's ``==`` says it is), and arrays and objects item by item."""
    kind_a, kind_b = value_type(a), value_type(b)
    numbers = ("integer", "number")
    if kind_a != kind_b and not (kind_a in numbers and kind_b in numbers):
        return False
    if kind_a == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind_a == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# ============================================================================ declarations
def declaration_problems(chain: Chain) -> list[Problem]:
    """What is wrong with the declarations themselves: a default that does not fit its
    input's type, a required input with a default (the default would never be used)."""
    out: list[Problem] = []
    for name, spec in (chain.inputs or {}).items():
        field = f"inputs.{name}"
        if spec.default is not None:
            why = spec.misfit(spec.default)
            if why is not None:
                out.append(Problem("invalid_field", f"the default of input {name!r} {why}; "
                                   "change the default or the type", None, f"{field}.default"))
            if spec.required:
                out.append(Problem(
                    "invalid_field", f"input {name!r} is required but has a default, which "
                    "would never be used; drop 'required: true' or the default", None,
                    f"{field}.required"))
    return out


def undeclared_reference(chain: Chain, ref: Ref) -> str | None:
    """The message for a ``{{ context.KEY }}`` whose KEY is not a declared input (None when it
    is, or when the chain declares no inputs)."""
    if chain.inputs is None or not ref.path or not isinstance(ref.path[0], str):
        return None
    key = ref.path[0]
    if key in chain.inputs:
        return None
    return (f"{ref.source!r}: {key!r} is not a declared input"
            f"{did_you_mean(key, chain.inputs)}; declare it under 'inputs:' "
            f"(declared: {', '.join(chain.inputs) or 'none'})")


# ============================================================================ a context
def context_problems(chain: Chain, context: Mapping[str, Any]) -> list[Problem]:
    """The context's problems against the declared inputs (none when nothing is declared):
    ``missing_input``, ``invalid_input``, ``undeclared_input``, each at ``context.KEY``."""
    if chain.inputs is None:
        return []
    return _fit(chain.inputs, context, _ContextWords(chain.name))


def apply_defaults(chain: Chain, context: Mapping[str, Any]) -> dict[str, Any]:
    """The context with every declared input that is not given set to its default (null for
    an optional input without one). Unchanged when nothing is declared."""
    out = dict(context)
    for name, spec in (chain.inputs or {}).items():
        if name not in out and not (spec.is_required and spec.default is None):
            out[name] = copy.deepcopy(spec.default)
    return out


def check_context(chain: Chain, context: Mapping[str, Any]) -> dict[str, Any]:
    """The context a run of ``chain`` starts with: checked against the declared inputs, with
    the defaults filled in. Raises :class:`~chainlab.errors.InputError` naming each key."""
    problems = context_problems(chain, context)
    if problems:
        raise InputError(problems, chain_name=chain.name)
    return apply_defaults(chain, context)


class _ContextWords:
    """How the context's problems are worded (a sub-chain's args are worded otherwise)."""

    missing_code, invalid_code, extra_code = "missing_input", "invalid_input", "undeclared_input"

    def __init__(self, chain_name: str):
        self.chain = chain_name

    def field(self, key: str) -> str:
        return f"context.{key}"

    def missing(self, key: str, spec: Input) -> str:
        return (f"chain {self.chain!r} needs input {key!r} ({spec.type_text()})"
                f"{': ' + spec.description if spec.description else ''}; pass it in the "
                f"context (context={{{key!r}: ...}}) or give it a default")

    def invalid(self, key: str, why: str) -> str:
        return f"the value {why}; pass a value of that type"

    def extra(self, key: str, declared: Mapping[str, Input]) -> str:
        return (f"the context has {key!r}, which chain {self.chain!r} does not declare as an "
                f"input{did_you_mean(key, declared)}; drop it or declare it under 'inputs:'")


class _ArgWords(_ContextWords):
    missing_code = invalid_code = extra_code = "invalid_args"

    def field(self, key: str) -> str:
        return f"args.{key}"

    def missing(self, key: str, spec: Input) -> str:
        return (f"sub-chain {self.chain!r} needs input {key!r} ({spec.type_text()}); pass it "
                "as an arg of this step")

    def invalid(self, key: str, why: str) -> str:
        return f"arg {key!r} {why} by sub-chain {self.chain!r}"

    def extra(self, key: str, declared: Mapping[str, Input]) -> str:
        return (f"sub-chain {self.chain!r} declares no input {key!r}{did_you_mean(key, declared)}"
                f" (its inputs: {', '.join(declared) or 'none'})")


def _fit(inputs: Mapping[str, Input], given: Mapping[str, Any], words: _ContextWords,
         *, literal_only: bool = False) -> list[Problem]:
    out: list[Problem] = []
    for key, spec in inputs.items():
        if key not in given:
            if spec.is_required and spec.default is None:  # (needed_inputs)
                out.append(Problem(words.missing_code, words.missing(key, spec), None,
                                   words.field(key)))
            continue
        value = given[key]
        if literal_only and isinstance(value, str) and "{{" in value:
            continue  # a template: known at run time
        why = spec.misfit(value)
        if why is not None:
            out.append(Problem(words.invalid_code, words.invalid(key, why), None,
                               words.field(key)))
    for key in given:
        if key not in inputs:
            out.append(Problem(words.extra_code, words.extra(key, inputs), None,
                               words.field(key)))
    return out


# ============================================================================ sub-chains
def subchain_arg_findings(args: Mapping[str, Any], child: Chain,
                          needed: set[str]) -> list[tuple[str, str, str]]:
    """``invalid_args`` findings of a step calling sub-chain ``child`` with ``args``: with
    declared inputs, the args must fit them (literal values are type-checked); without, every
    context key the child reads (``needed``) must be passed."""
    if child.inputs is None:
        return [("invalid_args", f"sub-chain {child.name!r} reads context.{key}; pass it as an "
                 "arg of this step", f"args.{key}") for key in sorted(needed - set(args))]
    return [(p.code, p.message, str(p.field))
            for p in _fit(child.inputs, args, _ArgWords(child.name), literal_only=True)]


def fit_args(child: Chain, args: Mapping[str, Any]) -> dict[str, Any]:
    """The context a sub-chain runs with: the resolved args of its step, checked against its
    declared inputs, with the defaults filled in. Raises InputError."""
    if child.inputs is None:
        return dict(args)
    problems = _fit(child.inputs, args, _ArgWords(child.name))
    if problems:
        raise InputError(problems, chain_name=child.name)
    return apply_defaults(child, args)


def needed_inputs(chain: Chain) -> list[str]:
    """The declared inputs a context must give (required, no default), in declared order."""
    return [k for k, spec in (chain.inputs or {}).items()
            if spec.is_required and spec.default is None]


def inputs_json_schema(chain: Chain) -> dict[str, Any] | None:
    """The declared inputs as the JSON Schema of an object (None when nothing is declared)."""
    if chain.inputs is None:
        return None
    required = needed_inputs(chain)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {k: spec.json_schema() for k, spec in chain.inputs.items()},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


# ============================================================================ the output
def select_output(chain: Chain, outputs: Mapping[str, Any], context: Mapping[str, Any]) -> Any:
    """The chain's declared ``output`` rendered from a finished run's step ``outputs`` (by
    step id) and its ``context``; None when no output is declared. A reference to a step that
    has no output (it was skipped) or to a path its output lacks is null."""
    if chain.output is None:
        return None
    save_as = {s.save_as: s.id for s in chain.steps if s.save_as}

    def resolve(ref: Ref) -> Any:
        if ref.root == "context":
            value: Any = context
        elif ref.root == "steps":
            value = outputs.get(ref.target or "")
        elif ref.root == "memory":
            value = outputs.get(save_as.get(ref.target or "", ""))
        else:
            return None
        try:
            return walk_path(value, ref.path, ref.source) if ref.path else value
        except RefError:
            return None

    try:
        return render_value(chain.output, resolve)
    except TemplateSyntaxError:  # validation refuses such a chain before it runs
        return None
