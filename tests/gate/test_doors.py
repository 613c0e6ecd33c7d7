"""Hostile values through each door of the runtime (DESIGN §20), one test per door, on a
real SQLite store (where a lone surrogate used to stop the driver): every example ends in a
clear chainlab error or in success with the value kept exactly (read back from the store),
never a raw exception, a run left ``running`` or a stopped driver. Each test counts its
examples (``-s`` prints them) and needs both kinds: a door that met no hostile value proved
nothing. The HTTP doors are in test_doors_http.py."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from chainlab import CallContext, Chain, Toolbox
from chainlab._text import safe_repr
from chainlab.errors import DecisionError, PlanError
from chainlab.events import RUN_TERMINAL, read_run
from chainlab.events.usage import USAGE_MAX
from chainlab.runtime import Runtime
from chainlab.store import open_store
from chainlab.testing.hostile import args_refusal, hostile_json, hostile_numbers, refusal, same_json
from chainlab.tools import JobStatus
from chainlab.tools.schema_tool import SchemaTool
from tests.gate.doors import Tally

EXAMPLES = 80
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])

VALUES: dict[int, Any] = {}  # what the tools give back, by key (hostile values never in args)
POLLED: set[int] = set()
toolbox = Toolbox("doors")


@toolbox.tool
def echo(x: Any = None) -> Any:
    return x


@toolbox.tool(side_effects=True, requires_confirmation=True)
def confirm_echo(x: Any = None) -> Any:
    return x


@toolbox.tool
def give(key: int) -> Any:
    return VALUES[key]


@toolbox.tool
def give_dict(key: int) -> dict:  # type: ignore[type-arg]
    return {"v": VALUES[key]}


@toolbox.tool
def give_list(key: int) -> list:  # type: ignore[type-arg]
    return [VALUES[key]]


@toolbox.tool
def spend(key: int, ctx: CallContext) -> int:
    first, second = VALUES[key]
    ctx.report_usage(cost=first)
    ctx.report_usage(cost=second, input_tokens=first if isinstance(first, int) else None)
    return 1


@toolbox.job(poll_every_s=0.001, max_poll_errors=1, side_effects=True)
class Remote:
    """Its handle, progress and output are the hostile value (by key)."""

    async def submit(self, key: int, part: str) -> Any:
        return VALUES[key] if part == "handle" else {"__door__": key, "part": part}

    async def poll(self, handle: Any) -> JobStatus:
        if not isinstance(handle, dict) or "__door__" not in handle:
            return JobStatus.succeeded(handle)
        value = VALUES[handle["__door__"]]
        if handle["part"] == "progress" and handle["__door__"] not in POLLED:
            POLLED.add(handle["__door__"])
            return JobStatus("running", progress=value, note=safe_repr(value))
        return JobStatus.succeeded(value if handle["part"] == "output" else 1)


async def _mcp_call(key: int) -> Any:
    from mcp.types import CallToolResult, TextContent

    from chainlab.mcp.mapping import output_of

    value = VALUES[key]
    result = CallToolResult(content=[TextContent(type="text", text="ok")],
                            structuredContent={"v": value})
    return output_of(result, "remote")


toolbox.add(SchemaTool(_mcp_call, name="mcp_give", origin="MCP: test",
                       input_schema={"type": "object", "properties": {
                           "key": {"type": "integer"}}, "required": ["key"]}))


def chain(step: dict[str, Any], **extra: Any) -> Chain:
    return Chain.from_dict({"name": "door", "steps": [{"id": "s", **step}], **extra})


class Live:
    """One runtime on one SQLite file for a test's examples (a blocking portal runs it)."""

    def __init__(self, portal: BlockingPortal, runtime: Runtime, path: Path):
        self.portal, self.runtime, self.path = portal, runtime, path
        self.key = 0

    def put(self, value: Any) -> int:
        self.key += 1
        VALUES[self.key] = value
        return self.key

    def call(self, fn: Any, *args: Any) -> Any:
        return self.portal.call(fn, *args)

    def stored(self, run_id: str) -> Any:
        """The run as the store holds it (a fresh read: what a resume would see)."""
        store = open_store(self.path)
        try:
            return read_run(store, run_id)
        finally:
            store.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    path = tmp_path / "doors.db"
    with start_blocking_portal() as portal:
        runtime = Runtime(toolbox, open_store(path))
        with portal.wrap_async_context_manager(runtime):
            yield Live(portal, runtime, path)


async def _ended(run: Any) -> Any:
    with anyio.fail_after(30):  # a stopped driver never ends the run: this fails
        result = await run.wait()
        await run.runtime.store.flush(run.run_id, run.epoch)  # (read back from the file)
        return result


def _output(live: Live, run_id: str) -> Any:
    record, _, state = live.stored(run_id)
    assert record.status in RUN_TERMINAL or record.status == "suspended", record.status
    return state.steps["s"]


