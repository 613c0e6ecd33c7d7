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
from typing import TYPE_CHECKING, Any

from chainlab._text import did_you_mean
from chainlab.errors import InputError, Problem
from chainlab.plan.parts import JSON_TYPES, Input, json_equal, value_type
from chainlab.plan.refs import Ref, RefError, TemplateSyntaxError, render_value, walk_path

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData

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

# ============================================================================ declarations
def declaration_problems(chain: ChainData) -> list[Problem]:
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


def undeclared_reference(chain: ChainData, ref: Ref) -> str | None:
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
def context_problems(chain: ChainData, context: Mapping[str, Any]) -> list[Problem]:
    """The context's problems against the declared inputs (none when nothing is declared):
    ``missing_input``, ``invalid_input``, ``undeclared_input``, each at ``context.KEY``."""
    if chain.inputs is None:
        return []
    return _fit(chain.inputs, context, _ContextWords(chain.name))


def apply_defaults(chain: ChainData, context: Mapping[str, Any]) -> dict[str, Any]:
    """The context with every declared input that is not given set to its default (null for
    an optional input without one). Unchanged when nothing is declared."""
    out = dict(context)
    for name, spec in (chain.inputs or {}).items():
        if name not in out and not (spec.is_required and spec.default is None):
            out[name] = copy.deepcopy(spec.default)
    return out


def check_context(chain: ChainData, context: Mapping[str, Any]) -> dict[str, Any]:
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
def subchain_arg_findings(args: Mapping[str, Any], child: ChainData,
                          needed: set[str]) -> list[tuple[str, str, str]]:
    """``invalid_args`` findings of a step calling sub-chain ``child`` with ``args``: with
    declared inputs, the args must fit them (literal values are type-checked); without, every
    context key the child reads (``needed``) must be passed."""
    if child.inputs is None:
        return [("invalid_args", f"sub-chain {child.name!r} reads context.{key}; pass it as an "
                 "arg of this step", f"args.{key}") for key in sorted(needed - set(args))]
    return [(p.code, p.message, str(p.field))
            for p in _fit(child.inputs, args, _ArgWords(child.name), literal_only=True)]


def fit_args(child: ChainData, args: Mapping[str, Any]) -> dict[str, Any]:
    """The context a sub-chain runs with: the resolved args of its step, checked against its
    declared inputs, with the defaults filled in. Raises InputError."""
    if child.inputs is None:
        return dict(args)
    problems = _fit(child.inputs, args, _ArgWords(child.name))
    if problems:
        raise InputError(problems, chain_name=child.name)
    return apply_defaults(child, args)


def needed_inputs(chain: ChainData) -> list[str]:
    """The declared inputs a context must give (required, no default), in declared order."""
    return [k for k, spec in (chain.inputs or {}).items()
            if spec.is_required and spec.default is None]


def inputs_json_schema(chain: ChainData) -> dict[str, Any] | None:
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
def select_output(chain: ChainData, outputs: Mapping[str, Any], context: Mapping[str, Any]) -> Any:
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
