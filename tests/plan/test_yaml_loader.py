"""Loading YAML: aliases are refused (an alias bomb is a PlanError, fast), libyaml's loader is
used when PyYAML has it, and problems point at the same lines with either loader."""

from __future__ import annotations

import textwrap
from itertools import pairwise

import pytest
import yaml

from chainlab import Chain, PlanError, Toolbox
from chainlab.plan import yamltext

ALIASES_REFUSED = "YAML aliases (*name, repeating the value anchored as &name) are not allowed"


def alias_bomb() -> str:
    """9 anchors, each a list of 9 aliases to the one before: under 400 bytes of YAML whose
    data, walked as a tree, has 9**9 (387 million) leaves."""
    names = "abcdefghi"
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    lines += [f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]" for prev, cur in pairwise(names)]
    return "name: bomb\nsteps: []\nx:\n" + "".join(f"  {line}\n" for line in lines)


@pytest.mark.timeout(10)
def test_an_alias_bomb_is_a_plan_error() -> None:
    text = alias_bomb()
    assert len(text) < 400
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    (problem,) = info.value.problems
    assert (problem.code, problem.line, problem.column) == ("bad_syntax", 5, 10)
    assert problem.message.startswith("alias *a at line 5, column 10: ")
    assert ALIASES_REFUSED in problem.message
    assert "write the value out where it is needed" in problem.message
    assert "'{{ context.KEY }}'" in problem.message


@pytest.mark.parametrize(
    ("text", "anchor", "line"),
    [
        ("name: &n c\ndescription: *n\nsteps: []\n", "n", 2),
        ("name: c\nsteps: &a [*a]\n", "a", 2),  # an alias to the list it is in
        ("&a {name: c, x: *a}", "a", 1),  # a mapping containing itself
        (
            "name: c\nsteps:\n  - &s {id: a, tool: split}\n  - {<<: *s, id: b}\n",
            "s",
            4,
        ),  # the merge key: the one idiom people reach aliases for
    ],
    ids=["scalar", "list-in-itself", "mapping-in-itself", "merge-key"],
)
def test_every_alias_is_refused_at_its_line(text: str, anchor: str, line: int) -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    assert [(p.code, p.line) for p in info.value.problems] == [("bad_syntax", line)]
    assert f"alias *{anchor} at line {line}" in info.value.problems[0].message
    assert ALIASES_REFUSED in info.value.problems[0].message


def test_stars_and_lone_anchors_are_fine() -> None:
    chain = Chain.from_yaml(
        "name: &unused c\ndescription: '*bold* and a*b'\nsteps:\n"
        "  - {id: a, tool: split, args: {text: '* item'}}\n"
    )
    assert chain.description == "*bold* and a*b"
    assert chain.step("a").args == {"text": "* item"}


# ---------------------------------------------------------------------------- C loader


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml")
def test_the_libyaml_loader_is_used_when_pyyaml_has_it() -> None:
    assert yamltext.LOADER is yamltext.C_LOADER
    assert issubclass(yamltext.LOADER, yaml.CSafeLoader)
    assert issubclass(yamltext.PURE_LOADER, yaml.SafeLoader)


LOADERS = ["pure", pytest.param("c", marks=pytest.mark.skipif(
    not yaml.__with_libyaml__, reason="PyYAML was built without libyaml"))]


@pytest.fixture(params=LOADERS)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with each YAML loader (libyaml's and PyYAML's own)."""
    chosen = yamltext.C_LOADER if request.param == "c" else yamltext.PURE_LOADER
    monkeypatch.setattr(yamltext, "LOADER", chosen)
    return str(request.param)


def y(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_validate_points_at_lines_with_either_loader(loader: str, toolbox: Toolbox) -> None:
    text = y("""
        name: c
        steps:
          - id: a
            tool: split
            args: {text: hi}
          - id: b
            tool: estimat
            args:
              tasks: '{{ steps.zz.output }}'
          - id: c
            tool: estimate
            args: {tasks: [x], hours_per_task: lots}
        """)
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text).validate(toolbox)
    assert [(p.code, p.step_id, p.field, p.line) for p in info.value.problems] == [
        ("unknown_tool", "b", "tool", 7),
        ("unknown_reference", "b", "args.tasks", 9),
        ("invalid_args", "c", "args.hours_per_task", 12),
    ]


def test_load_problems_point_at_lines_with_either_loader(loader: str) -> None:
    text = y("""
        name: c
        steps:
          - id: a
            tool: split
            retry:
              max_attempts: 0
          - id: b
            tool: split
            timeout_s: never
        """)
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    assert [(p.code, p.step_id, p.field, p.line) for p in info.value.problems] == [
        ("invalid_field", "a", "retry.max_attempts", 6),
        ("invalid_field", "b", "timeout_s", 9),
    ]


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("name: c\nsteps:\n  - id: a\n    tool: split\n   args: {}\n", 5, 4,
         "while parsing a block collection"),
        ("name: c\nsteps: [{id: a, tool: split}\n", 3, 1, "while parsing a flow sequence"),
        ("name: c\nsteps: []\nname: d\n", 3, 1, "duplicate key 'name' (first at line 1)"),
        ("name: c\nsteps: [*x]\n", 2, 9, "undefined alias"),
    ],
    ids=["bad-indent", "unclosed-flow", "duplicate-key", "undefined-alias"],
)
def test_syntax_errors_point_at_the_same_place_with_either_loader(
    loader: str, text: str, line: int, column: int, words: str
) -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(text)
    (problem,) = info.value.problems
    assert (problem.code, problem.line, problem.column) == ("bad_syntax", line, column)
    assert words in problem.message


def test_alias_is_refused_with_either_loader(loader: str) -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml(
            "name: c\ndescription: &d hi\nsteps:\n  - {id: a, tool: t, description: *d}\n"
        )
    assert [(p.code, p.line, p.column) for p in info.value.problems] == [("bad_syntax", 4, 35)]


def test_both_loaders_read_the_same_data(monkeypatch: pytest.MonkeyPatch) -> None:
    text = y("""
        name: c
        description: "2024-01-01 stays a string; \\u00e9"
        options: {max_concurrency: 3, pools: {llm: 0x10}}
        steps:
          - id: a
            tool: split
            args: {text: "yes", n: 1_000, f: 1.5e+3, e: 1e3, none: ~, flag: yes, date: 2024-01-01}
        """)
    chains = []
    for chosen in (yamltext.PURE_LOADER, yamltext.C_LOADER or yamltext.PURE_LOADER):
        monkeypatch.setattr(yamltext, "LOADER", chosen)
        chains.append(Chain.from_yaml(text))
    assert chains[0] == chains[1]
    assert chains[0].step("a").args == {
        "text": "yes", "n": 1000, "f": 1500.0, "e": "1e3", "none": None, "flag": True,
        "date": "2024-01-01"}
    assert chains[0].options.pools == {"llm": 16}