def _judge(live: Live, tally: Tally, got: str, why: str | None, value: Any,
           what: str) -> None:
    """The door's verdict against the oracle's: it refused exactly what it must, and kept
    anything else exactly (the step's output, read back from the store)."""
    if got == "refused":
        assert why is not None, f"a good {what} was refused"
        tally.refused()
        return
    assert why is None, f"took a {what} it must refuse ({why})"
    step = _output(live, got)
    assert step.status == "succeeded" and same_json(step.output, value), (step.status,
                                                                          step.error)
    tally.taken()


def test_context_door(live: Live) -> None:
    tally = Tally("context (runtime.start)")
    steps = {"tool": "echo", "args": {"x": "{{ context.v }}"}}

    @SETTINGS
    @given(hostile_json())
    def one(value: Any) -> None:
        why = refusal({"v": value})  # (the context is the value the door takes)

        async def go() -> str:
            try:
                run = await live.runtime.start(chain(steps), {"v": value})
            except PlanError as exc:
                assert "context" in str(exc)
                return "refused"
            await _ended(run)
            return run.run_id

        got = live.call(go)
        _judge(live, tally, got, why, value, "context")
        if got != "refused":
            assert same_json(live.stored(got)[0].context["v"], value)

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_step_args_door(live: Live) -> None:
    tally = Tally("step args (a chain's literal args)")

    @SETTINGS
    @given(hostile_json(), st.booleans())
    def one(value: Any, from_dict: bool) -> None:
        # the door takes the whole plan: its nesting counts from the plan's top
        why = (refusal({"name": "door", "steps": [{"id": "s", "args": {"x": value}}]})
               or args_refusal(value))

        async def go() -> str:
            try:  # a plan from data (the loader's scan) or built from Python objects
                if from_dict:
                    built = chain({"tool": "echo", "args": {"x": value}})
                else:
                    from chainlab.plan.schema import Step

                    try:
                        built = Chain(name="door", steps=[Step(id="s", tool="echo",
                                                               args={"x": value})])
                    except ValidationError:  # pydantic's own model refused it (too deep)
                        return "refused"
                run = await live.runtime.start(built)
            except PlanError as exc:
                assert exc.problems and exc.problems[0].field, exc
                return "refused"
            await _ended(run)
            return run.run_id

        _judge(live, tally, live.call(go), why, value, "step arg")

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_approve_args_door(live: Live) -> None:
    tally = Tally("approve with edited args")

    @SETTINGS
    @given(hostile_json(large=False))
    def one(value: Any) -> None:
        why = refusal({"x": value})

        async def go() -> str:
            run = await live.runtime.start(chain({"tool": "confirm_echo", "args": {"x": 1}}))
            await _ended(run)  # suspended: it waits for the approval
            try:
                await run.approve("s", args={"x": value})
            except DecisionError as exc:
                assert exc.field == "args" and "args.x" in str(exc), exc
                await run.reject("s", "refused value")
                await _ended(run)
                return "refused"
            await _ended(run)
            return run.run_id

        _judge(live, tally, live.call(go), why, value, "approval arg")

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_fork_edits_door(live: Live) -> None:
    tally = Tally("fork edits (outputs, args, context)")
    parent: dict[str, str] = {}

    async def make_parent() -> str:
        run = await live.runtime.start(chain({"tool": "echo",
                                              "args": {"x": "{{ context.v }}"}}), {"v": 1})
        await _ended(run)
        return run.run_id

    parent["id"] = live.call(make_parent)

    @SETTINGS
    @given(hostile_json(), st.sampled_from(["outputs", "args", "context"]))
    @example("{{ context.x }}", "args")  # a template in an edited plan (found by CI)
    def one(value: Any, which: str) -> None:
        edit = {"outputs": {"s": value}, "args": {"s": {"x": value}},
                "context": {"v": value}}[which]
        # what each edit is checked as: the output itself, the edited plan, the context
        why = refusal({"outputs": value,
                       "args": {"steps": [{"id": "s", "args": {"x": value}}]},
                       "context": {"v": value}}[which])
        if which == "args":  # an edited plan: a string with "{{" in it is a template
            why = why or args_refusal(value)

        async def go() -> str:
            try:
                run = await live.runtime.fork(parent["id"], **{which: edit})
            except (PlanError, DecisionError) as exc:
                assert which in str(exc) or "args" in str(exc), exc
                return "refused"
            await _ended(run)
            return run.run_id

        _judge(live, tally, live.call(go), why, value, f"{which} edit")

    one()
    tally.check(minimum=EXAMPLES // 2)


@pytest.mark.parametrize("tool", ["give", "give_dict", "give_list", "mcp_give"])
def test_tool_output_door(live: Live, tool: str) -> None:
    tally = Tally(f"tool outputs ({tool})")

    @SETTINGS
    @given(hostile_json())
    def one(value: Any) -> None:
        wrapped = {"give": value, "give_dict": {"v": value}, "give_list": [value],
                   "mcp_give": {"v": value}}[tool]
        why = refusal(wrapped)
        key = live.put(value)

        async def go() -> str:
            run = await live.runtime.start(chain({"tool": tool, "args": {"key": key},
                                                  "retry": {"max_attempts": 1}}))
            await _ended(run)
            return run.run_id

        step = _output(live, live.call(go))
        if step.status == "failed":
            assert why is not None, f"a good output failed its step: {step.error}"
            assert "is refused (not JSON data" in step.error, step.error
            tally.refused()
            return
        assert why is None, f"kept an output it must refuse ({why})"
        assert step.status == "succeeded" and same_json(step.output, wrapped)
        tally.taken()

    one()
    tally.check(minimum=EXAMPLES // 2)


def _bad_usage(first: Any, second: Any) -> bool:
    """The usage rule, written out: numbers (not bools), finite, from 0 to USAGE_MAX, and
    so is one call's sum."""
    def ok(n: Any) -> bool:
        return not isinstance(n, bool) and isinstance(n, int | float) and \
            not (isinstance(n, float) and not math.isfinite(n)) and 0 <= n <= USAGE_MAX

    return not (ok(first) and ok(second) and first + second <= USAGE_MAX)


def test_usage_door(live: Live) -> None:
    tally = Tally("usage numbers (two reports and their sum)")

    @SETTINGS
    @given(hostile_numbers(), hostile_numbers() | st.floats(0, USAGE_MAX))
    def one(first: Any, second: Any) -> None:
        bad = _bad_usage(first, second)
        key = live.put((first, second))

        async def go() -> str:
            run = await live.runtime.start(chain({"tool": "spend", "args": {"key": key},
                                                  "retry": {"max_attempts": 1}}))
            await _ended(run)
            return run.run_id

        run_id = live.call(go)
        _, _, state = live.stored(run_id)
        step = state.steps["s"]
        if step.status == "failed":
            assert bad, f"good usage failed the step: {step.error}"
            assert "ValueError: usage" in step.error, step.error
            tally.refused()
            return
        assert not bad, f"kept usage it must refuse: {first!r} + {second!r}"
        assert math.isclose(state.usage["cost"], first + second, rel_tol=1e-9, abs_tol=1e-9)
        tally.taken()

    one()
    tally.check(minimum=EXAMPLES // 2)


@pytest.mark.parametrize("part", ["handle", "progress", "output"])
def test_job_door(live: Live, part: str) -> None:
    tally = Tally(f"job {part} ({part} of a remote job)")

    @SETTINGS
    @given(hostile_json(large=False) if part != "progress" else hostile_numbers())
    def one(value: Any) -> None:
        key = live.put(value)

        async def go() -> str:
            run = await live.runtime.start(chain({"tool": "Remote",
                                                  "args": {"key": key, "part": part},
                                                  "retry": {"max_attempts": 1}}))
            await _ended(run)
            return run.run_id

        step = _output(live, live.call(go))
        if part == "progress":
            bad = isinstance(value, bool) or not isinstance(value, int | float) or \
                not 0 <= value <= 1
        else:  # (a handle must be something: null is no handle)
            bad = refusal(value) is not None or (part == "handle" and value is None)
        if step.status in ("failed", "in_doubt"):
            assert bad, f"a good job {part} failed: {step.status} {step.error}"
            tally.refused()
            return
        assert not bad, f"took a job {part} it must refuse: {value!r}"
        assert step.status == "succeeded", (step.status, step.error)
        if part != "progress":
            assert same_json(step.output, value)
        tally.taken()

    one()
    tally.check(minimum=EXAMPLES // 3)


def test_no_door_lets_a_raw_exception_out(live: Live) -> None:
    """What a hostile tool body can do beyond its output: an exception whose message is not
    Unicode text, a usage dict it wrote into itself. The run ends, and the store has it."""

    @toolbox.tool
    def bad_message() -> int:
        raise ValueError("broken \ud800 text")

    @toolbox.tool
    def self_written(ctx: CallContext) -> int:
        assert ctx.usage is not None
        ctx.usage["cost"] = float("nan")
        return 1

    async def go(tool: str) -> str:
        run = await live.runtime.start(chain({"tool": tool, "retry": {"max_attempts": 1}}))
        await _ended(run)
        return run.run_id

    step = _output(live, live.call(go, "bad_message"))
    assert step.status == "failed" and "broken \ufffd text" in step.error
    step = _output(live, live.call(go, "self_written"))
    assert step.status == "failed" and "the usage 'self_written' reported is refused" in \
        step.error
