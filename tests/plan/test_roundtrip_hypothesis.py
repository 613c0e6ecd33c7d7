"""Property tests: no input escapes as anything but PlanError; valid plans round-trip;
a back edge in a DAG is always reported as exactly one cycle."""

from __future__ import annotations

import contextlib
import itertools
import json
import string
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chainlab import Chain, CycleError, PlanError, Toolbox
from chainlab.plan.parts import RESERVED_KEYS

SETTINGS = settings(
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# generating whole valid plans costs ~10x a garbage example: fewer keep the file < 20 s
HEAVY = settings(SETTINGS, max_examples=150)

# ============================================================================ (a) + (b) garbage in

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
)
# values that are not JSON at all also come from Python callers
odd_scalars = st.sampled_from([b"bytes", (1, 2), {1, 2}, object(), 1j, float("nan")])
any_value = st.recursive(
    json_scalars | odd_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.integers() | st.none(), inner, max_size=4),
    max_leaves=20,
)

STEP_KEYS = ["id", "tool", "description", "depends_on", "args", "save_as", "when", "retry",
             "timeout_s", "rollback", "confirm", "bogus"]
CHAIN_KEYS = ["name", "description", "steps", "options", "extra"]
TEMPLATES = ["{{ steps.a.output }}", "{{ context.x }}", "{{ k }}", "{{ }}", "{{ steps.a }}",
             "x {{ memory.k[0] }}", "{{ output.x }}", "a == 1", "not", "(", "{{ a"]
step_values = (
    any_value
    | st.sampled_from(["a", "b", "split", "estimate", "chain:sub", "chain:selfie", "none"])
    | st.sampled_from(TEMPLATES)
    | st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)
    | st.dictionaries(st.sampled_from(["text", "tasks", "tool", "args", "max_attempts"]),
                      any_value | st.sampled_from(TEMPLATES), max_size=3)
)
plan_shaped = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["c", "bad name", ""]) | any_value,
        "steps": st.lists(
            st.dictionaries(st.sampled_from(STEP_KEYS), step_values, max_size=7)
            | any_value,
            max_size=4,
        )
        | any_value,
        "options": st.dictionaries(
            st.sampled_from(["breakpoints", "pools", "max_concurrency", "mode", "nope"]),
            any_value,
            max_size=3,
        )
        | any_value,
        "description": any_value,
    },
)


# nearly valid plans: right shape, random (often wrong) ids, tools, args, references
CONDITIONS = ["k_a == 1", "steps.a.output != null", "{{ k_b }} in [1, 'x']", "not context.f",
              "(a or b) and c", "steps.zz.output", "output.x", "a ==", "1 < 'x'", "memory.k_a"]
json_garbage = st.recursive(
    json_scalars.filter(lambda v: v == v), lambda inner: st.lists(inner, max_size=3), max_leaves=5
)
near_valid_step = st.fixed_dictionaries(
    # mostly well-formed, so that validate (not only the loader) meets random combinations
    {"id": st.sampled_from(["a", "b", "c"] * 5 + ["a b"]),
     "tool": st.sampled_from(["split", "estimate", "create_records", "delete_records", "nope",
                              "chain:sub", "chain:loop_a", "chain:selfie", "chain:", "chain:x"])},
    optional={
        "args": st.dictionaries(
            st.sampled_from(["text", "tasks", "hours_per_task", "table_id", "rows", "ids", "z"]),
            st.sampled_from(TEMPLATES) | json_garbage, max_size=3),
        "depends_on": st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=3),
        "save_as": st.sampled_from(["k_a", "k_b"] * 5 + ["steps"]),
        "when": st.sampled_from(CONDITIONS),
        "rollback": st.sampled_from(["none", {"tool": "delete_records"}, {"tool": "nope"},
                                     {"tool": "delete_records",
                                      "args": {"ids": "{{ output.ids }}", "table_id": 1}}] * 3
                                    + ["bad"]),
        "retry": st.sampled_from([{}, {"max_attempts": 3}] * 5 + [{"max_attempts": 0}]),
    },
)
near_valid = st.fixed_dictionaries(
    {"name": st.sampled_from(["c", "sub", "selfie", "loop_a"]),
     "steps": st.lists(near_valid_step, max_size=5)},
    optional={"options": st.fixed_dictionaries(
        {"breakpoints": st.lists(st.sampled_from(["a", "q"]), max_size=2)})},
)


