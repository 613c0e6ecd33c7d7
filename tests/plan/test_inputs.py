"""Declared inputs and the selected output (issue 29, item 4b): the declaration model, a
context checked against it, a sub-chain's args, the output selected from a run's outputs,
and the JSON Schema the planner is given."""

from __future__ import annotations

import json
import textwrap

import pytest

from chainlab import Chain, InputError, PlanError, Toolbox
from chainlab.plan.inputs import (
    apply_defaults,
    check_context,
    inputs_json_schema,
    select_output,
)

TYPED = textwrap.dedent("""
    name: typed
    description: counts a customer's words
    inputs:
      customer: {type: string, description: who the words are for}
      limit: {type: integer, default: 10}
      ratio: {type: number, required: false}
      mode: {enum: [fast, slow], default: fast}
      note: {default: null}
    steps:
      - id: words
        tool: split
        args: {text: "{{ context.customer }}"}
        save_as: ws
      - id: est
        tool: estimate
        args: {tasks: "{{ steps.words.output }}"}
    output:
      hours: "{{ steps.est.output.hours }}"
      words: "{{ ws }}"
      who: "{{ context.customer }}"
""")


def test_declarations_load_dump_and_round_trip() -> None:
    chain = Chain.from_yaml(TYPED)
    assert chain.inputs is not None
    assert list(chain.inputs) == ["customer", "limit", "ratio", "mode", "note"]
    required = {k: v.is_required for k, v in chain.inputs.items()}
    assert required == {"customer": True, "limit": False, "ratio": False, "mode": False,
                        "note": False}
    again = Chain.from_yaml(chain.to_yaml())
    assert again == chain
    assert {k: v.is_required for k, v in again.inputs.items()} == required  # type: ignore[union-attr]
    assert Chain.from_json(chain.to_json()) == chain
    text = chain.to_yaml()
    assert text.index("inputs:") < text.index("steps:") < text.index("output:")


def test_a_chain_without_declarations_is_as_before(toolbox: Toolbox) -> None:
    chain = Chain.from_yaml("name: c\nsteps:\n  - {id: a, tool: split, "
                            "args: {text: '{{ context.anything }}'}}\n")
    assert chain.inputs is None and chain.output is None
    assert "inputs" not in chain.to_dict() and "output" not in chain.to_dict()
    assert chain.validate(toolbox) is chain
    assert check_context(chain, {"anything": 1, "more": 2}) == {"anything": 1, "more": 2}
    assert select_output(chain, {"a": ["x"]}, {}) is None


def test_check_context_fills_defaults_and_names_each_key() -> None:
    chain = Chain.from_yaml(TYPED)
    assert check_context(chain, {"customer": "ann"}) == {
        "customer": "ann", "limit": 10, "ratio": None, "mode": "fast", "note": None}
    assert check_context(chain, {"customer": "ann", "ratio": 2})["ratio"] == 2  # int is a number
    with pytest.raises(InputError) as info:
        check_context(chain, {"limit": True, "mod": "slow"})
    err = info.value
    assert isinstance(err, PlanError)
    assert [(p.code, p.field) for p in err.problems] == [
        ("missing_input", "context.customer"),
        ("invalid_input", "context.limit"),
        ("undeclared_input", "context.mod"),
    ]
    text = str(err)
    assert "chain 'typed' needs input 'customer' (string): who the words are for" in text
    assert "True (boolean), but it is declared as integer" in text
    assert "did you mean 'mode'?" in text


def test_defaults_are_copies() -> None:
    chain = Chain.from_dict({"name": "c", "inputs": {"tags": {"type": "array", "default": []}}})
    first = apply_defaults(chain, {})
    first["tags"].append("x")
    assert apply_defaults(chain, {}) == {"tags": []}


def test_validate_with_a_context_checks_it_against_the_inputs(toolbox: Toolbox) -> None:
    chain = Chain.from_yaml(TYPED)
    assert chain.validate(toolbox, context={"customer": "ann"}) is chain
    # a declared input with a default is never missing (no unknown_reference for it)
    assert chain.problems(toolbox, context={"customer": "ann", "limit": 3}) == []
    assert [p.code for p in chain.problems(toolbox, context={})] == ["missing_input"]


