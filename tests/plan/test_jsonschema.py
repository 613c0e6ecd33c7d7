"""Chain.json_schema(): a valid JSON Schema; with a toolbox, restricted to its tools."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from chainlab import Chain, PlanError, Toolbox

try:  # the jsonschema package is optional here: without it, only structural checks run
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:  # pragma: no cover - depends on the environment
    jsonschema = None  # type: ignore[assignment]

needs_jsonschema = pytest.mark.skipif(jsonschema is None, reason="jsonschema is not installed")

TOOLS = ["split", "estimate", "create_records", "delete_records"]


@pytest.fixture
def schema_toolbox(make_toolbox: Callable[..., Toolbox]) -> Toolbox:
    """The test toolbox with only the well-behaved sub-chain 'sub'."""
    return make_toolbox(chains=["sub"])


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    return _resolve(schema, schema["$defs"][ref[len("#/$defs/"):]])


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return out + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _example(schema: dict[str, Any], node: dict[str, Any]) -> Any:
    """The smallest instance of ``node``: required properties only, simplest branch."""
    node = _resolve(schema, node)
    if "const" in node:
        return node["const"]
    if "anyOf" in node:
        return _example(schema, node["anyOf"][0])
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties", {})
        return {k: _example(schema, props[k]) for k in node.get("required", [])}
    if kind == "array":
        return []
    return {"string": "x", "number": 1.5, "integer": 1, "boolean": True, "null": None}.get(
        kind, "x"
    )


# ---------------------------------------------------------------------------- structure


def test_plain_schema_describes_a_chain() -> None:
    schema = Chain.json_schema()
    json.dumps(schema)  # plain JSON data
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    assert set(schema["properties"]) == {"name", "description", "inputs", "steps", "output",
                                         "options"}
    assert schema["additionalProperties"] is False
    step = _resolve(schema, schema["properties"]["steps"]["items"])
    assert step["required"] == ["id", "tool"]
    assert step["additionalProperties"] is False
    assert step["properties"]["id"]["pattern"] == "^[A-Za-z0-9_-]+$"
    assert set(step["properties"]) == {"id", "tool", "description", "depends_on", "args",
                                       "save_as", "when", "retry", "timeout_s", "rollback",
                                       "confirm", "for_each", "as", "max_concurrency"}
    # every $ref points into $defs
    for ref in _refs(schema):
        assert ref.startswith("#/$defs/") and ref[len("#/$defs/"):] in schema["$defs"]


def test_schema_is_not_shared_between_calls(toolbox: Toolbox) -> None:
    first = Chain.json_schema()
    first["$defs"]["Step"]["properties"].clear()
    restricted = Chain.json_schema(toolbox)
    assert "properties" not in restricted["$defs"]["Step"]  # now an anyOf of variants
    assert Chain.json_schema()["$defs"]["Step"]["properties"]


def test_toolbox_schema_restricts_tool_to_toolbox_names(schema_toolbox: Toolbox) -> None:
    schema = Chain.json_schema(schema_toolbox)
    variants = schema["$defs"]["Step"]["anyOf"]
    consts = [v["properties"]["tool"]["const"] for v in variants]
    assert consts == [*TOOLS, "chain:sub"]
    for v in variants:
        assert v["properties"]["tool"] == {"const": v["properties"]["tool"]["const"],
                                           "type": "string"}
        assert v["additionalProperties"] is False
    assert variants[0]["title"] == "Step calling split"
    assert variants[0]["description"] == "Split text into words."
    assert variants[-1]["description"] == "splits the text it is given"
    for ref in _refs(schema):
        assert ref[len("#/$defs/"):] in schema["$defs"]


@pytest.mark.parametrize(
    ("tool", "properties", "required"),
    [
        ("split", {"text"}, ["text"]),
        ("estimate", {"tasks", "hours_per_task"}, ["tasks"]),
        ("create_records", {"table_id", "rows"}, ["table_id", "rows"]),
        ("delete_records", {"table_id", "ids"}, ["table_id", "ids"]),
    ],
)
def test_args_follow_each_tools_input_schema(
    toolbox: Toolbox, tool: str, properties: set[str], required: list[str]
) -> None:
    schema = Chain.json_schema(toolbox)
    (variant,) = [v for v in schema["$defs"]["Step"]["anyOf"]
                  if v["properties"]["tool"]["const"] == tool]
    args = variant["properties"]["args"]
    assert args["type"] == "object"
    assert set(args["properties"]) == properties
    assert args["required"] == required
    assert args["additionalProperties"] is False
    assert args["description"].startswith(f"arguments of {tool}")
    # a tool with required parameters needs its args at all
    assert "args" in variant["required"]
    expected = toolbox.get(tool).input_schema()
    del expected["title"]
    assert _unwrapped(args) == {**expected, "description": args["description"]}
    # a non-string parameter may also be a whole reference, resolved at run time
    for name, prop in args["properties"].items():
        if expected["properties"][name].get("type") == "string":
            assert prop == expected["properties"][name]
        else:
            assert [_is_reference(b) for b in prop["anyOf"]] == [False, True], name


def _is_reference(branch: dict[str, Any]) -> bool:
    """The schema branch that accepts a "{{ ... }}" reference string."""
    return branch.get("type") == "string" and "{" in branch.get("pattern", "")


def _unwrapped(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with each ``anyOf: [type, reference]`` property folded back to the type."""
    props = {}
    for name, prop in args["properties"].items():
        if "anyOf" in prop and len(prop["anyOf"]) == 2 and _is_reference(prop["anyOf"][1]):
            rest = {k: v for k, v in prop.items() if k != "anyOf"}
            prop = {**prop["anyOf"][0], **rest}
        props[name] = prop
    return {**args, "properties": props}