def _only_plan_errors(toolbox: Toolbox, load: Any) -> None:
    try:
        chain = load()
    except PlanError:
        return
    assert isinstance(chain, Chain)
    # a chain that loads is safe to inspect and check
    for check in (lambda: chain.validate(toolbox), chain.dependencies, chain.to_yaml,
                  chain.to_json):
        with contextlib.suppress(PlanError):
            check()


@SETTINGS
@given(data=any_value | plan_shaped | near_valid)
def test_from_dict_raises_only_plan_error(toolbox: Toolbox, data: Any) -> None:
    _only_plan_errors(toolbox, lambda: Chain.from_dict(data))


YAML_BITS = ["name: c\n", "steps:\n", "  - id: a\n", "    tool: split\n", "    args: {text: x}\n",
             "- ", ": ", "{", "}", "[", "]", "&a ", "*a", "!!binary ", "!!python/object ",
             "\t", "  ", "\n", '"', "'", "#", "? ", "---\n", "...\n", "%YAML 1.1\n", "1e999",
             "9" * 30, "{{ x }}", ",", "|\n", ">\n", '"\\U9999', "\\x", "\\"]
yamlish = st.lists(st.sampled_from(YAML_BITS) | st.text(max_size=5), max_size=25).map("".join)
JSON_BITS = ['{', '}', '[', ']', '"name"', '"steps"', '"c"', ':', ',', 'NaN', 'Infinity',
             '-', '1e999', 'true', 'null', '"id"', '"tool"', '"split"', '\\u0000', ' ', '\n']
jsonish = st.lists(st.sampled_from(JSON_BITS) | st.text(max_size=4), max_size=25).map("".join)


@SETTINGS
@given(text=st.text() | yamlish)
def test_from_yaml_raises_only_plan_error(toolbox: Toolbox, text: str) -> None:
    _only_plan_errors(toolbox, lambda: Chain.from_yaml(text))


@SETTINGS
@given(text=st.text() | jsonish)
def test_from_json_raises_only_plan_error(toolbox: Toolbox, text: str) -> None:
    _only_plan_errors(toolbox, lambda: Chain.from_json(text))


# ============================================================================ (c) valid plans

step_ids = st.from_regex(r"[A-Za-z0-9_-]{1,10}", fullmatch=True)
save_keys = st.from_regex(r"k_[A-Za-z0-9_-]{0,8}", fullmatch=True)
plain_text = st.text(max_size=30).filter(lambda s: "{{" not in s)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_leaf = st.none() | st.booleans() | st.integers() | finite | plain_text
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def text_arg(draw: st.DrawFn, earlier: list[tuple[str, str | None]]) -> str:
    """A literal string, or a template over earlier steps (steps.ID or a save_as key)."""
    if not earlier or draw(st.booleans()):
        return draw(plain_text)
    step_id, key = draw(st.sampled_from(earlier))
    ref = f"steps.{step_id}.output[0]" if key is None or draw(st.booleans()) else (
        draw(st.sampled_from([f"memory.{key}", key])) + "[0]"
    )
    if draw(st.booleans()):
        return "{{ " + ref + " }}"
    return draw(plain_text.filter(lambda s: "}" not in s and "{" not in s)) + "{{" + ref + "}}"


@st.composite
def args_for(draw: st.DrawFn, tool: str, earlier: list[tuple[str, str | None]]) -> dict[str, Any]:
    if tool == "split":
        return {"text": draw(text_arg(earlier))}
    if tool == "estimate":
        args: dict[str, Any] = {"tasks": draw(st.lists(text_arg(earlier), max_size=3))}
        if draw(st.booleans()):
            args["hours_per_task"] = draw(finite | st.integers(-5, 5))
        return args
    if tool == "create_records":
        rows = draw(st.lists(st.dictionaries(plain_text, json_value | text_arg(earlier),
                                             max_size=3), max_size=3))
        return {"table_id": draw(text_arg(earlier)), "rows": rows}
    return {"table_id": draw(text_arg(earlier)), "ids": draw(st.lists(st.integers(), max_size=4))}


