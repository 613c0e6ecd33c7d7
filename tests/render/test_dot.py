"""DOT text: golden snapshots for a set of chains and run states, and the rules behind them."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from chainlab import Chain, Problem
from chainlab.events.status import StepStatus
from chainlab.render import STATUS_STYLE, chain_dot, element_id, run_dot
from chainlab.render.dot import draw_chain
from chainlab.render.ids import escape_id
from chainlab.render.style import (
    LONGEST_CAPTION,
    RESERVED_LINE,
    TIMES,
    status_line,
    step_kind,
)

from .conftest import ALL_STEP_IDS, check_golden, demo_chain, demo_toolbox
from .scenarios import Lab, chain_of, retry_chain, run_saga

LINEAR = chain_of({"id": "a", "tool": "t"}, {"id": "b", "tool": "t", "depends_on": ["a"]},
                  {"id": "c", "tool": "t", "depends_on": ["b"]}, name="linear")
BROKEN = Chain.from_dict({"name": "broken", "steps": [
    {"id": "a", "tool": "nope", "depends_on": ["ghost"]},
    {"id": "b", "tool": "fetch", "args": {"url": "{{ steps.c.output }}"}},
    {"id": "c", "tool": "fetch", "depends_on": ["b"], "args": {"url": "{{ oops"}},
]})
EVERY_STATUS = chain_of(*({"id": s.value, "tool": "t"} for s in StepStatus), name="statuses")

CHAIN_CASES: dict[str, Callable[[], str]] = {
    "linear_no_toolbox": lambda: chain_dot(LINEAR),
    "demo_kinds_and_subchains": lambda: chain_dot(demo_chain(), demo_toolbox()),
    "demo_lr_without_subchain_chains": lambda: chain_dot(demo_chain(), demo_toolbox(),
                                                         chains={}, rankdir="LR"),
    "broken_with_problems": lambda: chain_dot(BROKEN, demo_toolbox(),
                                              problems=BROKEN.problems(demo_toolbox())),
    "every_status": lambda: chain_dot(EVERY_STATUS, statuses={s: s for s in STATUS_STYLE},
                                      badges={"running": f"{TIMES}2", "in_doubt": "timeout"}),
    "demo_mid_run": lambda: chain_dot(
        demo_chain(), demo_toolbox(),
        {"fetch": "succeeded", "parse": "succeeded", "store": "in_doubt",
         "pay": "waiting_confirmation", "move": "retry_wait", "notify": "running",
         "notify/render": "succeeded", "notify/mail": "running"},
        badges={"fetch": f"{TIMES}3", "move": f"{TIMES}2"}),
    "demo_reserved_for_live_view": lambda: chain_dot(demo_chain(), demo_toolbox(),
                                                     reserve_status=True, scope="cl-dag-x"),
}


@pytest.mark.parametrize("name", sorted(CHAIN_CASES))
def test_chain_golden(name: str) -> None:
    check_golden(f"{name}.dot", CHAIN_CASES[name]())


@pytest.mark.anyio
async def test_run_golden_retries() -> None:
    lab = Lab()
    run = await lab.start(retry_chain())
    await run.wait()
    check_golden("run_retries.dot", run_dot(run))


@pytest.mark.anyio
async def test_run_golden_saga_in_doubt_and_compensations() -> None:
    lab = Lab()
    run = await run_saga(lab)
    assert str(run.status) == "rolled_back"
    check_golden("run_saga.dot", run_dot(run))


@pytest.mark.anyio
async def test_run_golden_suspended_with_subchain() -> None:
    lab = Lab()
    inner = chain_of({"id": "first", "tool": "work", "args": {"seconds": 1}},
                     {"id": "second", "tool": "pay", "depends_on": ["first"],
                      "args": {"amount": 7}}, name="inner")
    lab.toolbox.add_chain(inner)
    run = await lab.start(chain_of({"id": "pre", "tool": "work", "args": {"seconds": 1}},
                                   {"id": "sub", "tool": "chain:inner", "depends_on": ["pre"]},
                                   name="outer"))
    result = await run.wait()
    assert result.suspended and result.waiting == {"sub/second": "waiting_confirmation"}
    text = run_dot(run)
    check_golden("run_suspended_subchain.dot", text)
    assert 'subgraph "cluster_sub"' in text and "☐ awaiting approval" in text


# ---------------------------------------------------------------------- rules


def test_same_input_same_text_and_scope_follows_content() -> None:
    a = chain_dot(demo_chain(), demo_toolbox(), {"fetch": "running"})
    assert a == chain_dot(demo_chain(), demo_toolbox(), {"fetch": "running"})
    b = chain_dot(demo_chain(), demo_toolbox(), {"fetch": "succeeded"})
    scope_a = re.search(r'graph \[id="([^"]+)"', a)[1]  # type: ignore[index]
    scope_b = re.search(r'graph \[id="([^"]+)"', b)[1]  # type: ignore[index]
    assert scope_a != scope_b and scope_a.startswith("cl-")


def test_every_step_has_a_stable_element_id() -> None:
    drawing = draw_chain(demo_chain(), demo_toolbox(), scope="cl-dag-t")
    assert list(drawing.steps) == ALL_STEP_IDS
    for step_id, eid in drawing.steps.items():
        assert eid == element_id("cl-dag-t", step_id)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", eid), eid
        assert f'id="{eid}"' in drawing.dot
    assert len(set(drawing.steps.values())) == len(drawing.steps)


@pytest.mark.parametrize(("a", "b"), [("a_b", "a/b"), ("a__b", "a_/b"), ("x_2f_", "x/"),
                                      ("a-b", "a_b")])
def test_escape_id_is_injective(a: str, b: str) -> None:
    assert escape_id(a) != escape_id(b)
    assert escape_id("parent/child") == "parent_2f_child"


def test_edges_explicit_solid_data_dashed_and_labelled() -> None:
    text = chain_dot(demo_chain(), demo_toolbox())
    edges = {m[1] + "->" + m[2]: m[3] for m in re.finditer(
        r'^\s*"([^"]+)" -> "([^"]+)" \[(.*)\];$', text, re.M)}
    assert "style=dashed" in edges["fetch->parse"] and 'label="raw"' in edges["fetch->parse"]
    assert 'label="steps.parse.output"' in edges["parse->store"]
    assert "style" not in edges["store->pay"] and "label" not in edges["store->pay"]
    # an edge into a sub-chain ends at its cluster; out of it, starts at its cluster
    assert 'lhead="cluster_notify"' in edges["pay->notify/render"]
    assert 'ltail="cluster_notify"' in edges["notify/deep/hello->done"]


def test_kinds_by_tool_metadata() -> None:
    tb, chain = demo_toolbox(), demo_chain()
    kinds = {s.id: step_kind(s, tb) for s in chain.steps}
    assert kinds == {"fetch": ("plain", ""), "parse": ("plain", ""),
                     "store": ("idempotent", "⚡="), "pay": ("confirm", "☐⚡◇"),
                     "move": ("confirm", "☐?⚡"), "notify": ("subchain", "⇢"),
                     "done": ("plain", "")}
    assert step_kind(chain.step("store"), None) == ("plain", "")
    text = chain_dot(chain, tb)
    assert re.search(r'"pay" \[[^\n]*shape=octagon', text)
    assert re.search(r'"store" \[[^\n]*shape=box, style="filled"', text)
    assert re.search(r'"fetch" \[[^\n]*shape=box, style="rounded,filled"', text)


def test_subchain_without_its_chain_is_a_marked_node_and_recursion_stops() -> None:
    text = chain_dot(demo_chain(), demo_toolbox(), chains={})
    assert re.search(r'"notify" \[[^\n]*shape=folder[^\n]*label="notify\\n⇢ chain:notify"', text)
    loop = Chain.from_dict({"name": "loop", "steps": [{"id": "again", "tool": "chain:loop"}]})
    text = chain_dot(loop, chains={"loop": loop})
    assert "cluster" not in text and "shape=folder" in text


def test_problems_marked_on_their_steps_and_chain_problems_in_the_title() -> None:
    problems = [Problem("unknown_tool", "no tool 'nope'", "a", "tool"),
                Problem("cycle", "a -> b -> a", None), Problem("bad_template", "x", "a")]
    text = chain_dot(LINEAR, problems=problems)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith('"a" ['))
    assert "⚠ unknown_tool (+1)" in line and 'color="#d55e00"' in line
    assert "[unknown_tool] no tool 'nope'" in line  # tooltip
    assert "⚠ [cycle] a -> b -> a" in text.splitlines()[1]


def test_statuses_colour_and_label_every_step() -> None:
    text = chain_dot(EVERY_STATUS, statuses={s: s for s in STATUS_STYLE})
    for status, style in STATUS_STYLE.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f'"{status}" ['))
        assert f'fillcolor="{style.fill}"' in line and f'color="{style.stroke}"' in line
        assert f"\\n{style.caption}\"" in line
    missing = chain_dot(LINEAR, statuses={"a": "running"})
    assert "○ pending" in missing  # steps not in the mapping are pending


def test_unknown_status_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown step status 'done'.*succeeded"):
        chain_dot(LINEAR, statuses={"a": "done"})


def test_reserved_status_line_fits_every_status() -> None:
    text = chain_dot(LINEAR, reserve_status=True)
    assert all(len(status_line(s)) <= len(LONGEST_CAPTION) <= len(RESERVED_LINE)
               for s in STATUS_STYLE)
    # and the usual badged lines (issue 29: they were cut to "upstream…", "approv…")
    assert len(status_line("skipped", "upstream failed")) <= len(RESERVED_LINE)
    assert len(status_line("succeeded", "approved")) <= len(RESERVED_LINE)
    assert text.count(RESERVED_LINE) == 3


def test_text_is_escaped_for_dot() -> None:
    chain = Chain.from_dict({"name": "q", "steps": [
        {"id": "a", "tool": 't"x\\y', "description": 'say "hi" \\n not a newline'}]})
    text = chain_dot(chain)
    assert 't\\"x\\\\y' in text and 'say \\"hi\\" \\\\n not' in text


def test_long_names_are_clipped_in_labels_only() -> None:
    chain = chain_of({"id": "s" * 60, "tool": "t" * 80})
    text = chain_dot(chain)
    label = re.search(r'label="([^"]*)"', text.split("\n", 4)[4])[1]  # type: ignore[index]
    assert "…" in label and len(label) < 80
    assert "s" * 60 in text  # the node name and tooltip keep the full id


def test_no_legend_in_dot_text() -> None:
    assert "legend" not in chain_dot(demo_chain(), demo_toolbox(), {"fetch": "failed"})


def test_legend_kinds_include_markers_beyond_the_shape() -> None:
    only_pay = chain_of({"id": "p", "tool": "pay", "args": {"amount": 1}})
    assert draw_chain(only_pay, demo_toolbox()).kinds == {"confirm", "effect"}
    assert draw_chain(demo_chain(), demo_toolbox()).kinds == {
        "plain", "idempotent", "confirm", "effect", "conditional", "subchain"}
    assert draw_chain(LINEAR).edge_kinds == {"explicit"}
