"""Plan problems that help (issue 18, item 4): "did you mean" for reference roots and field
names, problems listed in line order everywhere, a duplicated step id named at both lines."""

from __future__ import annotations

import textwrap

import pytest

from chainlab import Chain, PlanError
from chainlab.errors import Problem, by_line


def y(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def problems_of(text: str) -> list[Problem]:
    return Chain.from_yaml(text).problems()


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("step.b.output", "'step' is neither a root (context, steps, memory, input, output) "
                          "nor a save_as key; did you mean 'steps'?"),
        ("contexts.user", "'contexts' is neither a root (context, steps, memory, input, "
                          "output) nor a save_as key; did you mean 'context'?"),
        ("inputs.rows", "did you mean 'input'?"),
        ("outputs", "did you mean 'output'?"),
        ("memroy.rows", "did you mean 'memory'?"),
        ("rowz", "did you mean 'rows'?"),  # not near a root: the save_as keys
        ("zebra", "nor a save_as key (known: rows)"),  # near nothing: what there is
        ("memory.rws", "no step saves 'rws' as a memory key; did you mean 'rows'?"),
    ],
)
def test_a_reference_root_typo_suggests_the_root(ref: str, says: str) -> None:
    text = y(f"""
        name: c
        steps:
          - id: b
            tool: t
            save_as: rows
          - id: a
            tool: t
            args: {{x: '{{{{ {ref} }}}}'}}
        """)
    (problem,) = problems_of(text)
    assert (problem.code, problem.step_id, problem.field, problem.line) == (
        "unknown_reference", "a", "args.x", 8)
    assert problem.message == f"{ref!r}: {says}" or problem.message.endswith(says)


@pytest.mark.parametrize(
    ("where", "field", "suggestion"),
    [
        ("    retry: {max_attemps: 3}\n", "retry.max_attemps", "max_attempts"),
        ("    tol: x\n", "tol", "tool"),
    ],
)
def test_a_field_name_typo_suggests_the_field(where: str, field: str, suggestion: str) -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml("name: c\nsteps:\n  - id: a\n    tool: t\n" + where)
    (problem,) = info.value.problems
    assert (problem.field, problem.line) == (field, 5)
    assert problem.message.endswith(f"; did you mean {suggestion!r}?")


def test_a_default_retry_typo_suggests_the_field() -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml("name: c\noptions:\n  default_retry: {backof: 2}\nsteps: []\n")
    (problem,) = info.value.problems
    assert problem.field == "options.default_retry.backof"
    assert "did you mean 'backoff'?" in problem.message


# ------------------------------------------------------------------ line order

UNORDERED = y("""
    name: c
    options: {breakpoints: [nowhere]}
    steps:
      - id: a
        tool: t
        args: {x: '{{ steps.zz.output }}'}
        depends_on: [qq]
      - id: b
        tool: t
        when: "x =="
        depends_on: [a, b]
    """)


def test_validation_problems_come_in_line_order() -> None:
    found = [(p.line, p.code) for p in problems_of(UNORDERED)]
    assert found == [
        (2, "invalid_field"),  # the breakpoint: checked last, listed first
        (6, "unknown_reference"),
        (7, "unknown_dependency"),
        (10, "bad_condition"),
        (11, "self_dependency"),
    ]
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(UNORDERED).validate()
    listed = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert [int(line.split("line ")[1].split(",")[0]) for line in listed] == [2, 6, 7, 10, 11]


def test_load_problems_come_in_line_order() -> None:
    text = y("""
        name: c
        steps:
          - id: a
            tool: t
            timeout_s: never
        colour: red
        options: {max_concurrency: 0}
        """)
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    assert [p.line for p in info.value.problems] == [5, 6, 7]


def test_problems_without_a_line_follow_in_their_order() -> None:
    a, b, c, d = (Problem("invalid_field", m, line=n) for m, n in
                  (("a", None), ("b", 9), ("c", None), ("d", 3)))
    assert by_line([a, b, c, d]) == [d, b, a, c]
    same_line = [Problem("x", "late", line=4, column=9), Problem("x", "early", line=4, column=2)]
    assert [p.message for p in by_line(same_line)] == ["early", "late"]
    assert PlanError([a, b, c, d]).problems == [d, b, a, c]


# ------------------------------------------------------------------ duplicate ids

DUPLICATE = y("""
    name: c
    steps:
      - id: fetch
        tool: t
      - id: fetch
        tool: t
        depends_on: [nowhere]
      - id: fetch
        tool: t
    """)


def test_a_duplicated_step_id_names_both_lines() -> None:
    found = [(p.code, p.line, p.message) for p in problems_of(DUPLICATE)]
    assert found == [
        ("duplicate_step", 5, "step id 'fetch' is used more than once (lines 3 and 5); give "
                              "each step its own id"),
        ("unknown_dependency", 7, "depends on unknown step 'nowhere' (known: fetch)"),
        ("duplicate_step", 8, "step id 'fetch' is used more than once (lines 3 and 8); give "
                              "each step its own id"),
    ]


def test_a_duplicated_step_id_without_text_names_no_line() -> None:
    chain = Chain.from_dict({"name": "c", "steps": [{"id": "x", "tool": "t"}] * 2})
    (problem,) = chain.problems()
    assert (problem.code, problem.line, problem.message) == (
        "duplicate_step", None, "step id 'x' is used more than once; give each step its own id")
