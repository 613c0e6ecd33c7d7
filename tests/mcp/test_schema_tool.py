"""SchemaTool (a tool described by JSON Schemas) and the MCP mapping rules, without a server:
validation located at the field, outputs, the plan's JSON Schema, fingerprints, the
hint-to-contract table and results to outputs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chainlab import Chain, Toolbox
from chainlab.errors import PlanError, ToolDefinitionError, ToolError
from chainlab.tools import SchemaTool

pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
        "priority": {"enum": ["low", "high"], "default": "low"},
    },
    "required": ["title"],
    "$defs": {"Tag": {"type": "string", "pattern": "^[a-z]+$"}},
}
OUT = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


async def _call(**args: Any) -> Any:
    return {"id": 1, **args}


def tool(**meta: Any) -> SchemaTool:
    return SchemaTool(_call, name="create", input_schema=SCHEMA, output_schema=OUT, **meta)


def test_args_are_checked_against_the_schema_at_their_field() -> None:
    t = tool()
    assert t.validate_args({"title": "x", "tags": ["a"]}) == {"title": "x", "tags": ["a"]}
    with pytest.raises(ValidationError) as info:
        t.validate_args({"tags": ["A"], "colour": "red", "priority": "urgent"})
    locs = sorted(tuple(e["loc"]) for e in info.value.errors())
    assert locs == [("colour",), ("priority",), ("tags", 0), ("title",)]
    kinds = {tuple(e["loc"]): e["type"] for e in info.value.errors()}
    assert kinds[("title",)] == "missing" and kinds[("colour",)] == "extra_forbidden"


def test_additional_properties_allowed_only_when_the_schema_says_so() -> None:
    open_schema = {**SCHEMA, "additionalProperties": True}
    t = SchemaTool(_call, name="open", input_schema=open_schema)
    assert t.validate_args({"title": "x", "colour": "red"})["colour"] == "red"


def test_plan_validation_reports_invalid_args_with_the_field() -> None:
    box = Toolbox("s")
    box.add(tool())
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "create", "args": {"title": "", "tags": ["ok", "NO"], "x": 1}},
        {"id": "b", "tool": "create", "args": {"title": "{{ steps.a.output.id }}"}}]})
    with pytest.raises(PlanError) as info:
        chain.validate(box)
    # b's whole reference is checked against a's output schema too (issue 29): an integer id
    # cannot fill a string title
    assert sorted((p.step_id, p.field, p.code) for p in info.value.problems) == [
        ("a", "args.tags", "invalid_args"), ("a", "args.title", "invalid_args"),
        ("a", "args.x", "invalid_args"), ("b", "args.title", "reference_type")]


def test_output_is_checked_against_the_output_schema() -> None:
    t = tool()
    assert t.check_output({"id": 3}) == {"id": 3}
    with pytest.raises(ValidationError):
        t.check_output({"id": "three"})
    assert SchemaTool(_call, name="free", input_schema={"type": "object"}).check_output(
        "text") == "text"


def test_a_bad_schema_is_a_definition_error() -> None:
    with pytest.raises(ToolDefinitionError, match="invalid input schema"):
        SchemaTool(_call, name="bad", input_schema={"type": "object",
                                                    "properties": {"n": {"type": 3}}})
    with pytest.raises(ToolDefinitionError, match="must describe an object"):
        SchemaTool(_call, name="bad", input_schema={"type": "string"})
    with pytest.raises(ToolDefinitionError, match="serial_key"):
        tool(serial_key="t:{nope}")


def test_the_plan_json_schema_moves_its_definitions() -> None:
    box = Toolbox("s")
    box.add(tool(serial_key="t:{title}"))
    schema = Chain.json_schema(box)
    assert "create__Tag" in schema["$defs"]
    text = str(schema)
    assert "#/$defs/create__Tag" in text and "'#/$defs/Tag'" not in text


def test_contract_and_fingerprint() -> None:
    t = tool(side_effects=True, requires_confirmation=True)
    assert (t.side_effects, t.idempotent, t.requires_confirmation) == (True, False, True)
    assert t.fingerprint == tool().fingerprint  # name and schemas, not the function object
    other = SchemaTool(_call, name="create", input_schema=SCHEMA)
    assert other.fingerprint != t.fingerprint
    assert t.describe()["input_schema"] == SCHEMA
    assert repr(t).startswith("<SchemaTool create [side_effects, confirm, async]")


# ------------------------------------------------------------------ the MCP mapping
def test_the_hint_table() -> None:
    from chainlab.mcp import contract_of

    def c(**hints: bool) -> tuple[bool, bool, bool]:
        out = contract_of(hints)
        return out["side_effects"], out["idempotent"], out["requires_confirmation"]

    assert c(readOnlyHint=True) == (False, True, False)
    assert c(readOnlyHint=True, destructiveHint=True) == (False, True, False)
    assert c() == (True, False, True)
    assert c(destructiveHint=True) == (True, False, True)
    assert c(destructiveHint=False) == (True, False, False)
    assert c(idempotentHint=True) == (True, True, True)
    assert c(destructiveHint=False, idempotentHint=True) == (True, True, False)
    assert c(openWorldHint=True) == (True, False, True)


def test_results_become_outputs_or_tool_errors() -> None:
    from mcp.types import CallToolResult, ImageContent, TextContent

    from chainlab.mcp import output_of

    def text(t: str) -> TextContent:
        return TextContent(type="text", text=t)

    assert output_of(CallToolResult(content=[text("{}")], structured_content={"a": 1}),
                     "t") == {"a": 1}
    assert output_of(CallToolResult(content=[text("hi")]), "t") == "hi"
    assert output_of(CallToolResult(content=[text("a"), text("b")]), "t") == "a\nb"
    image = ImageContent(type="image", data="AAAA", mime_type="image/png")
    [block] = output_of(CallToolResult(content=[image]), "t")
    assert block["type"] == "image"
    with pytest.raises(ToolError, match="answered with an error: nope"):
        output_of(CallToolResult(content=[text("nope")], is_error=True), "t")


def test_spec_parsing() -> None:
    from chainlab.mcp import parse_spec

    assert parse_spec(" http://127.0.0.1:1/mcp ") == {"url": "http://127.0.0.1:1/mcp"}
    assert parse_spec("python -m server") == {"command": "python -m server"}
