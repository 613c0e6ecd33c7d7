"""The defects of issue 36 that the value gate and its doors fixed, each reproduced as it was
reported (the HTTP ones are in test_defects_http.py)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import CallContext, Chain, Toolbox
from chainlab.errors import InputError, MCPServerError, PlanError, ToolDefinitionError
from chainlab.events import read_run
from chainlab.runtime import Runtime
from chainlab.tools import JobStatus
from chainlab.tools.schema_tool import SchemaTool
from tests.store.conftest import make_store

pytestmark = pytest.mark.anyio
STORES = ["memory", "sqlite-file", "postgres"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _toolbox() -> Toolbox:
    tb = Toolbox("defects")

    @tb.tool
    def nan_in_dict() -> dict:  # type: ignore[type-arg]
        return {"rows": [{"price": 1.0}, {"price": float("nan")}]}

    @tb.tool
    def inf_in_list() -> list:  # type: ignore[type-arg]
        return [1, [float("-inf")]]

    @tb.tool
    def lone_surrogate() -> str:
        return "caf\udce9"

    @tb.tool
    def surrogate_in_dict() -> dict:  # type: ignore[type-arg]
        return {"name": "a\ud800b"}

    @tb.job(poll_every_s=0.01)
    class SurrogateHandle:
        async def submit(self) -> dict:  # type: ignore[type-arg]
            return {"job": "id-\udfff"}

        async def poll(self, handle: dict) -> JobStatus:  # type: ignore[type-arg]
            return JobStatus.succeeded(1)

    @tb.tool
    def overflowing_usage(ctx: CallContext) -> int:
        ctx.report_usage(cost=6e14)
        ctx.report_usage(cost=6e14)  # the sum is over the limit
        return 1

    @tb.tool
    def two_big_steps(ctx: CallContext) -> int:
        ctx.report_usage(cost=1e15, input_tokens=10**15)
        return 1

    return tb


async def _run(store_kind: str, tmp_path: Path, steps: list[dict[str, Any]]) -> Any:
    store = make_store(store_kind, tmp_path)
    try:
        async with Runtime(_toolbox(), store) as runtime:
            run = await runtime.start(Chain.from_dict({
                "name": "defect", "steps": [{**s, "retry": {"max_attempts": 1}}
                                            for s in steps]}))
            with anyio.fail_after(30):  # a stopped driver never ends the run
                await run.wait()
            run_id = run.run_id
        return read_run(store, run_id)  # (what the store holds, after the runtime closed)
    finally:
        store.close()


@pytest.mark.parametrize("tool", ["nan_in_dict", "inf_in_list"])
async def test_nan_inside_a_dict_or_list_output_fails_the_step(tool: str,
                                                               tmp_path: Path) -> None:
    record, _, state = await _run("sqlite-file", tmp_path, [{"id": "s", "tool": tool}])
    step = state.steps["s"]
    assert (record.status, step.status, step.output) == ("failed", "failed", None)
    where = "rows[1].price" if tool == "nan_in_dict" else "[1][0]"
    assert where in step.error and "not a JSON number" in step.error, step.error


@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("tool", ["lone_surrogate", "surrogate_in_dict", "SurrogateHandle"])
async def test_a_lone_surrogate_fails_the_step_on_every_store(store_kind: str, tool: str,
                                                              tmp_path: Path) -> None:
    """It stopped the driver on SQLite and left the run running (MemoryStore succeeded):
    the gate catches it before any store sees it."""
    record, _, state = await _run(store_kind, tmp_path, [{"id": "s", "tool": tool}])
    step = state.steps["s"]
    if tool == "SurrogateHandle":  # a bad handle: the job may be running (as before)
        assert (record.status, step.status) == ("suspended", "in_doubt")
    else:
        assert (record.status, step.status) == ("failed", "failed")
    assert "lone surrogate" in step.error, step.error


async def test_usage_sums_and_negative_costs_are_refused(tmp_path: Path) -> None:
    record, _, state = await _run("sqlite-file", tmp_path, [
        {"id": "over", "tool": "overflowing_usage"}])
    assert state.steps["over"].status == "failed"
    assert "ValueError: usage 'cost' must be a finite number from 0 to 1e+15, got " \
        "1200000000000000.0" in state.steps["over"].error
    # two steps at the limit each: the run's total is their sum, finite
    record, _, state = await _run("sqlite-file", tmp_path / "b", [
        {"id": "a", "tool": "two_big_steps"}, {"id": "b", "tool": "two_big_steps"}])
    assert record.status == "succeeded" and state.usage["cost"] == 2e15
    assert state.usage["tokens"] == 2 * 10**15


def test_report_usage_raises_value_error_as_documented() -> None:
    ctx = CallContext("r", "s", 1, "", 0, "call", {})
    with pytest.raises(ValueError, match="more than 4300 digits"):  # was OverflowError
        ctx.report_usage(input_tokens=10**400 * 10**4000)
    with pytest.raises(ValueError, match="must be a finite number from 0"):
        ctx.report_usage(input_tokens=10**400)
    with pytest.raises(ValueError, match="never negative"):
        ctx.report_usage(cost=-0.01)
    with pytest.raises(ValueError, match="'model'"):
        ctx.report_usage(model="gpt\ud800")
    ctx.report_usage(cost=0.5, input_tokens=3)
    assert ctx.usage == {"cost": 0.5, "input_tokens": 3, "tokens": 3}


# ---------------------------------------------------------------------------- inputs


async def test_an_optional_input_without_a_default_can_be_left_out() -> None:
    from chainlab.store import MemoryStore

    tb = Toolbox("inputs")

    @tb.tool
    def greet(who: str | None = None) -> str:
        return f"hello {who}"

    chain = Chain.from_dict({
        "name": "greet", "inputs": {"who": {"type": "string", "required": False}},
        "steps": [{"id": "s", "tool": "greet", "args": {"who": "{{ context.who }}"}}]})
    async with Runtime(tb, MemoryStore()) as runtime:
        run = await runtime.start(chain)  # it was refused: "None (null) ... string"
        await run.wait()
        assert run.state.steps["s"].output == "hello None"
        run = await runtime.start(chain, {"who": "Ada"})
        await run.wait()
        assert run.state.steps["s"].output == "hello Ada"


def test_enum_of_numbers_refuses_a_boolean() -> None:
    from chainlab.plan.inputs import check_context

    chain = Chain.from_dict({"name": "e", "inputs": {"n": {"enum": [1, 2]}},
                             "steps": []})
    assert check_context(chain, {"n": 1}) == {"n": 1}
    assert check_context(chain, {"n": 2.0}) == {"n": 2.0}  # (JSON: 2.0 is the number 2)
    with pytest.raises(InputError, match="must be one of 1, 2"):
        check_context(chain, {"n": True})
    chain = Chain.from_dict({"name": "e", "inputs": {"b": {"enum": [True]}}, "steps": []})
    with pytest.raises(InputError):
        check_context(chain, {"b": 1})


# ---------------------------------------------------------------------------- MCP


def _server(tmp_path: Path, tools: str) -> list[str]:
    """A real stdio MCP server (the SDK's low-level server) listing ``tools`` as given."""
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent(f"""
        import anyio
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server
        from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

        async def tools(ctx, params):
            return ListToolsResult(tools={tools})

        async def call(ctx, params):
            return CallToolResult(content=[TextContent(type="text", text="ok")])

        server = Server("hostile", on_list_tools=tools, on_call_tool=call)

        async def main():
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(main)
    """))
    return [sys.executable, str(script)]


