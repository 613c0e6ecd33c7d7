"""Declared inputs and the selected output at run time (issue 29, item 4b): ``start()``
checks the context against the inputs (defaults filled in, nothing stored when it does not
fit), ``RunResult.output`` is the selected output, and a sub-chain used as a step takes its
inputs as the step's args and gives its output as the step's output."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from chainlab import Chain, InputError, PlanError, Toolbox
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


def _toolbox() -> Toolbox:
    tb = Toolbox("inputs")

    @tb.tool
    def greet(name: str, times: int = 1) -> str:
        return " ".join([f"hi {name}"] * times)

    @tb.tool
    def measure(text: str) -> dict:
        return {"text": text, "length": len(text)}

    @tb.tool
    def untyped(text: str) -> Any:  # no output schema: a misfit is only seen at run time
        return {"text": text}

    @tb.tool
    def boom(text: str) -> str:
        raise RuntimeError("no")

    tb.add_chain(Chain.from_yaml(textwrap.dedent("""
        name: hello
        inputs:
          who: {type: string}
          times: {type: integer, default: 2}
        steps:
          - id: g
            tool: greet
            args: {name: "{{ context.who }}", times: "{{ context.times }}"}
          - id: m
            tool: measure
            args: {text: "{{ steps.g.output }}"}
        output: "{{ steps.m.output.length }}"
    """)))
    return tb


TOP = textwrap.dedent("""
    name: top
    inputs:
      customer: {type: string, description: who is greeted}
      times: {type: integer, default: 1}
    steps:
      - id: greet
        tool: greet
        args: {name: "{{ context.customer }}", times: "{{ context.times }}"}
      - id: size
        tool: measure
        args: {text: "{{ steps.greet.output }}"}
    output: {text: "{{ steps.greet.output }}", length: "{{ steps.size.output.length }}"}
""")


async def test_start_refuses_a_context_that_does_not_fit_and_stores_nothing() -> None:
    store = MemoryStore()
    async with Runtime(_toolbox(), store) as rt:
        chain = Chain.from_yaml(TOP)
        with pytest.raises(InputError) as info:
            await rt.start(chain, {})
        (problem,) = info.value.problems
        assert (problem.code, problem.field) == ("missing_input", "context.customer")
        assert "needs input 'customer' (string): who is greeted" in str(info.value)
        with pytest.raises(InputError) as info:
            await rt.start(chain, {"customer": "ann", "time": 2})
        assert [(p.code, p.field) for p in info.value.problems] == [
            ("undeclared_input", "context.time")]
        assert "did you mean 'times'?" in str(info.value)
        with pytest.raises(InputError, match=r"'2' \(string\), but it is declared as integer"):
            await rt.start(chain, {"customer": "ann", "times": "2"})
    assert store.list_runs() == []


async def test_defaults_reach_the_run_and_the_result_is_the_selected_output() -> None:
    store = MemoryStore()
    async with Runtime(_toolbox(), store) as rt:
        run = await rt.start(Chain.from_yaml(TOP), {"customer": "ann"})
        result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.output == {"text": "hi ann", "length": 6}
    assert result.outputs["greet"] == "hi ann"  # the step outputs are still all there
    (record,) = store.list_runs()
    assert record.context == {"customer": "ann", "times": 1}  # the default is recorded
    # a handle read back from the store selects the same output
    async with Runtime(_toolbox(), store) as rt:
        again = rt.get_run(record.run_id)
        assert again.result().output == {"text": "hi ann", "length": 6}
        # and so does THE JSON view of a run (show --json, GET /runs/ID)
        from chainlab.render.json import run_dict

        assert run_dict(record, again.state)["output"] == {"text": "hi ann", "length": 6}


async def test_a_run_that_did_not_succeed_has_no_output() -> None:
    chain = Chain.from_dict({"name": "bad", "steps": [{"id": "b", "tool": "boom",
                                                      "args": {"text": "x"}}],
                             "output": "{{ steps.b.output }}"})
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        result = await (await rt.start(chain)).wait()
    assert result.status == RunStatus.FAILED
    assert result.output is None
    from chainlab.render.json import run_dict

    (record,) = rt.store.list_runs()
    assert run_dict(record, rt.get_run(record.run_id).state)["output"] is None


async def test_a_chain_without_declarations_runs_as_before() -> None:
    chain = Chain.from_dict({"name": "plain", "steps": [
        {"id": "g", "tool": "greet", "args": {"name": "{{ context.who }}"}}]})
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        result = await (await rt.start(chain, {"who": "bo", "extra": [1]})).wait()
    assert result.ok and result.outputs == {"g": "hi bo"} and result.output is None


async def test_a_subchain_step_takes_its_inputs_as_args_and_gives_its_output() -> None:
    chain = Chain.from_dict({"name": "outer", "steps": [
        {"id": "h", "tool": "chain:hello", "args": {"who": "{{ context.name }}"}},
        {"id": "twice", "tool": "greet", "args": {"name": "x", "times": "{{ steps.h.output }}"}},
    ], "output": "{{ steps.twice.output }}"})
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        run = await rt.start(chain, {"name": "bo"})
        result = await run.wait()
    assert result.ok, result.errors
    # times defaulted to 2 inside the sub-chain: "hi bo hi bo" is 11 characters
    assert run.steps["h"].args == {"who": "bo", "times": 2}
    assert result.outputs["h/g"] == "hi bo hi bo"
    assert result.outputs["h"] == 11  # the sub-chain's selected output, not its step dict
    assert result.output == " ".join(["hi x"] * 11)


async def test_a_subchain_arg_of_a_known_wrong_type_is_refused_at_start() -> None:
    chain = Chain.from_dict({"name": "outer", "steps": [
        {"id": "m", "tool": "measure", "args": {"text": "abc"}},
        {"id": "h", "tool": "chain:hello", "args": {"who": "{{ steps.m.output }}"}},
    ]})
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        with pytest.raises(PlanError) as info:
            await rt.start(chain)
    (problem,) = info.value.problems
    assert (problem.code, problem.step_id, problem.field) == ("reference_type", "h", "args.who")
    assert "is object (the output of 'measure'), but sub-chain 'hello' wants 'who' as " \
           "string" in problem.message


async def test_a_subchain_arg_that_does_not_fit_at_run_time_fails_the_step() -> None:
    chain = Chain.from_dict({"name": "outer", "steps": [
        {"id": "m", "tool": "untyped", "args": {"text": "abc"}},
        {"id": "h", "tool": "chain:hello", "args": {"who": "{{ steps.m.output }}"}},
    ]})
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        run = await rt.start(chain)
        result = await run.wait()
    assert result.status == RunStatus.FAILED
    error: Any = result.errors["h"]
    assert "declared as string" in error and "sub-chain 'hello'" in error
    assert run.steps["h/g"].status == "skipped"


async def test_a_fork_checks_its_context_against_the_inputs_and_selects_its_output() -> None:
    async with Runtime(_toolbox(), MemoryStore()) as rt:
        parent = await rt.start(Chain.from_yaml(TOP), {"customer": "ann"})
        await parent.wait()
        with pytest.raises(PlanError) as info:
            await rt.fork(parent.run_id, context={"times": "3"})
        assert [(p.code, p.field) for p in info.value.problems] == [
            ("invalid_input", "context.times")]
        child = await rt.fork(parent.run_id, context={"times": 2})
        result = await child.wait()
    assert result.ok and result.output == {"text": "hi ann hi ann", "length": 13}
