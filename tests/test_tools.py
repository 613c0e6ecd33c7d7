"""The tool contract: Toolbox, @tool, schemas from signatures, metadata, keys."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import chainlab
from chainlab import CallContext, Chain, Reconciliation, RetryPolicy, Rollback, Tool, Toolbox
from chainlab.errors import ToolDefinitionError, UnknownToolError
from chainlab.tools import NotJSONError, default_toolbox, to_json_value


class Point(BaseModel):
    x: int
    y: int = 0


@pytest.fixture
def tb() -> Toolbox:
    return Toolbox("t")


# ---------------------------------------------------------------------------- registration


def test_sync_and_async_tools(tb: Toolbox) -> None:
    @tb.tool
    def split(text: str) -> list[str]:
        """Split text into words.

        Whitespace separates words."""
        return text.split()

    @tb.tool(name="fetch-page")
    async def fetch(url: str) -> str:
        return f"<{url}>"

    assert isinstance(split, Tool) and isinstance(fetch, Tool)
    assert tb.names() == ["split", "fetch-page"]
    assert (split.name, split.is_async) == ("split", False)
    assert (fetch.name, fetch.is_async) == ("fetch-page", True)
    assert split.description == "Split text into words.\n\nWhitespace separates words."
    assert fetch.description == ""
    # a Tool is still callable like the function
    assert split("a b") == ["a", "b"]
    assert asyncio.run(fetch(url="x")) == "<x>"
    # the output schema of an async tool is its declared return type, not a coroutine
    assert fetch.output_schema() == {"type": "string"}
    assert "fetch-page" in tb and "fetch" not in tb
    assert len(tb) == 2
    assert list(tb) == [split, fetch]
    assert tb.get("split") is split
    assert repr(tb) == "<Toolbox 't': split, fetch-page>"
    assert repr(fetch) == "<Tool fetch-page [async]>"


def test_description_argument_wins_over_docstring(tb: Toolbox) -> None:
    @tb.tool(description="  Short.  ")
    def f() -> None:
        """Long docstring."""

    assert f.description == "Short."


def test_duplicate_name_is_an_error(tb: Toolbox) -> None:
    @tb.tool
    def split(text: str) -> list[str]:
        return text.split()

    with pytest.raises(ToolDefinitionError) as info:

        @tb.tool
        def split(text: str) -> list[str]:
            return []

    assert "toolbox 't' already has a tool named 'split'" in str(info.value)
    assert "name=" in str(info.value)
    assert isinstance(info.value, chainlab.ChainlabError) and isinstance(info.value, TypeError)

    @tb.tool(name="split2")
    def split(text: str) -> list[str]:
        return []

    assert tb.names() == ["split", "split2"]


def test_get_unknown_tool_suggests(tb: Toolbox) -> None:
    @tb.tool
    def estimate() -> None: ...

    @tb.tool
    def split() -> None: ...

    with pytest.raises(UnknownToolError) as info:
        tb.get("estimte")
    err = info.value
    # not repr-quoted like a bare KeyError; the names are listed when they are few
    assert str(err) == "no tool 'estimte' in toolbox 't'; did you mean 'estimate'? " \
        "(known: estimate, split)"
    assert (err.name, err.toolbox, err.known) == ("estimte", "t", ["estimate", "split"])
    # still a KeyError for callers that catch one, in the tool-definition branch
    assert isinstance(err, KeyError) and isinstance(err, ToolDefinitionError)
    assert isinstance(err, chainlab.ChainlabError)
    with pytest.raises(UnknownToolError, match=r"^no tool 'zzz' in toolbox 't' \(known: "):
        tb.get("zzz")


def test_get_unknown_tool_in_a_large_or_empty_toolbox() -> None:
    big = Toolbox("big")
    for i in range(20):
        big.tool(lambda: None, name=f"tool{i}")
    with pytest.raises(UnknownToolError) as info:
        big.get("tool1x")
    assert str(info.value) == "no tool 'tool1x' in toolbox 'big'; did you mean 'tool1'?"
    with pytest.raises(UnknownToolError) as info:
        big.get("zzz")
    assert str(info.value) == "no tool 'zzz' in toolbox 'big'"
    with pytest.raises(UnknownToolError) as info:
        Toolbox("empty").get("x")
    assert str(info.value) == "no tool 'x' in toolbox 'empty'"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad name", "must be letters, digits"),
        ("", "must be letters, digits"),
        ("chain:x", "must be letters, digits"),  # ':' is never allowed
    ],
)
def test_bad_tool_names(tb: Toolbox, name: str, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        tb.tool(lambda: None, name=name)


def test_not_a_function(tb: Toolbox) -> None:
    with pytest.raises(ToolDefinitionError, match="a tool must be a function"):
        Tool(3)  # type: ignore[arg-type]


def test_parameters_must_be_passable_by_keyword(tb: Toolbox) -> None:
    def positional(a: int, /) -> None: ...

    def star(*items: int) -> None: ...

    for fn in (positional, star):
        with pytest.raises(ToolDefinitionError, match="must be passable by keyword"):
            tb.tool(fn)


def test_unresolvable_type_hints_fail_at_definition(tb: Toolbox) -> None:
    class Local(BaseModel):  # invisible to the annotation resolver (a local class)
        a: int

    def save(rows: list[Local]) -> int:
        return len(rows)

    save.__annotations__ = {"rows": "list[Local]", "return": "int"}
    with pytest.raises(ToolDefinitionError, match="cannot resolve the type hints") as info:
        tb.tool(save)
    assert "'Local' is not defined" in str(info.value)

    def out(x: int) -> Local:
        return Local(a=x)

    out.__annotations__ = {"x": "int", "return": "Local"}
    with pytest.raises(ToolDefinitionError, match="cannot resolve the type hints"):
        tb.tool(out)
    assert tb.names() == []


# ---------------------------------------------------------------------------- input schema


def test_input_schema_from_type_hints(tb: Toolbox) -> None:
    @tb.tool
    def estimate(tasks: list[str], hours_per_task: float = 1.0, point: Point | None = None,
                 note="") -> dict:  # type: ignore[no-untyped-def]
        return {}

    schema = estimate.input_schema()
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["tasks"]
    assert list(schema["properties"]) == ["tasks", "hours_per_task", "point", "note"]
    assert schema["properties"]["tasks"] == {"items": {"type": "string"}, "title": "Tasks",
                                             "type": "array"}
    assert schema["properties"]["hours_per_task"] == {"default": 1.0, "title": "Hours Per Task",
                                                      "type": "number"}
    assert schema["$defs"]["Point"]["required"] == ["x"]
    assert schema["properties"]["note"] == {"default": "", "title": "Note"}  # unannotated: Any


def test_validate_args_coerces_and_refuses(tb: Toolbox) -> None:
    @tb.tool
    def estimate(tasks: list[str], hours_per_task: float = 1.0, point: Point | None = None
                 ) -> dict:
        return {}

    assert estimate.validate_args({"tasks": ["a"]}) == {
        "tasks": ["a"], "hours_per_task": 1.0, "point": None}
    out = estimate.validate_args({"tasks": ("a", "b"), "hours_per_task": "2.5",
                                  "point": {"x": "3"}})
    assert out == {"tasks": ["a", "b"], "hours_per_task": 2.5, "point": Point(x=3, y=0)}
    assert isinstance(out["point"], Point)  # the function gets its declared types
    for bad, loc in [
        ({}, ("tasks",)),
        ({"tasks": "abc"}, ("tasks",)),
        ({"tasks": [1]}, ("tasks", 0)),
        ({"tasks": [], "hours_per_task": "many"}, ("hours_per_task",)),
        ({"tasks": [], "extra": 1}, ("extra",)),
        ({"tasks": [], "point": {"y": 1}}, ("point", "x")),
    ]:
        with pytest.raises(ValidationError) as info:
            estimate.validate_args(bad)
        assert info.value.errors()[0]["loc"] == loc, bad


def test_var_keyword_tools_accept_extra_args(tb: Toolbox) -> None:
    @tb.tool
    def log(message: str, **fields: Any) -> None: ...

    assert log.validate_args({"message": "m", "a": 1, "b": [2]}) == {
        "message": "m", "a": 1, "b": [2]}
    assert log.input_schema()["additionalProperties"] is True
    assert log.input_schema()["required"] == ["message"]


def test_call_context_parameter_is_not_an_input(tb: Toolbox) -> None:
    @tb.tool
    def write(table_id: str, ctx: CallContext, n: int = 1) -> None: ...

    @tb.tool
    def plain(a: int) -> None: ...

    assert write.context_param == "ctx"
    assert plain.context_param is None
    schema = write.input_schema()
    assert list(schema["properties"]) == ["table_id", "n"]
    assert schema["required"] == ["table_id"]
    with pytest.raises(ValidationError):
        write.validate_args({"table_id": "t", "ctx": {}})
    ctx = CallContext(run_id="r", step_id="s", attempt=1, idempotency_key="k")
    assert (ctx.epoch, ctx.kind) == (0, "call")
    with pytest.raises(AttributeError):
        ctx.attempt = 2  # type: ignore[misc]


# Parameter names that pydantic cannot use as field names as they are: BaseModel attributes
# (a warning, or an error for model_config) and private names (silently dropped).
SHADOWING = ["schema", "json", "copy", "validate", "model_config", "dict", "construct",
             "model_dump", "model_fields", "_private", "__dunder", "model_name"]


def echo_tool(tb: Toolbox, param: str, **meta: Any) -> Tool:
    """Register ``echo(<param>: int, other: str = "x") -> dict`` (a parameter name such as
    ``model_config`` cannot be written as a literal def here without tripping linters)."""
    ns: dict[str, Any] = {}
    exec(  # a fixed template; only the parameter name varies
        f"def echo({param}: int, other: str = 'x') -> dict:\n"
        f"    return {{'got': {param}, 'other': other}}\n",
        ns,
    )
    return tb.tool(ns["echo"], **meta)


@pytest.mark.parametrize("param", SHADOWING)
def test_a_parameter_may_have_a_name_pydantic_reserves(param: str) -> None:
    tb = Toolbox("t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        echo = echo_tool(tb, param, serial_key=f"k:{{{param}}}")
        kwargs = echo.validate_args({param: "3"})
        assert kwargs == {param: 3, "other": "x"}
        assert echo.fn(**kwargs) == {"got": 3, "other": "x"}
        assert echo.resolve_serial_key(kwargs) == "k:3"
        for bad, kind in [({param: "many"}, "int_parsing"), ({}, "missing")]:
            with pytest.raises(ValidationError) as info:
                echo.validate_args(bad)
            assert [(e["type"], e["loc"]) for e in info.value.errors()] == [(kind, (param,))]
        # the schemas show the real name, as the plan and the model must write it
        schema = echo.input_schema()
        assert list(schema["properties"]) == [param, "other"]
        assert schema["required"] == [param]
        assert schema["properties"][param]["type"] == "integer"
        (variant,) = Chain.json_schema(tb)["$defs"]["Step"]["anyOf"]
        assert list(variant["properties"]["args"]["properties"]) == [param, "other"]
        assert variant["properties"]["args"]["required"] == [param]
        # plans are checked against the real name
        good = Chain.from_dict({"name": "c", "steps": [
            {"id": "a", "tool": "echo", "args": {param: 1}}]})
        assert good.validate(tb) is good
        bad_plan = Chain.from_dict({"name": "c", "steps": [
            {"id": "a", "tool": "echo", "args": {param: "many", "other": 2}},
            {"id": "b", "tool": "echo", "args": {}}]})
        problems = bad_plan.problems(tb)
    assert [(p.code, p.step_id, p.field) for p in problems] == [
        ("invalid_args", "a", f"args.{param}"),
        ("invalid_args", "a", "args.other"),
        ("invalid_args", "b", f"args.{param}"),
    ]
    assert problems[0].message.startswith(f"{param}='many' does not fit tool 'echo'")
    assert problems[2].message == f"missing required arg {param!r} for tool 'echo'"


def test_the_stand_in_field_name_is_not_an_argument(tb: Toolbox) -> None:
    # a real parameter already called arg_schema: the stand-in for schema must differ
    def both(schema: int, arg_schema: str) -> None: ...

    tool = tb.tool(both)
    assert tool.validate_args({"schema": 1, "arg_schema": "a"}) == {
        "schema": 1, "arg_schema": "a"}
    assert list(tool.input_schema()["properties"]) == ["schema", "arg_schema"]
    echo = echo_tool(tb, "json")
    with pytest.raises(ValidationError) as info:
        echo.validate_args({"json": 1, "arg_json": 2})
    assert [(e["type"], e["loc"]) for e in info.value.errors()] == [
        ("extra_forbidden", ("arg_json",))]
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "echo", "args": {"arg_json": 1}}]})
    assert [(p.code, p.field) for p in chain.problems(tb)] == [
        ("invalid_args", "args.arg_json"), ("invalid_args", "args.json")]


def test_a_var_keyword_tool_with_a_reserved_parameter_name(tb: Toolbox) -> None:
    def log(schema: str, **fields: Any) -> None: ...

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool = tb.tool(log)
    assert tool.validate_args({"schema": "s", "copy": 1}) == {"schema": "s", "copy": 1}
    assert tool.input_schema()["required"] == ["schema"]


def test_messages_show_values_too_long_for_str() -> None:
    big = 10**5000  # str(big) raises ValueError: more than 4300 digits
    shown = "<int with more than 4300 digits>"
    with pytest.raises(NotJSONError, match=f"rows is set {{{shown}}}, not JSON data"):
        to_json_value({"rows": {big}})
    with pytest.raises(ToolDefinitionError, match=f"a tool must be a function, got {shown}"):
        Tool(big)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match=f"tool name {shown} must be letters"):
        Tool(lambda: None, name=big)  # type: ignore[arg-type]
    with pytest.raises(ToolDefinitionError, match=rf"f: bad compensate \[{shown}\]"):
        Tool(lambda: None, name="f", compensate=[big])
    with pytest.raises(UnknownToolError, match=f"no tool {shown} in toolbox 't'"):
        Toolbox("t").get(big)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- output


def test_check_output_validates_the_return_annotation(tb: Toolbox) -> None:
    @tb.tool
    def words() -> list[str]:
        return []

    @tb.tool
    def point() -> Point:
        return Point(x=1)

    @tb.tool
    def pair() -> tuple[int, str]:
        return (1, "a")

    @tb.tool
    def anything():  # type: ignore[no-untyped-def]
        return None

    assert words.check_output(["a", "b"]) == ["a", "b"]
    with pytest.raises(ValidationError):
        words.check_output([1])
    with pytest.raises(ValidationError):
        words.check_output("a b")
    assert point.check_output(Point(x=2)) == {"x": 2, "y": 0}
    assert point.check_output({"x": "3"}) == {"x": 3, "y": 0}
    assert point.output_schema()["required"] == ["x"]
    assert pair.check_output((1, "a")) == [1, "a"]
    assert anything.output_schema() is None
    assert anything.check_output({"a": (1, Point(x=5))}) == {"a": [1, {"x": 5, "y": 0}]}


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"a": object()}, "a", "a is object"),
        ({"a": [1, {"b": {1, 2}}]}, "a[1].b", "a[1].b is set {1, 2}, not JSON data"),
        ([{"k": {"j": b"x"}}], "[0].k.j", "[0].k.j is bytes b'x', not JSON data"),
        ({1: 2}, "[1] (key)", "[1] (key) is int 1, not a string (JSON object keys are strings)"),
        (float("nan"), "", "the value is float nan, not a JSON number"),
        ({"x": [float("inf")]}, "x[0]", "x[0] is float inf"),
    ],
)
def test_check_output_refuses_non_json(tb: Toolbox, value: Any, path: str, message: str) -> None:
    @tb.tool
    def anything():  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(NotJSONError) as info:
        anything.check_output(value)
    assert info.value.path == path
    assert message in str(info.value)
    assert isinstance(info.value, TypeError)


def test_loose_output_annotations_still_refuse_non_json(tb: Toolbox) -> None:
    @tb.tool
    def loose() -> dict:
        return {}

    @tb.tool
    def items() -> list:
        return []

    # what pydantic can express in JSON is converted (a set becomes a list) ...
    assert loose.check_output({"ok": 1, "s": {"deep": {2}}}) == {"ok": 1, "s": {"deep": [2]}}
    # ... anything else is refused with the path, never a serializer's own exception
    for tool_, value, path in [
        (loose, {"ok": 1, "bad": {"deep": object()}}, "bad.deep"),
        (items, [1, object()], "[1]"),
        (loose, {"raw": b"\xff"}, "raw"),
    ]:
        with pytest.raises(NotJSONError) as info:
            tool_.check_output(value)
        assert info.value.path == path


# ---------------------------------------------------------------------------- metadata


def test_metadata_defaults(tb: Toolbox) -> None:
    @tb.tool
    def read(a: int) -> int:
        return a

    @tb.tool(side_effects=True)
    def write(a: int) -> None: ...

    @tb.tool(side_effects=True, idempotent=True)
    def upsert(a: int) -> None: ...

    assert (read.side_effects, read.idempotent, read.safe_to_repeat) == (False, True, True)
    assert (write.side_effects, write.idempotent, write.safe_to_repeat) == (True, False, False)
    assert (upsert.side_effects, upsert.idempotent, upsert.safe_to_repeat) == (True, True, True)
    for t in (read, write, upsert):
        assert t.requires_confirmation is False
        assert t.needs_confirmation({"a": 1}) is False
        assert t.serial_key is None and t.resolve_serial_key({"a": 1}) is None
        assert t.parallel_safe is True
        assert t.resources == {}
        assert t.compensate is None and t.reconcile is None
        assert t.retry is None and t.timeout_s is None
    assert repr(write) == "<Tool write [side_effects]>"
    assert repr(upsert) == "<Tool upsert [side_effects, idempotent]>"


def test_parallel_safe_false_serialises_on_the_tool_name(tb: Toolbox) -> None:
    @tb.tool(parallel_safe=False)
    def sheet(row: int) -> None: ...

    assert sheet.serial_key == "sheet"
    assert sheet.resolve_serial_key({"row": 1}) == "sheet"
    assert sheet.resolve_serial_key({"row": 2}) == "sheet"


def test_serial_key_template(tb: Toolbox) -> None:
    @tb.tool(serial_key="table:{table_id}", side_effects=True)
    def insert(table_id: str, rows: list[dict]) -> None: ...

    @tb.tool(serial_key="{a}/{b}", parallel_safe=False)  # an explicit key wins
    def both(a: int, b: str = "x") -> None: ...

    assert insert.resolve_serial_key({"table_id": "t1", "rows": []}) == "table:t1"
    assert insert.resolve_serial_key({"table_id": "t2", "rows": [{}]}) == "table:t2"
    assert both.serial_key == "{a}/{b}"
    assert both.resolve_serial_key({"a": 1, "b": "y"}) == "1/y"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("table:{tabel_id}",
         "names 'tabel_id', which is not a parameter; did you mean 'table_id'?"),
        ("{nope}", "names 'nope', which is not a parameter"),
        ("table:{table_id", "bad serial_key"),
    ],
)
def test_serial_key_naming_a_non_parameter_is_an_error(
    tb: Toolbox, template: str, message: str
) -> None:
    def insert(table_id: str) -> None: ...

    with pytest.raises(ToolDefinitionError) as info:
        tb.tool(insert, serial_key=template)
    assert message in str(info.value)
    assert tb.names() == []


@pytest.mark.parametrize("units", [0, -1, 1.5, "2", None])
def test_resources_must_be_ints_of_at_least_one(tb: Toolbox, units: Any) -> None:
    with pytest.raises(ToolDefinitionError, match=r"resources\['llm'\] must be an int >= 1"):
        tb.tool(lambda prompt: prompt, name="ask", resources={"llm": units})


def test_resources(tb: Toolbox) -> None:
    @tb.tool(resources={"llm": 2, "gpu": 1})
    def ask(prompt: str) -> str:
        return prompt

    assert ask.resources == {"llm": 2, "gpu": 1}


@pytest.mark.parametrize(
    "compensate",
    [
        ("delete_records", {"ids": "{{ output.ids }}"}),
        {"tool": "delete_records", "args": {"ids": "{{ output.ids }}"}},
        Rollback(tool="delete_records", args={"ids": "{{ output.ids }}"}),
    ],
    ids=["tuple", "dict", "Rollback"],
)
def test_compensate_forms(tb: Toolbox, compensate: Any) -> None:
    @tb.tool(side_effects=True, compensate=compensate)
    def create_records(table_id: str, rows: list[dict]) -> dict:
        return {}

    assert create_records.compensate == Rollback(tool="delete_records",
                                                 args={"ids": "{{ output.ids }}"})
    assert create_records.describe()["compensate"] == "delete_records"


def test_compensate_by_name_only(tb: Toolbox) -> None:
    t = tb.tool(lambda: None, name="make", compensate="unmake")
    assert t.compensate == Rollback(tool="unmake")


@pytest.mark.parametrize(
    "compensate", [3, ("a",), ("a", "b", "c"), {"tol": "x"}, ("a", 5), {"tool": 1}]
)
def test_bad_compensate(tb: Toolbox, compensate: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="bad compensate"):
        tb.tool(lambda: None, name="make", compensate=compensate)


def test_requires_confirmation_bool_or_callable(tb: Toolbox) -> None:
    @tb.tool(requires_confirmation=True)
    def always(n: int) -> None: ...

    @tb.tool(requires_confirmation=lambda args: args["n"] > 10)
    def big(n: int) -> None: ...

    assert always.needs_confirmation({"n": 1}) is True
    assert big.needs_confirmation({"n": 11}) is True
    assert big.needs_confirmation({"n": 10}) is False
    assert always.describe()["requires_confirmation"] is True
    assert big.describe()["requires_confirmation"] == "depends on args"
    assert repr(big) == "<Tool big [confirm]>"
    with pytest.raises(ToolDefinitionError, match="requires_confirmation must be a bool"):
        tb.tool(lambda: None, name="x", requires_confirmation="yes")


def test_confirmation_callable_gets_a_copy(tb: Toolbox) -> None:
    seen: list[dict[str, Any]] = []

    def check(args: dict[str, Any]) -> bool:
        seen.append(args)
        args["n"] = -1  # mutating what it was given must not touch the caller's args
        return True

    t = tb.tool(lambda n: None, name="t", requires_confirmation=check)
    args = {"n": 5}
    assert t.needs_confirmation(args) is True
    assert args == {"n": 5}
    assert seen == [{"n": -1}]


def test_preview(tb: Toolbox) -> None:
    @tb.tool(preview=lambda args: f"delete {len(args['ids'])} rows from {args['table_id']}")
    def delete_records(table_id: str, ids: list[int]) -> None: ...

    @tb.tool
    def plain(a: int) -> None: ...

    assert delete_records.make_preview({"table_id": "t", "ids": [1, 2]}) == "delete 2 rows from t"
    assert plain.make_preview({"a": 1}) == {"a": 1}
    with pytest.raises(ToolDefinitionError, match="preview must be a callable"):
        tb.tool(lambda: None, name="x", preview="text")


def test_reconcile_retry_timeout(tb: Toolbox) -> None:
    def reconcile(args: dict[str, Any], key: str) -> Reconciliation | None:
        return Reconciliation.took_effect({"id": 1}) if args else Reconciliation.no_effect()

    @tb.tool(side_effects=True, reconcile=reconcile, retry={"max_attempts": 5}, timeout_s=3)
    def charge(amount: int) -> dict:
        return {}

    assert charge.reconcile is reconcile
    assert charge.retry == RetryPolicy(max_attempts=5)
    assert charge.timeout_s == 3
    assert charge.describe()["reconcile"] is True
    assert Reconciliation.took_effect({"id": 1}) == Reconciliation(True, {"id": 1})
    assert Reconciliation.no_effect() == Reconciliation(False, None)
    with pytest.raises(ToolDefinitionError, match="reconcile must be a callable"):
        tb.tool(lambda: None, name="x", reconcile=1)
    policy = RetryPolicy(max_attempts=2)
    assert tb.tool(lambda: None, name="y", retry=policy).retry is policy


def test_describe(tb: Toolbox) -> None:
    @tb.tool(side_effects=True, requires_confirmation=True, serial_key="t:{table_id}",
             resources={"db": 1}, compensate=("delete_records", {"ids": "{{ output.ids }}"}))
    def create_records(table_id: str, rows: list[dict]) -> dict:
        """Insert rows."""
        return {}

    assert create_records.describe() == {
        "name": "create_records",
        "description": "Insert rows.",
        "input_schema": create_records.input_schema(),
        "output_schema": {"additionalProperties": True, "type": "object"},
        "side_effects": True,
        "idempotent": False,
        "requires_confirmation": True,
        "serial_key": "t:{table_id}",
        "resources": {"db": 1},
        "compensate": "delete_records",
        "reconcile": False,
        "always_ask": False,  # (issue 46: only a person decides its calls when True)
        "approvers": None,  # (issue 46: the roles that may approve or grant for it)
    }
    assert tb.describe() == [create_records.describe()]


# ---------------------------------------------------------------------------- default toolbox


def test_default_toolbox_via_chainlab_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_toolbox, "_tools", {})  # restored after the test
    assert chainlab.default_toolbox is default_toolbox

    @chainlab.tool
    def shout(text: str) -> str:
        return text.upper()

    @chainlab.tool(side_effects=True, name="notify")
    async def send(to: str) -> None: ...

    assert default_toolbox.names() == ["shout", "notify"]
    assert default_toolbox.get("shout") is shout
    assert shout("hi") == "HI"
    assert default_toolbox.get("notify").side_effects is True
    with pytest.raises(ToolDefinitionError):
        chainlab.tool(lambda text: text, name="shout")


def test_redefining_a_tool_in_main_replaces_it(tb: Toolbox) -> None:
    """A notebook cell run twice redefines its tool in __main__: that replaces it."""
    ns: dict[str, object] = {"__name__": "__main__", "tb": tb}
    code = "@tb.tool\ndef fetch(url: str) -> str:\n    return {body!r}\n"
    exec(code.format(body="v1"), ns)
    exec(code.format(body="v2"), ns)
    assert tb.names() == ["fetch"]
    assert tb.get("fetch").fn("x") == "v2"