def _condition(earlier: list[tuple[str, str | None]], pick: Any) -> str:
    step_id, key = earlier[pick]
    ref = f"steps.{step_id}.output" if key is None else key
    return f"({{{{ {ref} }}}} != null and context.flag) or not context.flag"


retry_policies = st.fixed_dictionaries(
    {},
    optional={
        "max_attempts": st.integers(1, 100),
        "backoff": st.sampled_from(["fixed", "exponential"]),
        "delay_s": st.floats(0, 3600),
        "max_delay_s": st.floats(0, 86400),
        "retry_on": st.lists(st.sampled_from(["invalid_input", "execution_failed", "timeout",
                                              "transient"]), unique=True),
    },
)


@st.composite
def valid_plans(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(step_ids, min_size=1, max_size=6, unique=True))
    keys = draw(st.lists(save_keys, min_size=len(ids), max_size=len(ids), unique=True))
    assert not set(keys) & RESERVED_KEYS
    steps = []
    earlier: list[tuple[str, str | None]] = []
    for i, step_id in enumerate(ids):
        tool = draw(st.sampled_from(["split", "estimate", "create_records", "delete_records"]))
        step: dict[str, Any] = {"id": step_id, "tool": tool, "args": draw(args_for(tool, earlier))}
        key = keys[i] if draw(st.booleans()) else None
        if key:
            step["save_as"] = key
        if earlier and draw(st.booleans()):
            step["depends_on"] = draw(st.lists(st.sampled_from([e for e, _ in earlier]),
                                               max_size=3))
        if earlier and draw(st.booleans()):
            step["when"] = _condition(earlier, draw(st.integers(0, len(earlier) - 1)))
        if draw(st.booleans()):
            step["retry"] = draw(retry_policies)
        if draw(st.booleans()):
            step["timeout_s"] = draw(st.floats(0, 86400, exclude_min=True))
        if draw(st.booleans()):
            step["confirm"] = draw(st.booleans())
        if draw(st.booleans()):
            step["description"] = draw(st.text(max_size=40))
        if tool == "create_records":
            step["rollback"] = draw(st.sampled_from([
                "none",
                {"tool": "delete_records",
                 "args": {"table_id": "{{ input.table_id }}", "ids": "{{ output.ids }}"}},
                {"tool": "delete_records", "args": {"table_id": "t", "ids": [1, 2]},
                 "retry": {"max_attempts": 5}, "timeout_s": 3},
            ]))
        steps.append(step)
        earlier.append((step_id, key))
    plan: dict[str, Any] = {
        "name": draw(st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True)),
        "steps": steps,
    }
    if draw(st.booleans()):
        plan["description"] = draw(st.text(max_size=60))
    if draw(st.booleans()):
        plan["options"] = {
            "max_concurrency": draw(st.integers(1, 64)),
            "mode": draw(st.sampled_from(["parallel", "sequential"])),
            "breakpoints": draw(st.lists(st.sampled_from(ids), max_size=2)),
            "pools": draw(st.dictionaries(st.sampled_from(["llm", "db"]), st.integers(1, 9))),
        }
    return plan


@HEAVY
@given(plan=valid_plans())
def test_valid_plans_validate_and_round_trip(toolbox: Toolbox, plan: dict[str, Any]) -> None:
    chain = Chain.from_dict(plan)
    assert chain.validate(toolbox, context={"flag": True}) is chain
    assert Chain.from_yaml(chain.to_yaml()) == chain
    assert Chain.from_json(chain.to_json()) == chain
    assert Chain.from_json(chain.to_json(indent=None)) == chain
    assert Chain.from_dict(chain.to_dict()) == chain
    assert Chain.from_dict(json.loads(json.dumps(plan))) == chain
    # dependencies only point backwards here (references only to earlier steps)
    position = {step_id: i for i, step_id in enumerate(chain.step_ids)}
    deps = chain.dependencies()
    assert list(deps) == chain.step_ids
    for step in chain.steps:
        assert set(step.depends_on) <= deps[step.id]
        assert all(position[d] < position[step.id] for d in deps[step.id])