def test_tool_notes_in_args_description(toolbox: Toolbox) -> None:
    variants = Chain.json_schema(toolbox)["$defs"]["Step"]["anyOf"]
    notes = {v["properties"]["tool"]["const"]: v["properties"]["args"]["description"]
             for v in variants}
    assert notes["split"] == "arguments of split"
    assert notes["create_records"] == "arguments of create_records; changes the world " \
        "(not idempotent)"


def test_typed_args_of_each_tool(toolbox: Toolbox) -> None:
    variants = {v["properties"]["tool"]["const"]: v["properties"]["args"]
                for v in Chain.json_schema(toolbox)["$defs"]["Step"]["anyOf"]}
    for name in ("chain:sub", "chain:loop_a", "chain:loop_b", "chain:selfie"):
        assert variants.pop(name) == {"type": "object",  # any object: the sub-chain's context
                                      "description": f"context for sub-chain {name[6:]!r}"}
    variants = {k: _unwrapped(v)["properties"] for k, v in variants.items()}
    assert variants["split"]["text"]["type"] == "string"
    assert variants["estimate"]["tasks"] == {"items": {"type": "string"}, "title": "Tasks",
                                             "type": "array"}
    assert variants["estimate"]["hours_per_task"]["type"] == "number"
    assert variants["estimate"]["hours_per_task"]["default"] == 1.0
    assert variants["delete_records"]["ids"]["items"] == {"type": "integer"}


class Row(BaseModel):
    name: str
    size: int = 0


def test_pydantic_models_in_tool_signatures_get_prefixed_defs() -> None:
    tb = Toolbox()

    @tb.tool(name="save.rows")
    def save_rows(rows: list[Row]) -> int:
        return len(rows)

    schema = Chain.json_schema(tb)
    assert "save_rows__Row" in schema["$defs"]
    (variant,) = schema["$defs"]["Step"]["anyOf"]
    rows = _unwrapped(variant["properties"]["args"])["properties"]["rows"]
    assert rows["items"] == {"$ref": "#/$defs/save_rows__Row"}
    assert schema["$defs"]["save_rows__Row"]["required"] == ["name"]


def test_empty_toolbox_keeps_the_plain_step() -> None:
    plain = Chain.json_schema()
    empty = Chain.json_schema(Toolbox())
    assert empty["$defs"]["Step"] == plain["$defs"]["Step"]


# ---------------------------------------------------------------------------- with jsonschema


@needs_jsonschema
def test_schemas_are_valid_json_schema(toolbox: Toolbox) -> None:
    Draft202012Validator.check_schema(Chain.json_schema())
    Draft202012Validator.check_schema(Chain.json_schema(toolbox))


