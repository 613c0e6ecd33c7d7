"""Integers beyond Python's int-to-str digit limit (4300 digits) are plan problems, never a
ValueError from a message that tried to show them."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain, PlanError, Toolbox
from chainlab._text import safe_repr
from chainlab.plan import parse_condition, parse_template
from chainlab.plan.parts import RunOptions, Step
from chainlab.plan.refs import TemplateSyntaxError, evaluate

BIG = 10**5000  # str(BIG) raises ValueError: it has more than 4300 digits
TOO_LONG = "an integer with more than 4300 digits, which cannot be stored as JSON"
SHOWN = "<int with more than 4300 digits>"


def plan(**step: Any) -> dict[str, Any]:
    return {"name": "c", "steps": [{"id": "a", "tool": "split", **step}]}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": BIG, "steps": []}, "name"),
        (plan(id=BIG), "steps.0.id"),
        (plan(retry={"max_attempts": BIG}), "steps.0.retry.max_attempts"),
        (plan(timeout_s=-BIG), "steps.0.timeout_s"),
        (plan(args={"n": BIG}), "steps.0.args.n"),
        (plan(args={"rows": [{"n": -BIG}]}), "steps.0.args.rows.0.n"),
        (plan(rollback={"tool": "undo", "args": {"n": BIG}}), "steps.0.rollback.args.n"),
        ({"name": "c", "steps": [], "options": {"pools": {"llm": BIG}}}, "options.pools.llm"),
        ({"name": "c", "steps": [], "options": {"max_concurrency": BIG}},
         "options.max_concurrency"),
    ],
    ids=["name", "id", "retry", "timeout", "args", "nested-args", "rollback", "pools",
         "options"],
)
def test_a_too_long_integer_is_one_problem_naming_its_field(data: dict[str, Any], field: str):
    with pytest.raises(PlanError) as info:
        Chain.from_dict(data)
    assert [(p.code, p.step_id, p.field) for p in info.value.problems] == [
        ("invalid_field", None, field)]
    assert TOO_LONG in info.value.problems[0].message
    assert "pass it as a string" in info.value.problems[0].message
    assert f"{field}: {TOO_LONG}" in str(info.value)


def test_a_too_long_integer_among_other_problems() -> None:
    data = plan(tool=BIG, retry={"max_attempts": [BIG]}, save_as=7)
    with pytest.raises(PlanError) as info:
        Chain.from_dict(data)
    assert [(p.step_id, p.field) for p in info.value.problems] == [
        (None, "steps.0.tool"),
        (None, "steps.0.retry.max_attempts.0"),
        ("a", "save_as"),
        ("a", "retry.max_attempts"),  # a list where a number belongs: a problem of its own
    ]
    assert info.value.problems[3].message == (
        f"Input should be a valid integer (got [{SHOWN}])")


def test_a_too_long_integer_as_a_key_is_a_plan_error() -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_dict({"name": "c", "steps": [], "options": {BIG: 1}})
    # pydantic names the key '<unprintable int object>' in its error location
    assert [(p.code, p.field) for p in info.value.problems] == [
        ("invalid_field", "options.<unprintable int object>")]
    assert info.value.problems[0].message == f"Keys should be strings (got {SHOWN})"


def test_a_too_long_integer_in_yaml_is_a_problem_at_its_line() -> None:
    # YAML's hex and binary integers escape Python's digit limit (it is about base 10)
    text = "name: c\nsteps:\n  - id: a\n    tool: split\n    args: {n: 0x" + "f" * 4000 + "}\n"
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    assert [(p.code, p.field, p.line) for p in info.value.problems] == [
        ("invalid_field", "steps.0.args.n", 5)]
    assert TOO_LONG in info.value.problems[0].message


def test_a_too_long_integer_in_json_is_a_syntax_problem() -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_json('{"name": "c", "steps": [], "x": ' + "1" * 5000 + "}")
    assert info.value.codes == ["bad_syntax"]
    assert "invalid JSON" in info.value.problems[0].message


# ---------------------------------------------------------------------------- validate()


def test_validate_shows_a_too_long_integer_in_args(toolbox: Toolbox) -> None:
    # built in Python, so the loader's checks never saw it
    chain = Chain(name="c", steps=[Step(id="a", tool="split", args={"text": [BIG, 1]})])
    with pytest.raises(PlanError) as info:
        chain.validate(toolbox)
    assert [(p.code, p.step_id, p.field) for p in info.value.problems] == [
        ("invalid_args", "a", "args.text")]
    assert info.value.problems[0].message.startswith(f"text=[{SHOWN}")
    assert "does not fit tool 'split'" in info.value.problems[0].message


def test_validate_shows_a_too_long_pool_need() -> None:
    tb = Toolbox()

    @tb.tool(resources={"llm": BIG})
    def ask() -> None: ...

    chain = Chain(name="c", options=RunOptions(pools={"llm": 2}),
                  steps=[Step(id="a", tool="ask")])
    with pytest.raises(PlanError) as info:
        chain.validate(tb)
    assert [(p.code, p.field) for p in info.value.problems] == [("invalid_field", "options.pools")]
    assert f"needs {SHOWN} units of pool 'llm'" in info.value.problems[0].message


@pytest.mark.parametrize(
    ("step", "code", "field"),
    [
        ({"when": "steps.a.output == " + "1" * 5000}, "bad_condition", "when"),
        ({"args": {"x": "{{ steps.a.output[" + "1" * 5000 + "] }}"}}, "bad_template", "args.x"),
    ],
    ids=["condition-literal", "template-index"],
)
def test_a_too_long_number_in_a_template_is_a_syntax_problem(
    step: dict[str, Any], code: str, field: str
) -> None:
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "t"}, {"id": "b", "tool": "t", **step}]})
    with pytest.raises(PlanError) as info:
        chain.validate()
    assert [(p.code, p.step_id, p.field) for p in info.value.problems] == [(code, "b", field)]
    assert "a number may have at most 4300 digits" in info.value.problems[0].message
    with pytest.raises(PlanError):
        chain.dependencies()


def test_the_parsers_refuse_too_long_numbers() -> None:
    with pytest.raises(TemplateSyntaxError, match="at most 4300 digits at position 18"):
        parse_template("{{ steps.a.output[" + "9" * 4301 + "] }}")
    with pytest.raises(TemplateSyntaxError, match="at most 4300 digits at position 5 in '1 =="):
        parse_condition("1 == -" + "9" * 4301)
    assert parse_condition("x == " + "9" * 4300) is not None  # at the limit is fine


def test_a_failed_comparison_shows_a_too_long_integer() -> None:
    with pytest.raises(TypeError, match=f"cannot compare {SHOWN} < 'x'"):
        evaluate(parse_condition("context.n < 'x'"), lambda ref: BIG)


# ---------------------------------------------------------------------------- safe_repr


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (BIG, SHOWN),
        (-BIG, SHOWN),
        ([1, BIG], f"[1, {SHOWN}]"),
        ({"k": (BIG,)}, "{'k': (<int with more than 4300 digits>,)}"),
        ("x" * 100, "'" + "x" * 56 + "..."),
        (10**4299, "1" + "0" * 56 + "..."),  # at the limit: an ordinary int
        ([_BrokenRepr()], "[<_BrokenRepr instance at 0x"),
    ],
    ids=["big", "negative-big", "in-list", "in-dict-tuple", "long-str", "at-limit", "broken"],
)
def test_safe_repr_never_raises(value: Any, shown: str) -> None:
    text = safe_repr(value)
    assert text.startswith(shown)
    assert len(text) <= 60
