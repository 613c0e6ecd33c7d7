"""The chain designer through its Python API and its widgets (``button.click()``, setting a
widget's value: what a person's click or typing does)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from chainlab import Chain, Toolbox
from chainlab.errors import PlanError, Problem
from chainlab.jupyter import ChainDesigner, RunWidget
from chainlab.jupyter.designer import DesignerError, Reference
from chainlab.jupyter.designer.draft import UNSET
from chainlab.runtime import RunStatus

from .conftest import Harness

pytestmark = pytest.mark.anyio


class Summary(BaseModel):
    text: str
    count: int


def make_toolbox() -> Toolbox:
    tb = Toolbox("design")

    @tb.tool
    def fetch(n: int, source: str = "db") -> list[int]:
        """Fetch n items.

        The second line is not shown in the palette."""
        return list(range(n))

    @tb.tool
    def summarize(items: list[int], title: str = "sum") -> Summary:
        """Summarize items."""
        return Summary(text=f"{title}: {sum(items)}", count=len(items))

    @tb.tool(side_effects=True, idempotent=True, requires_confirmation=True)
    def publish(text: str, channel: str = "news", urgent: bool = False) -> str:
        """Publish a text."""
        return f"published {text}"

    return tb


@pytest.fixture
def tb() -> Toolbox:
    return make_toolbox()


@pytest.fixture
async def designer(tb: Toolbox) -> AsyncIterator[ChainDesigner]:
    d = ChainDesigner(tb, name="flow")
    yield d
    d.close()


def validated(d: ChainDesigner) -> list[Problem]:
    """What the plan layer says about the designer's YAML (the contract)."""
    try:
        Chain.from_yaml(d.yaml).validate(d.toolbox, context=d.context)
    except PlanError as exc:
        return exc.problems
    return []


TWO_STEPS = """\
name: flow
steps:
- id: fetch
  tool: fetch
  args:
    n: 3
- id: summarize
  tool: summarize
  args:
    items: '{{ steps.fetch.output }}'
"""


# ============================================================================ Python API
async def test_an_empty_designer_is_a_valid_empty_chain(designer: ChainDesigner) -> None:
    assert designer.yaml == "name: flow\n"
    assert designer.problems == []
    assert designer.chain == Chain(name="flow")
    assert repr(designer) == "ChainDesigner(chain 'flow', 0 steps, valid)"


async def test_add_step_then_fill_it_in(designer: ChainDesigner) -> None:
    first = designer.add_step("fetch")
    assert first == "fetch"
    assert designer.chain is None
    assert [(p.code, p.step_id, p.field, p.line) for p in designer.problems] == [
        ("invalid_args", "fetch", "args.n", 3)]
    assert designer.problems == validated(designer)
    designer.set_arg("fetch", "n", 3)
    second = designer.add_step("summarize", args={"items": "{{ steps.fetch.output }}"})
    assert second == "summarize"
    assert designer.yaml == TWO_STEPS
    assert designer.problems == []
    assert designer.chain is not None
    assert designer.chain.dependencies() == {"fetch": set(), "summarize": {"fetch"}}


async def test_ids_default_to_the_tool_name_made_unique(designer: ChainDesigner) -> None:
    assert [designer.add_step("fetch", args={"n": i}) for i in range(3)] == [
        "fetch", "fetch_2", "fetch_3"]
    assert designer.add_step("fetch", "mine", args={"n": 1}) == "mine"
    with pytest.raises(DesignerError, match="already has a step 'mine'"):
        designer.add_step("fetch", "mine")
    with pytest.raises(DesignerError, match="must be letters, digits"):
        designer.add_step("fetch", "has space")
    assert designer.step_ids == ["fetch", "fetch_2", "fetch_3", "mine"]