def test_select_output_renders_from_outputs_memory_and_context() -> None:
    chain = Chain.from_yaml(TYPED)
    outputs = {"words": ["a", "b"], "est": {"hours": 2.0}}
    assert select_output(chain, outputs, {"customer": "ann"}) == {
        "hours": 2.0, "words": ["a", "b"], "who": "ann"}
    # a step without an output (skipped), or a missing path, is null
    assert select_output(chain, {"words": ["a"]}, {"customer": "ann"}) == {
        "hours": None, "words": ["a"], "who": "ann"}
    text = Chain.from_dict({"name": "c", "output": "{{ context.who }} has {{ steps.a.output }}",
                            "steps": [{"id": "a", "tool": "split"}]})
    assert select_output(text, {"a": [1]}, {"who": "ann"}) == "ann has [1]"


SUB_TYPED = textwrap.dedent("""
    name: words
    inputs:
      text: {type: string}
      hours: {type: number, default: 1.5}
    steps:
      - id: s
        tool: split
        args: {text: "{{ context.text }}"}
      - id: e
        tool: estimate
        args: {tasks: "{{ steps.s.output }}", hours_per_task: "{{ context.hours }}"}
    output: "{{ steps.e.output.hours }}"
""")


@pytest.fixture
def typed_toolbox(make_toolbox) -> Toolbox:  # type: ignore[no-untyped-def]
    tb = make_toolbox()
    tb.add_chain(Chain.from_yaml(SUB_TYPED))
    return tb


def test_a_subchain_step_args_follow_its_declared_inputs(typed_toolbox: Toolbox) -> None:
    good = Chain.from_dict({"name": "c", "steps": [
        {"id": "w", "tool": "chain:words", "args": {"text": "{{ context.t }}"}}]})
    assert good.validate(typed_toolbox) is good
    bad = Chain.from_dict({"name": "c", "steps": [
        {"id": "w", "tool": "chain:words", "args": {"hours": "two", "txt": "hi"}}]})
    with pytest.raises(PlanError) as info:
        bad.validate(typed_toolbox)
    problems = [(p.code, p.step_id, p.field) for p in info.value.problems]
    assert problems == [
        ("invalid_args", "w", "args.text"),
        ("invalid_args", "w", "args.hours"),
        ("invalid_args", "w", "args.txt"),
    ]
    text = str(info.value)
    assert "sub-chain 'words' needs input 'text' (string); pass it as an arg" in text
    assert "'two' (string), but it is declared as number" in text
    assert "declares no input 'txt'; did you mean 'text'?" in text


def test_an_undeclared_reference_inside_a_subchain_is_reported(make_toolbox) -> None:  # type: ignore[no-untyped-def]
    tb = make_toolbox()
    tb.add_chain(Chain.from_dict({"name": "sub2", "inputs": {"text": {"type": "string"}},
                                  "steps": [{"id": "s", "tool": "split",
                                             "args": {"text": "{{ context.txt }}"}}]}))
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "w", "tool": "chain:sub2", "args": {"text": "hi"}}]})
    with pytest.raises(PlanError) as info:
        chain.validate(tb)
    assert [(p.code, p.step_id) for p in info.value.problems] == [("undeclared_input", "w/s")]


def test_the_planner_schema_carries_inputs_output_and_subchain_inputs(
        typed_toolbox: Toolbox) -> None:
    schema = Chain.json_schema(typed_toolbox)
    json.dumps(schema)
    assert {"inputs", "output"} <= set(schema["properties"])
    variants = schema["$defs"]["Step"]["anyOf"]
    words = next(v for v in variants if v["properties"]["tool"]["const"] == "chain:words")
    args = words["properties"]["args"]
    assert args["required"] == ["text"]
    assert args["additionalProperties"] is False
    assert args["properties"]["text"]["type"] == "string"
    # a non-string input also takes a whole reference (as a tool's parameters do)
    hours = args["properties"]["hours"]
    assert hours["default"] == 1.5
    assert hours["anyOf"][0] == {"type": "number"}
    assert "reference" in hours["anyOf"][1]["description"]
    assert "inputs of sub-chain 'words'" in args["description"]
    assert inputs_json_schema(Chain.from_yaml(SUB_TYPED))["properties"]["hours"] == {  # type: ignore[index]
        "type": "number", "default": 1.5}
