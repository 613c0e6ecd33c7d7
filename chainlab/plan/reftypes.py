"""Do references fit the fields they feed? A whole-value reference (``"{{ steps.a.output }}"``,
``"{{ context.customer }}"``) is checked against the target parameter's JSON Schema: the type
of a step output comes from its tool's output schema (a field path goes down its
properties), the type of a context key from its declared input (``inputs:``), else from the
value given (when a context is given).

Only a clear mismatch is a problem (code ``reference_type``): a string where an array or an
object is wanted, an array where a number is wanted, ... Values a tool's validation may still
convert (a string into a number, an integer into a float) and anything without a known type
pass. :mod:`chainlab.plan.validate` reports the findings (one :class:`SourceTypes` per chain); the
designer shows them as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from chainlab.plan.graph import ref_target
from chainlab.plan.refs import Ref, TemplateSyntaxError, is_local, parse_template

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData, Step
    from chainlab.plan.toolbox_fit import ToolSource
    from chainlab.tools.contract import Tool

__all__ = ["SourceTypes", "schema_types", "type_text", "value_schema", "whole_arg_refs"]

_JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
# (source type, target type) pairs a tool's (lax) validation may still accept
_CONVERTIBLE = {("integer", "number"), ("number", "integer"), ("string", "number"),
                ("string", "integer"), ("string", "boolean"), ("integer", "boolean"),
                ("boolean", "integer"), ("boolean", "number")}


def _resolve(schema: Any, defs: Mapping[str, Any]) -> dict[str, Any]:
    for _ in range(20):
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            return schema
        schema = defs.get(ref.removeprefix("#/$defs/"), {})
    return {}


def schema_types(schema: Any, defs: Mapping[str, Any] | None = None) -> set[str] | None:
    """The JSON types a schema admits; None when it admits anything (or is not known)."""
    defs = defs or {}
    schema = _resolve(schema, defs)
    if not schema:
        return None
    for key in ("anyOf", "oneOf"):
        if key in schema:
            out: set[str] = set()
            for sub in schema[key]:
                types = schema_types(sub, defs)
                if types is None:
                    return None
                out |= types
            return out
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_types(schema["allOf"][0], defs)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return {t for v in values for t in (schema_types(value_schema(v)) or set())} or None
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return {kind}
    if isinstance(kind, list) and all(k in _JSON_TYPES for k in kind):
        return set(kind)
    if "properties" in schema:
        return {"object"}
    return None


def value_schema(value: Any) -> dict[str, Any]:
    """The JSON Schema type of a JSON value (arrays: of their first item's type)."""
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array", **({"items": value_schema(value[0])} if value else {})}
    if isinstance(value, dict):
        return {"type": "object"}
    return {}


def type_text(schema: Any, defs: Mapping[str, Any] | None = None) -> str:
    """A schema's type in a few words: ``string``, ``array of object``, ``integer | null``."""
    defs = defs or {}
    schema = _resolve(schema, defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(type_text(s, defs) for s in schema[key])
    types = schema_types(schema, defs)
    if types is None:
        return "any"
    if types == {"array"}:
        inner = schema.get("items")
        return f"array of {type_text(inner, defs)}" if inner else "array"
    return " | ".join(t for t in _JSON_TYPES if t in types)


def _fits(source: Any, sdefs: Mapping[str, Any], target: Any, tdefs: Mapping[str, Any],
          depth: int = 0) -> bool:
    s_types, t_types = schema_types(source, sdefs), schema_types(target, tdefs)
    if s_types is None or t_types is None:
        return True
    for s in s_types:
        for t in t_types:
            if s == t and s == "array" and depth < 3:
                s_items = _resolve(source, sdefs)
                t_items = _resolve(target, tdefs)
                if _arrays_fit(s_items, sdefs, t_items, tdefs, depth):
                    return True
            elif s == t or (s, t) in _CONVERTIBLE:
                return True
    return False


def _arrays_fit(source: dict[str, Any], sdefs: Mapping[str, Any], target: dict[str, Any],
                tdefs: Mapping[str, Any], depth: int) -> bool:
    # an anyOf with an array branch: compare with that branch
    for schema, defs in ((source, sdefs), (target, tdefs)):
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = [_resolve(b, defs) for b in schema[key]]
                arrays = [b for b in branches if schema_types(b, defs) == {"array"}]
                if arrays:
                    if schema is source:
                        source = arrays[0]
                    else:
                        target = arrays[0]
    if "items" not in source or "items" not in target:
        return True
    return _fits(source["items"], sdefs, target["items"], tdefs, depth + 1)


def _down(schema: dict[str, Any], defs: Mapping[str, Any], path: tuple[Any, ...]
          ) -> dict[str, Any] | None:
    """The schema of ``path`` inside ``schema`` (None once it is not known)."""
    for part in path:
        schema = _resolve(schema, defs)
        if isinstance(part, str) and "properties" in schema:
            sub = schema["properties"].get(part)
            if sub is None:
                return None
            schema = sub
        elif isinstance(part, int) and schema.get("type") == "array" and "items" in schema:
            schema = schema["items"]
        else:
            return None
    return schema


class SourceTypes:
    """The reference type check of ONE chain against a toolbox. What it reads is computed once
    per chain (the step index) and once per tool (its input and output schemas), never per
    step or per reference: a chain of 10,000 steps costs 100 times one of 100.

    ``save_as``: memory key -> step id (as validation collected it); ``context``: the run's
    context when it is known (an undeclared context key is typed by its value).
    """

    def __init__(self, chain: ChainData, toolbox: ToolSource, context: Mapping[str, Any] | None,
                 save_as: Mapping[str, str]):
        self.chain, self.toolbox, self.context, self.save_as = chain, toolbox, context, save_as
        self._steps: dict[str, Step] = {}
        for step in chain.steps:  # the first of a repeated id (a duplicate is its own problem)
            self._steps.setdefault(step.id, step)
        self._inputs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._outputs: dict[str, tuple[dict[str, Any], dict[str, Any]] | None] = {}
        # (producer, output path, consumer, parameter) -> the misfit, or None
        self._misfits: dict[tuple[Any, ...], tuple[str, str, str] | None] = {}

    def findings(self, step: Step, tool: Tool) -> list[tuple[str, str, str]]:
        """``reference_type`` findings of ``step``'s args: whole references whose source type
        cannot fit the parameter of ``tool`` they feed; and a ``for_each`` whose source is
        not a list."""
        props, defs = self._input_schema(tool)
        return self.for_each_findings(step) + self._findings(
            step, props, defs, f"tool {tool.name!r}", "change the tool")

    def for_each_findings(self, step: Step) -> list[tuple[str, str, str]]:
        """A ``for_each`` whose source is typed as something other than a list."""
        whole = _for_each_ref(step)
        found = self._source(whole, step, local=False) if whole else None
        if found is None:
            return []
        source, sdefs, origin = found
        types = schema_types(source, sdefs)
        if types is None or "array" in types:
            return []
        return [("reference_type",
                 f"for_each {step.for_each!r} is {type_text(source, sdefs)} ({origin}), not a "
                 "list: refer to a list (a field of that value that holds one)", "for_each")]

    def subchain_findings(self, step: Step, child: ChainData) -> list[tuple[str, str, str]]:
        """The same for a step calling sub-chain ``child``: its args feed the child's declared
        inputs (none when it declares none, or an input has no type)."""
        props = {k: spec.json_schema() for k, spec in (child.inputs or {}).items() if spec.types}
        return self._findings(step, props, {}, f"sub-chain {child.name!r}",
                              "change the input's type")

    def _input_schema(self, tool: Tool) -> tuple[dict[str, Any], dict[str, Any]]:
        found = self._inputs.get(tool.name)
        if found is None:
            try:
                schema = tool.input_schema()
            except Exception:  # pragma: no cover - pydantic describes every model it built
                schema = {}
            found = self._inputs[tool.name] = (schema.get("properties", {}),
                                               schema.get("$defs", {}))
        return found

    def _output_schema(self, name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        if name not in self._outputs:
            try:
                schema = self.toolbox.get(name).output_schema()
            except Exception:  # a return annotation pydantic cannot describe
                schema = None
            self._outputs[name] = (schema, schema.get("$defs", {})) if schema else None
        return self._outputs[name]

    def _producer(self, ref: Ref, current: Step) -> tuple[str, bool] | None:
        """The tool whose output ``ref`` reads (a step or memory reference to another step
        that calls a tool of the toolbox) and whether that step is a ``for_each`` one (its
        output: one of the tool's per item, in a list), else None."""
        if ref.root not in ("steps", "memory") or ref.target is None:
            return None
        target = ref_target(ref, self.save_as)
        step = self._steps.get(target) if target is not None else None
        if step is None or step is current or step.is_subchain or step.tool not in self.toolbox:
            return None
        return step.tool, step.for_each is not None

    def _output_source(self, producer: tuple[str, bool], path: tuple[str | int, ...]
                       ) -> tuple[dict[str, Any], dict[str, Any], str] | None:
        """The schema (with its defs) of ``path`` inside the output ``producer`` makes, and
        how to say where it is from."""
        tool, mapped = producer
        found = self._output_schema(tool)
        if found is None:
            return None
        schema, defs = found
        if mapped:  # one output per instance, in item order
            schema = {"type": "array", "items": schema}
        sub = _down(schema, defs, path)
        return (sub, defs, f"the output of {tool!r}") if sub is not None else None

    def _source(self, ref: Ref, current: Step, *, local: bool = True
                ) -> tuple[dict[str, Any], dict[str, Any], str] | None:
        """The schema (with its defs) of what ``ref`` names, and how to say where it is from
        (``local``: in the args or ``when`` of a for_each step, where its item is bound; its
        ``for_each`` itself is read outside any instance)."""
        if local and is_local(ref, current.local_names):  # a for_each step's item or index
            if ref.target != current.item_name:
                return ({"type": "integer"}, {}, "the item's index") if not ref.path else None
            whole = _for_each_ref(current)
            found = self._source(whole, current, local=False) if whole else None
            if found is None:
                return None
            schema, defs, origin = found
            items = _resolve(schema, defs).get("items")
            sub = _down(items, defs, ref.path) if isinstance(items, dict) else None
            return (sub, defs, f"an item of {origin}") if sub is not None else None
        producer = self._producer(ref, current)
        if producer is not None:
            return self._output_source(producer, ref.path)
        return self._context_source(ref)

    def _context_source(self, ref: Ref) -> tuple[dict[str, Any], dict[str, Any], str] | None:
        if ref.root != "context":
            return None
        chain, context = self.chain, self.context
        declared = chain.inputs.get(str(ref.path[0])) if chain.inputs and ref.path else None
        if declared is not None and declared.types:  # typed by its declaration
            sub = _down(declared.json_schema(), {}, tuple(ref.path[1:]))
            return (sub, {}, f"input {ref.path[0]!r}") if sub is not None else None
        if context is None or not ref.path or not isinstance(ref.path[0], str) \
                or ref.path[0] not in context:
            return None
        value: Any = context
        for part in ref.path:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                return None
        return value_schema(value), {}, "the context value"

    def _findings(self, step: Step, props: Mapping[str, Any], tdefs: Mapping[str, Any],
                  who: str, other_fix: str) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for key, ref in whole_arg_refs(step.args, props):
            producer = None if is_local(ref, step.local_names) else self._producer(ref, step)
            if producer is None:
                misfit = _misfit(self._source(ref, step), props[key], tdefs)
            else:  # the same output path into the same parameter: judged once per chain
                memo = (producer, ref.path, who, key)
                if memo not in self._misfits:
                    self._misfits[memo] = _misfit(self._output_source(producer, ref.path),
                                                  props[key], tdefs)
                misfit = self._misfits[memo]
            if misfit is None:
                continue
            have, origin, want = misfit
            out.append((
                "reference_type",
                f"{ref.source!r} is {have} ({origin}), but {who} wants {key!r} as {want}; "
                f"refer to a value of that type (a field of the output: "
                f"steps.ID.output.FIELD) or {other_fix}",
                f"args.{key}",
            ))
        return out


def _misfit(found: tuple[dict[str, Any], dict[str, Any], str] | None, target: Any,
            tdefs: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(source type, where it is from, target type)`` when the source cannot fit the
    target; None when it fits or its type is not known."""
    if found is None:
        return None
    source, sdefs, origin = found
    if _fits(source, sdefs, target, tdefs):
        return None
    return type_text(source, sdefs), origin, type_text(target, tdefs)


def _for_each_ref(step: Step) -> Ref | None:
    if step.for_each is None:
        return None
    try:
        return parse_template(step.for_each).whole
    except TemplateSyntaxError:
        return None


def whole_arg_refs(args: Mapping[str, Any], props: Mapping[str, Any]
                   ) -> Iterator[tuple[str, Ref]]:
    """``(parameter, reference)`` for each arg that is one whole reference
    (``"{{ steps.a.output }}"``) feeding a parameter in ``props``: the values whose type is
    the reference's source's, not text."""
    for key, value in args.items():
        if not isinstance(value, str) or "{{" not in value or key not in props:
            continue
        try:
            ref = parse_template(value).whole
        except TemplateSyntaxError:
            continue
        if ref is not None:
            yield key, ref


def schema_fits(source: Mapping[str, Any] | None, target: Mapping[str, Any] | None) -> bool:
    """Whether a value of JSON Schema ``source`` fits where ``target`` is wanted (each may
    carry its own ``$defs``; an unknown schema fits anything): the rule the
    ``reference_type`` problem applies, for a front end that offers references (the
    designer lists the ones that fit first)."""
    if not source or not target:
        return True
    return _fits(source, source.get("$defs", {}), target, target.get("$defs", {}))