async def test_add_step_takes_every_field(designer: ChainDesigner) -> None:
    designer.add_step("fetch", "a", args={"n": 1}, save_as="numbers")
    designer.add_step("summarize", "b", args={"items": "{{ numbers }}"}, depends_on=["a"],
                      when="memory.numbers != []")
    assert designer.step("b") == {"id": "b", "tool": "summarize", "depends_on": ["a"],
                                  "args": {"items": "{{ numbers }}"},
                                  "when": "memory.numbers != []"}
    assert designer.problems == []


async def test_update_step_sets_and_resets_fields(designer: ChainDesigner) -> None:
    designer.add_step("fetch", "a", args={"n": 1})
    designer.update_step("a", timeout_s=5, retry={"max_attempts": 4, "backoff": "exponential"},
                         confirm=True, description="numbers", rollback="none")
    assert designer.step("a") == {
        "id": "a", "tool": "fetch", "description": "numbers", "args": {"n": 1},
        "retry": {"max_attempts": 4, "backoff": "exponential"}, "timeout_s": 5.0,
        "rollback": "none", "confirm": True}
    assert designer.yaml == designer.chain.to_yaml()
    designer.update_step("a", timeout_s=None, retry=None, confirm=None, description=None,
                         rollback=None)
    assert designer.step("a") == {"id": "a", "tool": "fetch", "args": {"n": 1}}
    designer.update_step("a", args={"n": 2, "source": "api"})
    assert designer.step("a")["args"] == {"n": 2, "source": "api"}
    with pytest.raises(DesignerError, match="no field 'save'; did you mean 'save_as'"):
        designer.update_step("a", save="x")
    with pytest.raises(DesignerError, match="no step 'b'"):
        designer.update_step("b", timeout_s=1)


async def test_update_step_with_id_renames(designer: ChainDesigner) -> None:
    designer.add_step("fetch", "a", args={"n": 1})
    designer.update_step("a", id="first", timeout_s=2)
    assert designer.step("first")["timeout_s"] == 2


async def test_a_wrong_literal_is_invalid_args_at_its_line(designer: ChainDesigner) -> None:
    designer.add_step("fetch", "a", args={"n": "three"})
    (p,) = designer.problems
    assert (p.code, p.step_id, p.field, p.line) == ("invalid_args", "a", "args.n", 6)
    assert designer.problems == validated(designer)


async def test_unset_arg(designer: ChainDesigner) -> None:
    designer.add_step("fetch", "a", args={"n": 1, "source": "api"})
    designer.unset_arg("a", "source")
    assert designer.step("a")["args"] == {"n": 1}
    designer.unset_arg("a", "n")
    assert "args" not in designer.step("a")
    assert [p.code for p in designer.problems] == ["invalid_args"]


