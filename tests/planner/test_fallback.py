"""FallbackPlanner: deterministic composition from tool metadata, templates, explanations."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain, PlannerError, Toolbox
from chainlab.planner import FallbackPlanner, PlanPolicy

from .conftest import REQUEST, Project

pytestmark = pytest.mark.anyio

CONTEXT = {"table_id": "t1"}


async def test_default_composition_for_the_issue_example(project: Project) -> None:
    planner = FallbackPlanner()
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.name == "plan-approval-system-estimate"
    assert [(s.id, s.tool, s.args, s.depends_on, s.confirm) for s in chain.steps] == [
        ("draft_plan", "draft_plan", {"goal": REQUEST}, [], None),
        ("estimate_effort", "estimate_effort",
         {"tasks": "{{ steps.draft_plan.output.tasks }}"}, [], None),
        ("build_timeline", "build_timeline",
         {"estimates": "{{ steps.estimate_effort.output }}"}, [], None),
        ("add_rows", "add_rows", {"table_id": "{{ context.table_id }}",
                                  "rows": "{{ steps.build_timeline.output }}"}, [], True),
    ]
    assert chain.dependencies()["add_rows"] == {"build_timeline"}
    report = planner.last_report
    assert report is not None
    assert (report.planner, report.answered_by, report.fallback, report.template) == \
        ("fallback", "fallback", True, None)
    assert report.rounds == [] and report.fallback_reason is None
    assert chain.description == report.explanation
    lines = chain.description.splitlines()
    assert lines[0] == ("Fallback plan composed from the toolbox metadata for the request "
                        f"{REQUEST!r}.")
    assert lines[1] == ("Tools chosen because they share words with the request: draft_plan, "
                        "estimate_effort, build_timeline, add_rows.")
    assert lines[2] == ("Reads first (draft_plan, estimate_effort, build_timeline); "
                        "side-effecting steps last, after every read, one at a time (add_rows).")
    assert "add_rows.rows <- steps.build_timeline.output (same type: array)" in lines[3]
    assert lines[-1] == "Needs a person's approval before: add_rows."
    chain.validate(project.toolbox, context=CONTEXT)


async def test_composition_is_deterministic(project: Project) -> None:
    first = await FallbackPlanner().plan(REQUEST, project.toolbox, CONTEXT)
    second = await FallbackPlanner().plan(REQUEST, project.toolbox, CONTEXT)
    assert first == second


async def test_writes_come_last_and_one_at_a_time() -> None:
    tb = Toolbox("t")

    def send_email(to: str, body: str) -> str:
        """Send the report by email."""
        return "ok"

    def add_rows(table_id: str, rows: list[dict]) -> int:
        """Put the report rows into a table."""
        return 1

    def fetch_report(week: int) -> list[dict]:
        """Fetch the weekly report rows."""
        return []

    tb.tool(send_email, side_effects=True)
    tb.tool(add_rows, side_effects=True)
    tb.tool(fetch_report)
    chain = await FallbackPlanner().plan(
        "email the report, then put the report rows into a table, after you fetch it",
        tb, {"to": "a@b.c", "body": "weekly", "table_id": "t", "week": 3})
    assert chain.step_ids == ["fetch_report", "send_email", "add_rows"]
    assert [s.depends_on for s in chain.steps] == [[], ["fetch_report"], ["send_email"]]
    assert [s.args for s in chain.steps] == [
        {"week": "{{ context.week }}"},
        {"to": "{{ context.to }}", "body": "{{ context.body }}"},
        {"table_id": "{{ context.table_id }}", "rows": "{{ steps.fetch_report.output }}"},
    ]
    assert [s.confirm for s in chain.steps] == [None, True, True]


async def test_a_step_without_inputs_is_left_out_and_explained(project: Project) -> None:
    chain = await FallbackPlanner().plan(REQUEST, project.toolbox, {})
    assert chain.step_ids == ["draft_plan", "estimate_effort", "build_timeline"]
    assert ("Left out add_rows: nothing provides its required input 'table_id' (no earlier "
            "output fits, no context key).") in chain.description


async def test_undo_tools_are_never_composed(project: Project) -> None:
    chain = await FallbackPlanner().plan("remove rows from the table", project.toolbox,
                                         {"table_id": "t1", "rows": []})
    assert "remove_rows" not in chain.step_ids  # it is add_rows' compensation
    assert chain.step_ids == ["add_rows"]


async def test_nothing_matches_raises_with_the_known_tools(project: Project) -> None:
    planner = FallbackPlanner()
    with pytest.raises(PlannerError, match=r"no tool in toolbox 'project' shares a word with "
                       r"the request 'xyzzy'; known tools: draft_plan, estimate_effort"):
        await planner.plan("xyzzy", project.toolbox)
    assert planner.last_report is not None and planner.last_report.ok is False
    assert planner.last_report.error is not None
    with pytest.raises(PlannerError, match="the toolbox has no tools"):
        await planner.plan("anything", Toolbox("empty"))


def _approval(**extra: Any) -> dict[str, Any]:
    return {"name": "approval", "description": "Approval workflow.", "steps": [
        {"id": "draft", "tool": "draft_plan", "args": {"goal": "approvals"}},
        {"id": "store", "tool": "add_rows",
         "args": {"table_id": "{{ context.table_id }}", "rows": []}, **extra}]}


async def test_keyword_template_wins_and_is_confirmed(project: Project) -> None:
    planner = FallbackPlanner()
    planner.add_template(_approval(), keywords=["approval", "sign-off"])
    chain = await planner.plan("Plan an APPROVAL system", project.toolbox, CONTEXT)
    assert chain.name == "approval" and chain.step_ids == ["draft", "store"]
    assert chain.step("store").confirm is True
    assert chain.description == (
        "Approval workflow.\n\nFallback plan from template 'approval' (matched keywords "
        "['approval']).\nNeeds a person's approval before: store.")
    assert planner.last_report is not None and planner.last_report.template == "approval"


async def test_templates_are_ranked_by_score_then_order(project: Project) -> None:
    planner = FallbackPlanner()
    planner.add_template(_approval(), keywords=["approval"], name="one")
    planner.add_template(_approval(), keywords=["approval", "timeline"], name="two")
    planner.add_template(_approval(), keywords=["timeline"], name="three")
    assert [t.name for t, _ in planner.candidates(REQUEST)] == ["two", "one", "three"]
    assert [t.name for t, _ in planner.candidates("approvals please")] == ["one", "two"]
    assert planner.candidates("nothing here") == []


async def test_callable_template_and_match(project: Project) -> None:
    seen: list[tuple[str, Any]] = []

    def build(request: str, toolbox: Toolbox, context: Any) -> dict[str, Any]:
        seen.append((request, context))
        return {"name": "echo", "steps": [
            {"id": "draft", "tool": "draft_plan", "args": {"goal": request}}]}

    planner = FallbackPlanner()
    template = planner.add_template(build, match=lambda r: r.startswith("echo:"))
    assert template.name == "build"
    chain = await planner.plan("echo: hello", project.toolbox, CONTEXT)
    assert chain.step("draft").args == {"goal": "echo: hello"}
    assert seen == [("echo: hello", CONTEXT)]
    assert "its match function accepted it" in chain.description


async def test_broken_template_is_skipped_and_explained(project: Project) -> None:
    planner = FallbackPlanner()
    planner.add_template({"name": "bad", "steps": [{"id": "x", "tool": "nope"}]},
                         keywords=["approval"])

    def explode(request: str, toolbox: Toolbox, context: Any) -> Chain:
        raise RuntimeError("boom")

    planner.add_template(explode, keywords=["approval"])
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.step_ids[0] == "draft_plan"  # composed
    assert "Template 'bad' was skipped: [unknown_tool] step 'x', tool: unknown tool 'nope'" \
        in chain.description
    assert "Template 'explode' was skipped: its builder raised RuntimeError: boom." \
        in chain.description


async def test_without_composition_an_unmatched_request_fails(project: Project) -> None:
    planner = FallbackPlanner(compose=False)
    planner.add_template(_approval(), keywords=["approval"])
    with pytest.raises(PlannerError, match="no fallback template serves the request"):
        await planner.plan("estimate effort", project.toolbox, CONTEXT)


def test_add_template_needs_a_selector() -> None:
    with pytest.raises(ValueError, match="keywords="):
        FallbackPlanner().add_template(_approval())
    with pytest.raises(ValueError, match="a template is a Chain"):
        FallbackPlanner().add_template(42, keywords=["x"])  # type: ignore[arg-type]


async def test_yaml_template_and_policy_exemption(project: Project) -> None:
    planner = FallbackPlanner(policy=PlanPolicy(unconfirmed_tools=frozenset({"add_rows"})))
    planner.add_template(Chain.from_dict(_approval()).to_yaml(), keywords=["approval"])
    chain = await planner.plan("approval", project.toolbox, CONTEXT)
    assert chain.step("store").confirm is None
    assert "Needs a person's approval" not in chain.description


async def test_template_may_keep_user_rollbacks(project: Project) -> None:
    # templates are written by the user, not by a model: their rollback stays
    rb = {"tool": "remove_rows", "args": {"table_id": "{{ input.table_id }}"}}
    planner = FallbackPlanner()
    planner.add_template(_approval(rollback=rb), keywords=["approval"])
    chain = await planner.plan("approval", project.toolbox, CONTEXT)
    assert chain.step("store").rollback is not None
    assert chain.step("store").rollback.tool == "remove_rows"  # type: ignore[union-attr]