@st.composite
def mutated_plan_text(draw: st.DrawFn) -> tuple[str, str]:
    """The YAML or JSON text of a valid plan with a few random edits."""
    fmt = draw(st.sampled_from(["yaml", "json"]))
    chain = Chain.from_dict(draw(valid_plans()))
    text = chain.to_yaml() if fmt == "yaml" else chain.to_json()
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["delete", "insert", "duplicate_line"]))
        if edit == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 8)):]
        elif edit == "insert":
            bits = YAML_BITS if fmt == "yaml" else JSON_BITS
            text = text[:pos] + draw(st.sampled_from(bits) | st.text(max_size=3)) + text[pos:]
        else:
            lines = text.splitlines(keepends=True)
            k = draw(st.integers(0, len(lines) - 1))
            text = "".join(lines[: k + 1] + lines[k:])
    return fmt, text


@HEAVY
@given(case=mutated_plan_text())
def test_mutated_plan_text_raises_only_plan_error(toolbox: Toolbox, case: tuple[str, str]) -> None:
    fmt, text = case
    _only_plan_errors(toolbox, lambda: Chain.from_yaml(text) if fmt == "yaml"
                      else Chain.from_json(text))


# ============================================================================ (d) cycles


@st.composite
def dag_with_back_edge(draw: st.DrawFn) -> tuple[list[str], set[tuple[str, str]], list[str]]:
    """Node names, edges (source, target) = target depends on source, and the kinds."""
    n = draw(st.integers(2, 8))
    names = draw(st.lists(st.sampled_from(list(string.ascii_lowercase)), min_size=n,
                          max_size=n, unique=True))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = set(draw(st.lists(st.sampled_from(pairs), max_size=12)))
    i, j = draw(st.sampled_from(pairs))
    # make sure names[j] is reachable from names[i], so the back edge closes a cycle
    if not draw(st.booleans()) or not _reachable(chosen, i, j):
        chosen |= {(k, k + 1) for k in range(i, j)} if draw(st.booleans()) else {(i, j)}
    edges = {(names[a], names[b]) for a, b in chosen} | {(names[j], names[i])}
    assume(_reachable(chosen, i, j))
    return names, edges, draw(st.lists(st.sampled_from(["explicit", "data", "key", "when"]),
                                       min_size=len(edges), max_size=len(edges)))


def _reachable(edges: set[tuple[int, int]], src: int, dst: int) -> bool:
    seen, todo = {src}, [src]
    while todo:
        node = todo.pop()
        for a, b in edges:
            if a == node and b not in seen:
                seen.add(b)
                todo.append(b)
    return dst in seen


@SETTINGS
@given(graph=dag_with_back_edge())
def test_a_back_edge_is_exactly_one_cycle(
    toolbox: Toolbox, graph: tuple[list[str], set[tuple[str, str]], list[str]]
) -> None:
    names, edges, kinds = graph
    steps: dict[str, dict[str, Any]] = {
        name: {"id": name, "tool": "split", "save_as": f"k_{name}", "depends_on": [],
               "args": {"text": "x"}} for name in names
    }
    for (source, target), kind in zip(sorted(edges), kinds, strict=True):
        step = steps[target]
        if kind == "explicit":
            step["depends_on"].append(source)
        elif kind == "data":
            step["args"]["text"] += f" {{{{ steps.{source}.output[0] }}}}"
        elif kind == "key":
            step["args"]["text"] += f" {{{{ k_{source}[0] }}}}"
        else:
            cond = f"k_{source} != null"
            step["when"] = f"{step['when']} and {cond}" if "when" in step else cond
    chain = Chain.from_dict({"name": "g", "steps": list(steps.values())})
    try:
        chain.validate(toolbox)
    except CycleError as err:
        assert err.codes == ["cycle"]
        cycle = err.cycle
        assert cycle[0] == cycle[-1]
        assert len(cycle) >= 3
        assert len(set(cycle[:-1])) == len(cycle) - 1
        for source, target in itertools.pairwise(cycle):
            assert (source, target) in edges  # source feeds target
        assert " -> ".join(cycle) in str(err)
        assert err.problems[0].step_id == cycle[0]
    else:
        raise AssertionError("a cycle was not reported")
    # the same graph minus the back edge is valid (and dependencies() still works with one)
    assert set(chain.dependencies()) == set(names)