async def test_remove_step_cleans_depends_on_and_keeps_references_as_problems(
        designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS + "- {id: c, tool: fetch, args: {n: 1}, depends_on: [fetch]}\n" \
                                "options: {breakpoints: [fetch]}\n"
    designer.remove_step("fetch")
    assert designer.step("c") == {"id": "c", "tool": "fetch", "args": {"n": 1}}
    assert "breakpoints" not in designer.yaml
    assert [(p.code, p.step_id, p.field) for p in designer.problems] == [
        ("unknown_reference", "summarize", "args.items")]
    assert designer.problems == validated(designer)
    with pytest.raises(DesignerError, match="no step 'fetch'"):
        designer.remove_step("fetch")


async def test_rename_updates_every_reference(designer: ChainDesigner) -> None:
    designer.yaml = """\
name: flow
options: {breakpoints: [a]}
steps:
- id: a
  tool: fetch
  args: {n: 1}
- id: a-b
  tool: fetch
  args: {n: 2}
- id: s
  tool: summarize
  depends_on: [a, a-b]
  args:
    items: "{{steps.a.output}}"
    title: "first {{ steps.a.output[0] }} / {{ steps['a'].output }} / {{ steps.a-b.output }}"
  when: "steps.a.output != [] and 'steps.a.output' != {{ steps.a.output }}"
  rollback:
    tool: publish
    args: {text: "undo {{ steps.a.output }} {{ output.text }}"}
"""
    assert designer.problems == []
    designer.rename_step("a", "numbers")
    s = designer.step("s")
    assert s["depends_on"] == ["numbers", "a-b"]
    assert s["args"] == {
        "items": "{{steps.numbers.output}}",
        "title": "first {{ steps.numbers.output[0] }} / {{ steps.numbers.output }} / "
                 "{{ steps.a-b.output }}"}
    assert s["when"] == ("steps.numbers.output != [] and 'steps.a.output' != "
                         "{{ steps.numbers.output }}")
    assert s["rollback"]["args"]["text"] == "undo {{ steps.numbers.output }} {{ output.text }}"
    assert designer.chain is not None
    assert designer.chain.options.breakpoints == ["numbers"]
    assert designer.chain.dependencies()["s"] == {"numbers", "a-b"}
    with pytest.raises(DesignerError, match="already has a step 'a-b'"):
        designer.rename_step("numbers", "a-b")


async def test_yaml_round_trip_is_exact(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    assert designer.yaml == TWO_STEPS
    assert designer.chain is not None and designer.chain.to_yaml() == TWO_STEPS
    # hand-written text is kept verbatim (comments, flow style) until the form edits it
    text = "# my chain\nname: flow\nsteps: [{id: a, tool: fetch, args: {n: 2}}]\n"
    designer.yaml = text
    assert designer.yaml == text
    designer.set_arg("a", "n", 4)
    assert designer.yaml == designer.chain.to_yaml()
    assert Chain.from_yaml(designer.yaml) == designer.chain


async def test_yaml_that_does_not_parse_is_a_problem_with_its_line(
        designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    valid = designer.chain
    designer.yaml = TWO_STEPS.replace("  args:\n    n: 3", "  args: {n: 3\n")
    assert designer.chain is None
    (p,) = designer.problems
    assert (p.code, p.line) == ("bad_syntax", 7)  # where the parser gave up
    with pytest.raises(PlanError) as err:
        Chain.from_yaml(designer.yaml)
    assert designer.problems == err.value.problems
    assert designer.last_valid == valid
    assert repr(designer) == "ChainDesigner(chain 'flow', 2 steps, does not load)"
    # the API edits the last draft that parsed (and rewrites the text from it)
    designer.set_arg("fetch", "n", 5)
    assert designer.problems == []
    assert designer.step("fetch")["args"] == {"n": 5}


async def test_a_draft_the_model_refuses_still_shows_its_steps(
        designer: ChainDesigner) -> None:
    designer.yaml = "name: flow\nsteps:\n- {id: bad id, tool: fetch, args: {n: 1}}\n"
    assert designer.step_ids == ["bad id"]
    assert [(p.code, p.field, p.line) for p in designer.problems] == [
        ("invalid_field", "id", 3)]
    designer.rename_step("bad id", "good")
    assert designer.problems == []


async def test_a_reference_to_a_step_declared_later(designer: ChainDesigner) -> None:
    # the plan contract derives order from the data: not a problem, an edge
    designer.yaml = """\
name: flow
steps:
- id: s
  tool: summarize
  args: {items: '{{ steps.f.output }}'}
- id: f
  tool: fetch
  args: {n: 1}
"""
    assert designer.problems == validated(designer) == []
    assert designer.chain.dependencies() == {"s": {"f"}, "f": set()}
    # ... and a reference to a step that does not exist is one
    designer.set_arg("s", "items", "{{ steps.g.output }}")
    assert [(p.code, p.step_id, p.field) for p in designer.problems] == [
        ("unknown_reference", "s", "args.items")]
    assert designer.problems == validated(designer)


async def test_a_cycle_through_depends_on(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    valid = designer.chain
    designer.update_step("fetch", depends_on=["summarize"])
    assert [p.code for p in designer.problems] == ["cycle"]
    assert "fetch -> summarize -> fetch" in designer.problems[0].message
    assert designer.problems == validated(designer)
    assert designer.chain is None and designer.last_valid == valid


async def test_a_tool_removed_from_the_toolbox(designer: ChainDesigner, tb: Toolbox) -> None:
    designer.yaml = TWO_STEPS
    smaller = make_toolbox()
    del smaller._tools["summarize"]
    designer.toolbox = smaller
    assert [(p.code, p.step_id) for p in designer.problems] == [
        ("unknown_tool", "summarize")]
    assert designer.problems == validated(designer)
    assert "summarize" not in designer.palette.buttons
    tb._tools.pop("fetch")  # a tool unregistered in place: revalidate() sees it
    designer.toolbox = tb
    designer.revalidate()
    assert [(p.code, p.step_id) for p in designer.problems] == [("unknown_tool", "fetch")]


async def test_context_keys_are_checked_and_offered(tb: Toolbox) -> None:
    d = ChainDesigner(tb, context={"size": 3})
    d.add_step("fetch", "a", args={"n": "{{ context.size }}"})
    d.add_step("fetch", "b", args={"n": "{{ context.count }}"})
    assert [(p.code, p.step_id) for p in d.problems] == [("unknown_reference", "b")]
    assert d.problems == validated(d)
    assert [r.source for r in d.references("a")][:2] == ["context.count", "context.size"]
    d.context = None  # not checked without a context
    assert d.problems == []


async def test_references_in_scope(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.update_step("summarize", save_as="summary")
    designer.add_step("publish", "post", args={"text": "{{ steps.summarize.output.text }}"})
    assert designer.references("post") == [
        Reference("steps.fetch.output", "steps.fetch.output · array of integer", "fetch"),
        Reference("steps.summarize.output", "steps.summarize.output · object", "summarize"),
        Reference("steps.summarize.output.text", "steps.summarize.output.text · string",
                  "summarize"),
        Reference("steps.summarize.output.count", "steps.summarize.output.count · integer",
                  "summarize"),
        Reference("memory.summary", "memory.summary (saved by summarize)", "summarize"),
    ]
    # a step never sees itself or what depends on it (that would be a cycle)
    assert designer.references("fetch") == []


async def test_on_change(designer: ChainDesigner) -> None:
    seen: list[tuple[int, bool]] = []
    stop = designer.on_change(lambda d: seen.append((len(d.step_ids), d.chain is not None)))
    designer.add_step("fetch")
    designer.set_arg("fetch", "n", 1)
    designer.yaml = "name: flow\nsteps: ["
    stop()
    designer.yaml = TWO_STEPS
    assert seen == [(1, False), (1, True), (1, False)]


async def test_a_failing_callback_is_shown_not_raised(designer: ChainDesigner) -> None:
    designer.on_change(lambda d: 1 / 0)
    designer.add_step("fetch")
    assert isinstance(designer.last_error, ZeroDivisionError)
    assert "on_change callback failed: ZeroDivisionError" in designer.message.value


async def test_editing_a_planned_chain_keeps_the_chain_object(tb: Toolbox) -> None:
    seed = Chain.from_yaml(TWO_STEPS)
    d = ChainDesigner(tb, seed)
    assert d.chain is seed and d.last_valid is seed
    d.set_arg("fetch", "n", 4)
    assert d.chain is not seed and d.chain.step("fetch").args == {"n": 4}


# ============================================================================ widget
def arg_row(d: ChainDesigner, name: str) -> Any:
    return d.form.rows[name]


async def test_the_palette_lists_every_tool(designer: ChainDesigner) -> None:
    p = designer.palette
    assert list(p.buttons) == ["fetch", "summarize", "publish"]
    info = p.items["publish"].children[1].value
    assert "publish(text: str, channel: str = &#x27;news&#x27;, urgent: bool = False) -&gt; str" \
        in info
    assert "Publish a text." in info
    assert ">side effects<" in info and ">idempotent<" in info
    assert ">needs confirmation<" in info
    fetch = p.items["fetch"].children[1].value
    assert ">read-only<" in fetch and "second line" not in fetch
    p.filter.value = "SUMM"
    assert p.shown == ["summarize"]
    p.filter.value = "text"
    assert p.shown == ["publish"]
    p.filter.value = ""
    assert p.shown == ["fetch", "summarize", "publish"]


async def test_palette_click_adds_and_selects_a_step(designer: ChainDesigner) -> None:
    designer.palette.buttons["fetch"].click()
    assert designer.step_ids == ["fetch"]
    assert designer.selected == "fetch"
    assert list(designer.form.rows) == ["n", "source"]
    row = arg_row(designer, "n")
    assert 'title="required">*</span>' in row.label.value
    assert row.literal.placeholder == "required"
    assert arg_row(designer, "source").literal.placeholder == 'default "db"'
    assert "missing required arg &#x27;n&#x27;" in row.problem.value
    assert "invalid_args" in designer.problems_html.value
    assert designer.run_button.disabled


async def test_form_literals_by_type(designer: ChainDesigner) -> None:
    designer.palette.buttons["publish"].click()
    urgent = arg_row(designer, "urgent").literal
    assert [v for _, v in urgent.options][1:] == ["true", "false"]
    urgent.value = "true"
    assert designer.step("publish")["args"] == {"urgent": True}
    arg_row(designer, "text").literal.value = "hello"
    arg_row(designer, "channel").literal.value = "ops"
    assert designer.step("publish")["args"] == {"urgent": True, "text": "hello",
                                                "channel": "ops"}
    designer.palette.buttons["fetch"].click()
    n = arg_row(designer, "n").literal
    n.value = "12"
    assert designer.step("fetch")["args"] == {"n": 12}
    n.value = "1x"  # stays text; validation says why it does not fit
    assert designer.step("fetch")["args"] == {"n": "1x"}
    assert [(p.code, p.field) for p in designer.problems] == [("invalid_args", "args.n")]
    assert "invalid_args" in arg_row(designer, "n").problem.value
    n.value = ""  # cleared: left out
    assert "args" not in designer.step("fetch")


async def test_pick_a_reference_and_back_to_a_literal(designer: ChainDesigner) -> None:
    designer.palette.buttons["fetch"].click()
    arg_row(designer, "n").literal.value = "3"
    designer.palette.buttons["summarize"].click()
    items = arg_row(designer, "items")
    assert [v for _, v in items.ref.options] == [
        "", "steps.fetch.output"]
    items.ref.value = "steps.fetch.output"
    assert designer.step("summarize")["args"] == {"items": "{{ steps.fetch.output }}"}
    assert items.literal.layout.display == "none"
    assert designer.problems == []
    assert not designer.run_button.disabled
    designer.flush()
    assert len(designer.dag.canvas.steps) == 2
    assert designer.dag.canvas.svg.count('class="edge"') == 1
    items.ref.value = ""
    assert "args" not in designer.step("summarize")
    assert items.literal.layout.display == ""


async def test_the_form_follows_yaml_and_api_edits(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.select("summarize")
    assert arg_row(designer, "items").ref.value == "steps.fetch.output"
    designer.yaml_area.value = TWO_STEPS.replace("'{{ steps.fetch.output }}'", "[1, 2]")
    designer.flush()  # the YAML tab waits for a pause in typing
    row = arg_row(designer, "items")
    assert (row.ref.value, row.literal.value) == ("", "[1, 2]")
    designer.update_step("summarize", save_as="s", when="true", depends_on=["fetch"])
    f = designer.form
    assert (f.save_as.value, f.when.value, f.depends.value) == ("s", "true", ("fetch",))


async def test_form_fields_edit_the_step(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.select("summarize")
    f = designer.form
    f.save_as.value = "summary"
    f.when.value = "steps.fetch.output != []"
    f.depends.value = ("fetch",)
    f.description.value = "adds up"
    f.timeout.value = "2.5"
    f.confirm.value = "false"
    f.attempts.value = "3"
    f.backoff.value = "exponential"
    f.rollback.value = "publish"
    f.rollback_args.value = '{"text": "undo"}'
    assert designer.step("summarize") == {
        "id": "summarize", "tool": "summarize", "description": "adds up",
        "depends_on": ["fetch"], "args": {"items": "{{ steps.fetch.output }}"},
        "save_as": "summary", "when": "steps.fetch.output != []",
        "retry": {"max_attempts": 3, "backoff": "exponential"}, "timeout_s": 2.5,
        "rollback": {"tool": "publish", "args": {"text": "undo"}}, "confirm": False}
    assert designer.problems == []
    f.tool_box.value = "fetch"  # another tool: the args it does not take go
    assert designer.step("summarize")["tool"] == "fetch"
    assert "args" not in designer.step("summarize")
    assert list(f.rows) == ["n", "source"]


async def test_rename_and_delete_from_the_form(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.select("fetch")
    designer.form.step_id_box.value = "numbers"
    assert designer.selected == "numbers"
    assert designer.step("summarize")["args"] == {"items": "{{ steps.numbers.output }}"}
    designer.form.step_id_box.value = "summarize"  # taken: refused, the box goes back
    assert designer.form.step_id_box.value == "numbers"
    assert "already has a step" in designer.form.error.value
    designer.form.remove.click()
    assert designer.step_ids == ["summarize"]
    assert designer.selected == "summarize"


async def test_clicking_a_node_selects_its_step(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.flush()
    assert designer.selected == "fetch"
    designer.dag.canvas.selected = "summarize"  # what the front end sets on a click
    assert designer.selected == "summarize"
    assert designer.form.step_id_box.value == "summarize"
    assert designer.step_picker.value == "summarize"
    designer.step_picker.value = "fetch"  # the keyboard way
    assert designer.selected == "fetch"
    designer.flush()
    assert designer.dag.canvas.selected == "fetch"
    assert f"#{designer.dag.element_ids['fetch']}{{--cl-f:#e3f1fb" in designer.dag.canvas.css


async def test_the_dag_is_laid_out_only_when_the_structure_changes(
        designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.flush()
    layouts, svg = designer.dag.layouts, designer.dag.canvas.svg
    designer.set_arg("fetch", "n", 7)  # a literal: restyle at most
    designer.update_step("fetch", timeout_s=3)
    designer.flush()
    assert (designer.dag.layouts, designer.dag.canvas.svg) == (layouts, svg)
    designer.set_arg("fetch", "n", "x")  # a problem: an outline, no layout
    designer.flush()
    assert designer.dag.layouts == layouts
    eid = designer.dag.element_ids["fetch"]
    assert f'#{eid}{{--cl-s:#d55e00;--cl-w:2.5px;--cl-d:5,2;--cl-c:"⚠ invalid_args"}}' \
        in designer.dag.canvas.css
    designer.add_step("publish", args={"text": "{{ steps.summarize.output.text }}"})
    designer.flush()
    assert designer.dag.layouts == layouts + 1
    assert len(designer.dag.canvas.steps) == 3


async def test_layout_waits_for_a_pause_while_a_loop_runs(designer: ChainDesigner) -> None:
    before = designer.dag.layouts
    designer.palette.buttons["fetch"].click()
    designer.palette.buttons["summarize"].click()
    assert designer.dag.layouts == before  # scheduled, not yet drawn
    designer.flush()
    assert designer.dag.layouts == before + 1


async def test_the_dag_keeps_the_last_drawing_while_the_yaml_is_broken(
        designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    designer.flush()
    svg = designer.dag.canvas.svg
    designer.yaml = "name: flow\nsteps: ["
    designer.flush()
    assert designer.dag.canvas.svg == svg
    assert "does not load" in designer.dag.note.value
    assert "bad_syntax" in designer.problems_html.value and "line 3" in \
        designer.problems_html.value


async def test_yaml_tab_and_form_stay_in_sync(designer: ChainDesigner) -> None:
    designer.palette.buttons["fetch"].click()
    arg_row(designer, "n").literal.value = "2"
    assert designer.yaml_area.value == designer.yaml == designer.chain.to_yaml()
    designer.yaml_area.value = designer.yaml.replace("n: 2", "n: 9")
    assert designer.step("fetch")["args"] == {"n": 2}  # typing: applied after a pause
    designer.flush()
    assert designer.step("fetch")["args"] == {"n": 9}
    assert arg_row(designer, "n").literal.value == "9"


async def test_header_name_and_context(designer: ChainDesigner) -> None:
    designer.name_box.value = "renamed"
    assert designer.chain.name == "renamed"
    designer.add_step("fetch", args={"n": "{{ context.size }}"})
    designer.context_box.value = '{"size": 2}'
    assert designer.context == {"size": 2}
    designer.context_box.value = "{nope"
    assert "context: not JSON" in designer.message.value
    assert designer.context == {"size": 2}


async def test_run_shows_the_run_widget_in_place(sh: Harness) -> None:
    d = ChainDesigner(make_toolbox(), name="flow", db=":memory:")
    d.yaml = TWO_STEPS
    d.run_button.click()
    run = d.last_run
    assert run is not None
    widget = d.run_area.children[1]
    assert isinstance(widget, RunWidget) and widget.run is run
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["summarize"] == {"text": "sum: 3", "count": 3}


async def test_run_clicked_in_a_subshell_thread_starts_on_the_kernels_loop(
        sh: Harness) -> None:
    """JupyterLab hands widget clicks to a comm subshell thread: Run must start the chain on
    the loop runs are driven on, not on that thread's own loop."""
    from .test_subshell_clicks import click_in_a_subshell

    d = ChainDesigner(make_toolbox(), name="flow", db=":memory:")
    d.yaml = TWO_STEPS
    click_in_a_subshell(d.run_button.click)
    with anyio.fail_after(10):
        while d.last_run is None and d.last_error is None:
            await anyio.sleep(0.01)
    assert d.last_error is None, d.last_error
    result = await d.last_run.wait()  # type: ignore[union-attr]
    assert result.status == RunStatus.SUCCEEDED


async def test_run_refuses_an_invalid_draft(designer: ChainDesigner) -> None:
    designer.add_step("fetch")
    with pytest.raises(PlanError) as err:
        designer.run()
    assert err.value.codes == ["invalid_args"]
    designer.run_button.disabled = False  # a stale click still says why
    designer.run_button.click()
    assert "could not start" in designer.message.value and designer.last_run is None


async def test_write_cell(designer: ChainDesigner) -> None:
    designer.yaml = TWO_STEPS
    assert designer.cell_text() == "%%chain flow\n" + TWO_STEPS
    sent: list[Any] = []
    designer.dag.canvas.send = sent.append  # type: ignore[method-assign]
    designer.write_button.click()
    assert sent == [{"type": "write_cell", "text": "%%chain flow\n" + TWO_STEPS,
                     "host": designer.model_id}]
    canvas = designer.dag.canvas
    canvas._handle_custom_msg({"type": "write_cell_done", "how": "inserted"}, [])
    assert "Inserted a <code>%%chain</code> cell" in designer.message.value
    canvas._handle_custom_msg({"type": "write_cell_done", "how": "clipboard"}, [])
    assert "copied to the clipboard" in designer.message.value


# ============================================================================ magics
@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[ChainDesigner]:
    """The designers the magics open."""
    from chainlab.jupyter.magics import design as module

    found: list[ChainDesigner] = []
    real = module.open_designer

    def spy(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        found.append(out[0])
        return out

    monkeypatch.setattr(module, "open_designer", spy)
    return found


async def test_chain_design_magic_binds_the_chain_while_valid(
        shop: Harness, opened: list[ChainDesigner]) -> None:
    await shop.ok("%chain design flow --tools tb")
    (shown,) = shop.displayed()
    assert shown == "ChainDesigner(chain 'flow', 0 steps, valid)"
    (d,) = opened
    d.add_step("fetch", args={"n": 2})
    assert shop.ns["flow"] == d.chain and shop.session.chains["flow"] is d.chain
    d.add_step("send", args={"items": "{{ steps.fetch.output }}"})
    bound = shop.ns["flow"]
    d.set_arg("fetch", "n", "x")  # invalid: the last valid chain stays bound
    assert shop.ns["flow"] is bound
    assert d.cell_text().startswith("%%chain flow --tools tb\nname: flow\n")
    run = await shop.ok("run = %chain run flow --tools tb --db runs.db\nrun")
    assert [s for s in run.steps] == ["fetch", "send"]


async def test_chain_design_magic_edits_an_existing_chain(shop: Harness) -> None:
    await shop.ok("%chain design shop --tools tb")
    (shown,) = shop.displayed()
    assert shown == "ChainDesigner(chain 'shop', 2 steps, valid)"
    msg = await shop.usage_error("%chain design 2x")
    assert "must be a Python identifier" in msg
    msg = await shop.usage_error("%chain design tb --tools tb")
    assert "'tb' is a Toolbox, not a chain" in msg


async def test_chain_plan_design(shop: Harness, opened: list[ChainDesigner]) -> None:
    await shop.ok('''from chainlab.planner import FallbackPlanner
planner = FallbackPlanner()
planner.add_template({"name": "hol", "steps": [
    {"id": "f", "tool": "fetch", "args": {"n": 2}},
    {"id": "s", "tool": "send", "args": {"items": "{{ steps.f.output }}"}}]},
    keywords=["holiday"])
''')
    await shop.ok('%chain plan "plan my holiday" --design --planner planner --tools tb')
    (shown,) = shop.displayed()
    assert shown == "ChainDesigner(chain 'hol', 2 steps, valid)"
    (d,) = opened
    assert d.chain is shop.ns["plan"]  # unchanged: still the planned object
    msg = await shop.usage_error('%chain plan "x" --planner planner')
    assert "--as NAME is required" in msg



async def test_for_each_is_offered_over_lists_and_item_is_a_reference(
        designer: ChainDesigner) -> None:
    """Issue 35 item 6: the form's "for each" lists the list-typed references first; once
    chosen, the step's args may refer to ``item`` (typed by the list's items) and
    ``index``, offered first in each argument's reference dropdown."""
    designer.palette.buttons["fetch"].click()
    arg_row(designer, "n").literal.value = "3"
    designer.palette.buttons["publish"].click()
    box = designer.form.for_each
    assert [v for _, v in box.options][:2] == [UNSET, "steps.fetch.output"]
    assert box.value == UNSET and "item" not in [v for _, v in arg_row(designer,
                                                                      "text").ref.options]
    box.value = "steps.fetch.output"
    assert designer.step("publish")["for_each"] == "{{ steps.fetch.output }}"
    text = arg_row(designer, "text")
    offered = [v for _, v in text.ref.options]
    assert offered[1:3] == ["item", "index"]  # (after "a value typed here")
    labels = dict((v, k) for k, v in text.ref.options)
    # typed by the list's items: an integer, which the text parameter does not take
    assert labels["item"] == "item · each item of steps.fetch.output · integer (not a string)"
    # an integer item into a string parameter is flagged; a literal text is fine
    text.ref.value = "item"
    assert [(p.code, p.field) for p in designer.problems] == [("reference_type", "args.text")]
    text.ref.value = ""
    text.literal.value = "hello"
    assert designer.problems == []
    box.value = UNSET
    assert "for_each" not in designer.step("publish")
