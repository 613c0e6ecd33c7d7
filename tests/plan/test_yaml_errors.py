"""YAML syntax errors in our own words: for each broken text, with PyYAML's pure loader and
with libyaml's, the problem names the line and column, what is wrong and a hint; PyYAML's
message comes after ours as a detail, never as the message."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chainlab import Chain, PlanError
from chainlab.plan import yamltext


class Broken(NamedTuple):
    text: str
    line: int
    column: int
    what: str  # our words for the mistake
    hint: str  # the fix we offer


CASES: dict[str, Broken] = {
    "tab indent": Broken(
        "name: c\nsteps:\n\t- id: a\n", 3, 1,
        "a tab used for indentation", "indent with spaces only"),
    "tab among spaces": Broken(
        "name: c\nsteps:\n  - id: a\n\ttool: x\n", 4, 1,
        "a tab used for indentation", "indent with spaces only"),
    "key less indented than its item": Broken(
        "name: c\nsteps:\n  - id: a\n    tool: split\n   args: {}\n", 5, 4,
        "inconsistent indentation: expected a key at column 5 (like 'id' on line 3), found "
        "'args' at column 4", "line up 'args' with the other keys of this item, at column 5"),
    "key more indented than the key above": Broken(
        "name: c\nsteps:\n  - id: a\n      tool: split\n", 4, 7,
        "inconsistent indentation: expected a key at column 5 (like 'id' on line 3), found "
        "'tool' at column 7", "line up the keys of one mapping at the same column"),
    "unclosed double quote": Broken(
        'name: "c\nsteps: []\n', 1, 7,
        'an unclosed quote: the " here is never closed', 'end the value with a matching "'),
    "unclosed single quote": Broken(
        "name: c\nsteps:\n  - id: 'a\n    tool: x\n", 3, 9,
        "an unclosed quote: the ' here is never closed", "end the value with a matching '"),
    "unclosed quote before a document line": Broken(
        'name: c\ndescription: "abc\n---\nsteps: []\n', 2, 14,
        'an unclosed quote: the " here is never closed', 'end the value with a matching "'),
    "key without its colon": Broken(
        "name: c\nsteps:\n  - id: a\n    tool t\n    args: {}\n", 4, 9,
        "no ':' after the key 'tool'", "write 'tool: t'"),
    "key at the column of the dashes": Broken(
        "name: c\nsteps:\n  - id: a\n    tool: x\n  args: {}\n", 5, 3,
        "a mapping key where a list item was expected: 'args' is at the column of the '- ' "
        "items of the list that starts on line 3",
        "indent 'args' to column 5 to add it to the item above"),
    "list item where a key belongs": Broken(
        "name: c\n- id: a\n", 2, 1,
        "a list item where a mapping key was expected",
        "put it under a key (such as 'steps:') and indent it"),
    "list item off the column of the others": Broken(
        "name: c\nsteps:\n- id: a\n  tool: x\n - id: b\n", 5, 2,
        "inconsistent indentation: a list item at column 2, but the item on line 3 starts at "
        "column 1", "put every '- ' of one list at the same column (1)"),
    "unclosed bracket": Broken(
        "name: c\nsteps: [{id: a, tool: split}\n", 3, 1,
        "an unclosed '[' (opened at line 2, column 8): expected ',' or ']'",
        "close it with ']'"),
    "no space after the colon": Broken(
        "name: c\nsteps:\n  - id:a\n    tool: x\n", 3, 7,
        "no space after ':' in 'id:a'", "write 'id: a'"),
    "colon inside a plain value": Broken(
        "name: c\ndescription: a: b\nsteps: []\n", 2, 15,
        "a ': ' inside the unquoted value of 'description'",
        "quote the value: description: 'a: b'"),
    "unquoted template": Broken(
        "name: c\nsteps:\n  - id: a\n    tool: x\n    args:\n      t: {{ steps.b.output }}\n",
        6, 10, "an unquoted template (YAML reads '{' as the start of a mapping)",
        "quote it: t: '{{ steps.b.output }}'"),
    "text after a quoted value": Broken(
        'name: "c" x\n', 1, 11,
        "unexpected text 'x' after a value on the same line", "quote the whole value"),
    "reserved character": Broken(
        "name: @c\n", 1, 7, "'@' cannot start a value (YAML reserves '@' and '`')",
        "quote the value"),
    "unknown escape": Broken(
        'name: "a\\q"\n', 1, 9,
        "an unknown escape '\\q' in a double-quoted string", "write \\\\ for a backslash"),
    "two documents": Broken(
        "name: c\n---\nname: d\n", 2, 1,
        "a second YAML document (after a '---' line)",
        "a plan is one document"),
}

LOADERS = [
    "pure",
    pytest.param("c", marks=pytest.mark.skipif(
        not yaml.__with_libyaml__, reason="PyYAML was built without libyaml")),
]


@pytest.fixture(params=LOADERS)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with each YAML loader (their PyYAML messages differ; ours must not)."""
    chosen = yamltext.C_LOADER if request.param == "c" else yamltext.PURE_LOADER
    monkeypatch.setattr(yamltext, "LOADER", chosen)
    return str(request.param)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_syntax_error_is_explained_in_our_words(loader: str, case: str) -> None:
    broken = CASES[case]
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(broken.text)
    (problem,) = info.value.problems
    assert (problem.code, problem.line, problem.column) == (
        "bad_syntax", broken.line, broken.column)
    ours, _, detail = problem.message.partition(" [PyYAML: ")
    assert ours == (f"invalid YAML: {broken.what} (line {broken.line}, column "
                    f"{broken.column}); {ours.split('; ', 1)[1]}")
    assert broken.hint in ours.split("; ", 1)[1]
    # PyYAML's words are kept, but only as the detail after ours
    assert detail.endswith("]")
    for pyyaml_word in ("while parsing", "while scanning", "expected <block end>",
                        "mapping values are not allowed", "found unexpected end"):
        assert pyyaml_word not in ours


