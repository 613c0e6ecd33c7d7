"""What a model may put into a plan, and how a planned chain is made safe.

A model's plan is untrusted data. It goes through the same validation as a hand-written
plan, and before that through :func:`sanitize_model_plan`, which decides what a model may
set (the :class:`PlanPolicy`):

=====================  ================================================================
a model MAY set        chain ``name`` and ``description``; per step ``id``, ``tool``,
                       ``description``, ``depends_on``, ``args``, ``save_as``, ``when``,
                       and ``confirm: true`` (asking for MORE confirmation is always fine)
only when allowed      ``retry`` / ``timeout_s`` (``PlanPolicy.model_step_fields``);
                       ``rollback`` naming a tool in ``PlanPolicy.rollback_tools``;
                       run ``options`` fields in ``PlanPolicy.model_options``
never                  ``confirm: false`` (the tool's own confirmation rule stays);
                       ``rollback: none`` (the tool's declared compensation stays); tools or
                       sub-chains that are not registered (a validation problem); more
                       than ``PlanPolicy.max_steps`` steps (a validation problem)
=====================  ================================================================

Fields a model set without permission are dropped (not repaired): each drop is recorded
as an adjustment in the report. Then :func:`require_confirmation` (for every planned chain,
the fallback's too) sets ``confirm: true`` on each side-effecting step unless the policy
allows that tool to run unconfirmed. Args are JSON data: strings stay strings; only
``{{ ... }}`` references are parsed, by chainlab's own grammar, never evaluated as code.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chainlab.plan.schema import Chain, Rollback, RunOptions, Step

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = [
    "MODEL_STEP_FIELDS",
    "PlanPolicy",
    "model_schema",
    "require_confirmation",
    "sanitize_model_plan",
]

#: Step fields a policy can let a model set (everything else is fixed above).
MODEL_STEP_FIELDS = frozenset({"retry", "timeout_s"})
#: JSON Schema keywords left out of the model's schema (the validation after the answer
#: checks what they said): ``propertyNames``, which llguidance does not implement, and
#: ``maxLength``, which llama.cpp's GBNF converter writes as that many nested optional
#: characters (``for_each``'s 1000 overflowed its recursion; 100 per id made every grammar
#: big and its sampling slow)
_UNPORTABLE = frozenset({"propertyNames", "maxLength"})


@dataclass(frozen=True, slots=True)
class PlanPolicy:
    """The safety policy of a planner (see the module docstring for the full table).

    ``confirm_side_effects``: set ``confirm: true`` on side-effecting steps (default on;
    turning it off is the explicit opt-out, and then each tool's own
    ``requires_confirmation`` decides). ``unconfirmed_tools``: side-effecting tools that may
    run without forced confirmation. ``model_options``: run option fields a model may set
    (e.g. ``{"mode"}``). ``model_step_fields``: subset of ``{"retry", "timeout_s"}``.
    ``rollback_tools``: tools a model may name as a step's rollback. ``max_steps``: the
    largest plan accepted.

    Raises ValueError for names that are not option/step fields.
    """

    confirm_side_effects: bool = True
    unconfirmed_tools: frozenset[str] = field(default_factory=frozenset)
    model_options: frozenset[str] = field(default_factory=frozenset)
    model_step_fields: frozenset[str] = field(default_factory=frozenset)
    rollback_tools: frozenset[str] = field(default_factory=frozenset)
    max_steps: int = 50

    def __post_init__(self) -> None:
        for name in ("unconfirmed_tools", "model_options", "model_step_fields",
                     "rollback_tools"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"PlanPolicy.{name} must be a collection of names, got the "
                                 f"string {value!r}; write {name}={{{value!r}}}")
            object.__setattr__(self, name, frozenset(value))
        bad = sorted(self.model_options - set(RunOptions.model_fields))
        if bad:
            raise ValueError(f"PlanPolicy.model_options: {bad} are not run options; "
                             f"choose from {sorted(RunOptions.model_fields)}")
        bad = sorted(self.model_step_fields - MODEL_STEP_FIELDS)
        if bad:
            raise ValueError(f"PlanPolicy.model_step_fields: {bad} cannot be opened to a "
                             f"model; choose from {sorted(MODEL_STEP_FIELDS)}")
        if self.max_steps < 1:
            raise ValueError(f"PlanPolicy.max_steps must be >= 1, got {self.max_steps!r}")

    @classmethod
    def make(cls, policy: PlanPolicy | None = None, *, confirm_side_effects: bool | None = None,
             unconfirmed_tools: Iterable[str] | None = None) -> PlanPolicy:
        """``policy`` (or the default) with the two common knobs replaced when given."""
        base = policy or cls()
        changes: dict[str, Any] = {}
        if confirm_side_effects is not None:
            changes["confirm_side_effects"] = bool(confirm_side_effects)
        if unconfirmed_tools is not None:
            changes["unconfirmed_tools"] = frozenset(unconfirmed_tools)
        if not changes:
            return base
        fields = {name: getattr(base, name) for name in cls.__dataclass_fields__}
        return cls(**{**fields, **changes})


# --------------------------------------------------------------------------- sanitizing


def sanitize_model_plan(chain: Chain, policy: PlanPolicy) -> tuple[Chain, list[str]]:
    """Drop what a model may not set. Returns the new chain and one note per change."""
    notes: list[str] = []
    steps = [_sanitize_step(step, policy, notes) for step in chain.steps]
    options = chain.options
    smuggled = sorted(options.model_fields_set - policy.model_options)
    if smuggled:
        kept = {k: getattr(options, k) for k in options.model_fields_set & policy.model_options}
        options = RunOptions.model_validate(kept)
        notes.append(f"dropped run options {smuggled} set by the model (it may set "
                     f"{sorted(policy.model_options) or 'none'})")
    return chain.model_copy(update={"steps": steps, "options": options}), notes


def _sanitize_step(step: Step, policy: PlanPolicy, notes: list[str]) -> Step:
    update: dict[str, Any] = {}
    where = f"step {step.id!r}"
    for name in sorted(MODEL_STEP_FIELDS - policy.model_step_fields):
        if getattr(step, name) is not None:
            update[name] = None
            notes.append(f"{where}: dropped {name} set by the model (not allowed by the policy)")
    if step.confirm is False:
        update["confirm"] = None
        notes.append(f"{where}: ignored confirm: false from the model (the tool's own "
                     "confirmation rule applies)")
    rb = step.rollback
    if rb == "none":
        update["rollback"] = None
        notes.append(f"{where}: ignored rollback: none from the model (the tool's declared "
                     "compensation stays)")
    elif isinstance(rb, Rollback) and rb.tool not in policy.rollback_tools:
        update["rollback"] = None
        allowed = sorted(policy.rollback_tools) or "none"
        notes.append(f"{where}: dropped rollback tool {rb.tool!r} set by the model "
                     f"(rollback tools it may use: {allowed})")
    return step.model_copy(update=update) if update else step


# --------------------------------------------------------------------------- confirmation


def require_confirmation(
    chain: Chain, toolbox: Toolbox, policy: PlanPolicy
) -> tuple[Chain, list[str]]:
    """Set ``confirm: true`` on every side-effecting step the policy does not exempt (a
    sub-chain step counts as side-effecting when any step inside it, at any depth, is).
    Returns the new chain and one note per change."""
    if not policy.confirm_side_effects:
        return chain, []
    notes: list[str] = []
    steps = []
    for step in chain.steps:
        tools = _effect_tools(step, toolbox, set())
        needs = sorted(t for t in tools if t not in policy.unconfirmed_tools)
        if needs and step.confirm is not True:
            step = step.model_copy(update={"confirm": True})
            what = f"calls {needs[0]!r}" if not step.is_subchain else \
                f"runs side-effecting tools {needs}"
            notes.append(f"step {step.id!r}: confirm set to true (it {what}, which changes "
                         "the world)")
        steps.append(step)
    return chain.model_copy(update={"steps": steps}), notes


def _effect_tools(step: Step, toolbox: Toolbox, seen: set[str]) -> set[str]:
    """Names of side-effecting tools the step may call (through sub-chains too)."""
    name = step.subchain_name
    if name is None:
        if step.tool in toolbox and toolbox.get(step.tool).side_effects:
            return {step.tool}
        return set()
    if name in seen or name not in toolbox.chains:
        return set()
    seen.add(name)
    out: set[str] = set()
    for child in toolbox.chains[name].steps:
        out |= _effect_tools(child, toolbox, seen)
    return out


# --------------------------------------------------------------------------- schema


def model_schema(toolbox: Toolbox, policy: PlanPolicy) -> dict[str, Any]:
    """``Chain.json_schema(toolbox)`` (where each non-string arg also accepts a whole
    ``{{ ... }}`` reference string) cut down to what the policy lets a model set, with at
    least one step required, and only keywords that grammar converters for constrained
    decoding accept (llama.cpp's GBNF converter, llguidance, outlines: the planner tests
    convert it with each)."""
    schema = _portable(copy.deepcopy(Chain.json_schema(toolbox)))
    schema["required"] = sorted({*schema.get("required", ()), "name", "steps"})
    schema["properties"]["steps"]["minItems"] = 1
    defs = schema.get("$defs", {})
    step = defs.get("Step", {})
    for variant in step.get("anyOf", [step]):
        props = variant.get("properties", {})
        for name in MODEL_STEP_FIELDS - policy.model_step_fields:
            props.pop(name, None)
        if policy.rollback_tools:
            props["rollback"] = {"anyOf": [{
                "type": "object", "additionalProperties": False, "required": ["tool"],
                "properties": {"tool": {"enum": sorted(policy.rollback_tools)},
                               "args": {"type": "object"}}}, {"type": "null"}]}
        else:
            props.pop("rollback", None)
        props["confirm"] = {"anyOf": [{"const": True}, {"type": "null"}],
                            "description": "true asks a person to approve this step"}
    if policy.model_options:
        run_options = copy.deepcopy(defs.get("RunOptions", {}))
        run_options["properties"] = {k: v for k, v in run_options.get("properties", {}).items()
                                     if k in policy.model_options}
        schema["properties"]["options"] = run_options
    else:
        schema["properties"].pop("options", None)
    return schema


def _portable(schema: Any) -> Any:
    """``schema`` without the keywords of :data:`_UNPORTABLE`, at any depth (in place)."""
    if isinstance(schema, dict):
        for key in _UNPORTABLE & schema.keys():
            del schema[key]
        for value in schema.values():
            _portable(value)
    elif isinstance(schema, list):
        for value in schema:
            _portable(value)
    return schema