@needs_jsonschema
def test_a_plan_produced_from_the_schema_validates(schema_toolbox: Toolbox) -> None:
    schema = Chain.json_schema(schema_toolbox)
    steps = []
    for i, variant in enumerate(schema["$defs"]["Step"]["anyOf"]):
        step = _example(schema, variant)
        step["id"] = f"s{i}"
        if step["tool"].startswith("chain:"):
            step["args"] = {"text": "hello"}  # the context the sub-chain reads
        steps.append(step)
    plan = {"name": "from-schema", "steps": steps}
    assert [s["tool"] for s in steps] == [*TOOLS, "chain:sub"]
    assert steps[1] == {"id": "s1", "tool": "estimate", "args": {"tasks": []}}
    Draft202012Validator(schema).validate(plan)
    chain = Chain.from_dict(plan)
    assert chain.validate(schema_toolbox) is chain


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


_DELETE = _Delete()


VALID_PLAN = {
    "name": "ok",
    "options": {"max_concurrency": 2, "breakpoints": ["b"]},
    "steps": [
        {"id": "a", "tool": "split", "args": {"text": "a b"}, "save_as": "words"},
        {"id": "b", "tool": "estimate", "args": {"tasks": ["x"], "hours_per_task": 2},
         "depends_on": ["a"], "when": "words != []", "retry": {"max_attempts": 3}},
        {"id": "c", "tool": "create_records", "args": {"table_id": "t", "rows": [{"n": 1}]},
         "rollback": {"tool": "delete_records",
                      "args": {"table_id": "t", "ids": "{{ output.ids }}"}}},
        {"id": "d", "tool": "delete_records", "args": {"table_id": "t", "ids": [1]},
         "rollback": "none", "confirm": True, "timeout_s": 5},
    ],
}


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    plan = copy.deepcopy(VALID_PLAN)
    node: Any = plan
    for seg in path[:-1]:
        node = node[seg]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return plan




@needs_jsonschema
def test_valid_plan_fits_both_schemas(toolbox: Toolbox) -> None:
    Draft202012Validator(Chain.json_schema()).validate(VALID_PLAN)
    Draft202012Validator(Chain.json_schema(toolbox)).validate(VALID_PLAN)
    Chain.from_dict(VALID_PLAN).validate(toolbox)


@needs_jsonschema
@pytest.mark.parametrize(
    ("path", "value", "code"),
    [
        (("steps", 0, "tool"), "splt", "unknown_tool"),
        (("steps", 0, "args", "text"), 3, "invalid_args"),
        (("steps", 0, "args", "txt"), "x", "invalid_args"),
        (("steps", 1, "args", "tasks"), _DELETE, "invalid_args"),
        (("steps", 1, "args"), _DELETE, "invalid_args"),
        (("steps", 1, "args", "tasks"), [1], "invalid_args"),
        (("steps", 0, "id"), "a b", "invalid_field"),
        (("steps", 0, "bogus"), 1, "invalid_field"),
        (("steps", 1, "retry", "max_attempts"), 0, "invalid_field"),
        (("steps", 3, "rollback"), "never", "invalid_field"),
        (("options", "mode"), "random", "invalid_field"),
    ],
    ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else str(v),
)
def test_toolbox_schema_rejects_what_validation_rejects(
    toolbox: Toolbox, path: tuple[Any, ...], value: Any, code: str
) -> None:
    plan = _broken(path, value)
    with pytest.raises(jsonschema.ValidationError):
        Draft202012Validator(Chain.json_schema(toolbox)).validate(plan)
    with pytest.raises(PlanError) as info:
        Chain.from_dict(plan).validate(toolbox)
    assert info.value.codes == [code]


@needs_jsonschema
def test_whole_references_fit_non_string_parameters(toolbox: Toolbox) -> None:
    plan = {"name": "wired", "steps": [
        {"id": "a", "tool": "split", "args": {"text": "a b"}, "save_as": "words"},
        {"id": "b", "tool": "estimate",
         "args": {"tasks": "{{ steps.a.output }}", "hours_per_task": "{{ context.h }}"}},
        {"id": "c", "tool": "create_records", "args": {"table_id": "t",
                                                        "rows": "{{ context.rows }}"}},
    ]}
    Draft202012Validator(Chain.json_schema(toolbox)).validate(plan)
    chain = Chain.from_dict(plan)
    assert chain.validate(toolbox) is chain
    assert chain.dependencies() == {"a": set(), "b": {"a"}, "c": set()}
    # a plain (non-reference) string still does not fit a list parameter
    plan["steps"][1]["args"]["tasks"] = "a b"
    with pytest.raises(jsonschema.ValidationError):
        Draft202012Validator(Chain.json_schema(toolbox)).validate(plan)