def test_every_case_has_a_distinct_explanation() -> None:
    """No two mistakes in the table share one explanation (a catch-all would)."""
    explanations = {broken.what for broken in CASES.values()}
    # the two tab cases share theirs, and the unclosed double quotes theirs
    assert len(explanations) == len(CASES) - 2


def test_an_error_that_no_rule_knows_still_has_our_frame() -> None:
    problem = yamltext.syntax_problem(yaml.YAMLError("something odd"), "name: c\n")
    assert problem.message == (
        "invalid YAML: the text does not parse as YAML here; check the indentation and the "
        "quotes on this line and the line above [PyYAML: something odd]"
    )
    assert (problem.line, problem.column) == (None, None)


def test_a_duplicate_key_is_ours_alone(loader: str) -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml("name: c\nsteps: []\nname: d\n")
    (problem,) = info.value.problems
    assert problem.message == (
        "invalid YAML: duplicate key 'name' (first at line 1) (line 3, column 1); keep one of "
        "them (a mapping holds each key once)"
    )


def test_text_that_ends_inside_brackets_names_the_opener(loader: str) -> None:
    # the loaders stop at different places (the end of line 2 or the start of line 3);
    # the opener we name is the same
    with pytest.raises(PlanError) as info:
        Chain.from_yaml('name: flow\nsteps: [{id: a, note: "[ok"}, ')
    (problem,) = info.value.problems
    assert problem.code == "bad_syntax" and problem.line in (2, 3)
    assert problem.message.startswith(
        "invalid YAML: the text ends inside the '[' opened at line 2, column 8 (line ")
    assert "; finish the value and close it with ']' [PyYAML: " in problem.message


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(
    ["name: c", "steps:", "  - id: a", "    tool: t", "\t- x", "   args: {", "'", '"',
     "- ", "key:value", "a: b: c", "{{ x }}", "[", "]", "---", "%X", "@", "  ", "#", ": "]),
    max_size=8))
def test_any_broken_text_is_a_bad_syntax_problem_in_our_frame(parts: list[str]) -> None:
    text = "\n".join(parts)
    try:
        Chain.from_yaml(text)
    except PlanError as exc:
        for problem in exc.problems:
            if problem.code == "bad_syntax" and "alias" not in problem.message:
                assert problem.message.startswith("invalid YAML: ")
                assert problem.line is None or 1 <= problem.line <= text.count("\n") + 2
