"""JSON Schema of a plan, optionally restricted to one toolbox (for structured LLM output)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from chainlab.plan.inputs import inputs_json_schema

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData
    from chainlab.plan.toolbox_fit import ToolSource

__all__ = ["chain_json_schema"]


def chain_json_schema(chain_type: type[ChainData], toolbox: ToolSource | None = None
                      ) -> dict[str, Any]:
    """The JSON Schema of ``chain_type`` (the :class:`~chainlab.plan.schema.Chain` class, handed
    in by ``Chain.json_schema``). With a toolbox, each step must be one of the toolbox's tools
    (``tool`` is a constant) with ``args`` following that tool's input schema; sub-chains
    registered in the toolbox appear as ``chain:NAME``, their args following their declared
    ``inputs`` when they declare them."""
    schema = chain_type.model_json_schema()
    if toolbox is None:
        return schema
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    base_step = defs["Step"]
    variants = []
    for tool in toolbox:
        safe = "".join(c if c.isalnum() else "_" for c in tool.name)
        args_schema = tool.input_model.model_json_schema(ref_template=f"#/$defs/{safe}__{{model}}")
        for name, sub in args_schema.pop("$defs", {}).items():
            defs[f"{safe}__{name}"] = sub
        args_schema.pop("title", None)
        _allow_references(args_schema)
        args_schema["description"] = _tool_note(tool)
        variants.append(_variant(base_step, tool.name, args_schema, tool.description))
    for name, chain in toolbox.chains.items():
        args = inputs_json_schema(chain) or {"type": "object"}
        _allow_references(args)
        args["description"] = (f"the inputs of sub-chain {name!r}" if chain.inputs is not None
                               else f"context for sub-chain {name!r}")
        variants.append(_variant(base_step, f"chain:{name}", args, chain.description))
    defs["Step"] = {"anyOf": variants, "title": "Step"} if variants else base_step
    schema["description"] = (
        "A chain of tool calls. Use only the tools listed; reference earlier outputs with "
        "'{{ steps.ID.output.field }}' or a save_as key; dependencies are derived from references."
    )
    return schema


#: a whole-string reference; the pattern uses only character classes and ``*`` (no ``\s``,
#: no escapes): grammar converters for constrained decoding (llama.cpp's GBNF, llguidance,
#: outlines) take it as it is; llama-cpp-python's server crashed on ``\s`` (issue 36)
REFERENCE = {
    "type": "string",
    "pattern": r'^[{][{][^"\\{}]*[}][}]$',
    "description": "a reference such as {{ steps.ID.output.field }}",
}


def _allow_references(args_schema: dict[str, Any]) -> None:
    """Any argument may be a whole-string reference ("{{ steps.a.output }}") whose value
    arrives at run time; string parameters already accept it."""
    for name, prop in list(args_schema.get("properties", {}).items()):
        if prop.get("type") == "string":
            continue
        extra = {k: prop.pop(k) for k in ("title", "description", "default") if k in prop}
        args_schema["properties"][name] = {"anyOf": [prop, REFERENCE], **extra}


def _variant(
    base: dict[str, Any], tool: str, args: dict[str, Any], description: str
) -> dict[str, Any]:
    v = copy.deepcopy(base)
    v["title"] = f"Step calling {tool}"
    if description:
        v["description"] = description
    v["properties"]["tool"] = {"const": tool, "type": "string"}
    v["properties"]["args"] = args
    if args.get("required"):  # a tool with required parameters needs its args
        v["required"] = [*v.get("required", []), "args"]
    return v


def _tool_note(tool: Any) -> str:
    notes = []
    if tool.side_effects:
        notes.append("changes the world" + ("" if tool.idempotent else " (not idempotent)"))
    if tool.requires_confirmation:
        notes.append("needs human confirmation")
    return f"arguments of {tool.name}" + (f"; {', '.join(notes)}" if notes else "")