def test_a_server_listing_a_name_twice_registers_nothing(tmp_path: Path) -> None:
    tools = ('[Tool(name="lookup", inputSchema={"type": "object"}), '
             'Tool(name="pay", inputSchema={"type": "object"}), '
             'Tool(name="lookup", inputSchema={"type": "object"})]')
    toolbox = Toolbox("mcp")
    with pytest.raises(MCPServerError, match="lists the tool name 'lookup' more than once"):
        toolbox.add_mcp(_server(tmp_path, tools))
    assert toolbox.names() == []  # all or nothing (it was half registered)


def test_an_unresolvable_ref_is_refused_at_registration(tmp_path: Path) -> None:
    tools = ('[Tool(name="find", inputSchema={"type": "object", "properties": '
             '{"q": {"$ref": "#/$defs/Missing"}}})]')
    toolbox = Toolbox("mcp")
    with pytest.raises(MCPServerError) as info:
        toolbox.add_mcp(_server(tmp_path, tools))
    assert "'find'" in str(info.value) and "'#/$defs/Missing'" in str(info.value)
    assert toolbox.names() == []


async def _never(**args: Any) -> Any:  # pragma: no cover - never called
    raise AssertionError


def test_a_backtracking_pattern_takes_linear_time() -> None:
    tool = SchemaTool(_never, name="match", input_schema={
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "integer"}}})
    crafted = "a" * 5000 + "!"
    started = time.perf_counter()
    with pytest.raises(Exception, match="does not match"):
        tool.validate_args({"s": crafted})
    with pytest.raises(Exception, match="Extra inputs"):
        tool.validate_args({"b" * 5000 + "!": "x"})
    # (Python's re needs about 2**n steps here: 30 characters took minutes)
    assert time.perf_counter() - started < 30
    assert tool.validate_args({"s": "aaa"}) == {"s": "aaa"}


def test_a_pattern_re2_cannot_run_is_refused_at_registration() -> None:
    for pattern in (r"(a)\1", "(?=x)y", "(?<!a)b"):
        with pytest.raises(ToolDefinitionError, match="RE2 cannot run"):
            SchemaTool(_never, name="bad", input_schema={
                "type": "object", "properties": {"s": {"type": "string",
                                                       "pattern": pattern}}})


def test_a_bad_schema_is_a_plan_problem_never_an_internal_error() -> None:
    """chain.validate() raised jsonschema's internal error for a registered tool with an
    unresolvable $ref; such a tool cannot be registered any more."""
    tb = Toolbox("t")
    with pytest.raises(ToolDefinitionError, match="does not define"):
        tb.add(SchemaTool(_never, name="find", input_schema={
            "type": "object", "properties": {"q": {"$ref": "#/definitions/Nope"}}}))
    tb.add(SchemaTool(_never, name="find", input_schema={
        "type": "object", "properties": {"q": {"$ref": "#/$defs/Q"}},
        "$defs": {"Q": {"type": "string", "pattern": "^[a-z]+$"}}}))
    chain = Chain.from_dict({"name": "c", "steps": [{"id": "s", "tool": "find",
                                                     "args": {"q": "ABC"}}]})
    with pytest.raises(PlanError) as info:
        chain.validate(tb)
    assert info.value.problems[0].code == "invalid_args"
