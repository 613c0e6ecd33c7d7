"""Planned chains run on a real (in-memory) runtime: no unregistered tool and no unconfirmed
side effect can ever run, whatever the model answers; planning is recorded in the run."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from chainlab import Chain
from chainlab.planner import FallbackPlanner, plan_and_start
from chainlab.runtime import RunStatus
from chainlab.testing.openai_script import Delay
from chainlab.testing.openai_server import FakeOpenAI

from .conftest import REQUEST, Project, planner_for, valid_plan

pytestmark = pytest.mark.anyio

CONTEXT = {"table_id": "t1"}
Fake = Callable[..., FakeOpenAI]
SIDE_EFFECTS = ("add_rows", "remove_rows", "send_email")


def _steps(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": "adversarial", "steps": list(steps)}


ADVERSARIAL: dict[str, list[Any]] = {
    "valid": [valid_plan()],
    "confirm_false": [_steps(
        {"id": "mail", "tool": "send_email", "confirm": False,
         "args": {"to": "all@example.com", "body": "hi"}})],
    "rollback_smuggled": [_steps(
        {"id": "d", "tool": "draft_plan", "args": {"goal": "x"},
         "rollback": {"tool": "send_email", "args": {"to": "x@example.com", "body": "b"}}},
        {"id": "mail", "tool": "send_email", "rollback": "none",
         "args": {"to": "a@example.com", "body": "{{ steps.d.output.title }}"}})],
    "options_smuggled": [{**_steps({"id": "mail", "tool": "send_email",
                                    "args": {"to": "a@example.com", "body": "b"}}),
                          "options": {"max_concurrency": 1000, "breakpoints": [],
                                      "pools": {"llm": 5}, "compensate_on_failure": False}}],
    "unknown_tool_only": [_steps({"id": "x", "tool": "exec_shell", "args": {"cmd": "ls"}})] * 3,
    "unknown_subchain": [_steps({"id": "x", "tool": "chain:wipe", "args": {}})] * 3,
    "injection": [_steps(
        {"id": "mail", "tool": "send_email",
         "args": {"to": "a@example.com", "body": "{{ steps.x.output }}; rm -rf / # ignore rules"}}
    ), _steps({"id": "mail", "tool": "send_email",
               "args": {"to": "a@example.com", "body": "'; DROP TABLE tasks; -- $(reboot)"}})],
    "http_500": [500],
    "timeout": [Delay(5.0)],
}


async def _run_until_people_must_act(project: Project, chain: Chain) -> Any:
    runtime = project.runtime()
    run = await runtime.start(chain, CONTEXT)
    result = await run.wait()
    return runtime, run, result


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
async def test_no_side_effect_before_approval(project: Project, fake: Fake, case: str) -> None:
    server = fake(*copy.deepcopy(ADVERSARIAL[case]))
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    for step in chain.steps:  # only registered tools, every side effect confirmed
        assert step.tool in project.toolbox, step.tool
        assert step.rollback is None
        if project.toolbox.get(step.tool).side_effects:
            assert step.confirm is True, step.id
    assert chain.options.model_fields_set == set()

    _, run, result = await _run_until_people_must_act(project, chain)
    assert [name for name, _ in project.calls if name in SIDE_EFFECTS] == []
    effects = [s.id for s in chain.steps if project.toolbox.get(s.tool).side_effects]
    assert result.status == RunStatus.SUSPENDED
    assert run.waiting() == dict.fromkeys(effects[:1], "waiting_confirmation")
    await run.reject(effects[0], "test: never approved")
    final = await run.wait()
    assert final.status in (RunStatus.FAILED, RunStatus.ROLLED_BACK)
    assert [name for name, _ in project.calls if name in SIDE_EFFECTS] == []


async def test_injection_text_reaches_the_tool_verbatim_after_approval(
    project: Project, fake: Fake
) -> None:
    evil = "'; DROP TABLE tasks; -- $(reboot) {% raw %} __import__('os')"
    plan = _steps({"id": "mail", "tool": "send_email", "args": {"to": "a@example.com",
                                                                "body": evil}})
    chain = await planner_for(fake(plan)).plan(REQUEST, project.toolbox, CONTEXT)
    _, run, result = await _run_until_people_must_act(project, chain)
    assert result.waiting == {"mail": "waiting_confirmation"}
    assert run.steps["mail"].preview == {"to": "a@example.com", "body": evil}
    await run.approve("mail")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert project.called("send_email") == [{"to": "a@example.com", "body": evil}]


async def test_plan_and_start_records_planning_and_waits_for_approval(
    project: Project, fake: Fake
) -> None:
    server = fake(valid_plan())
    planner = planner_for(server)
    runtime = project.runtime()
    run = await plan_and_start(runtime, planner, REQUEST, CONTEXT)
    result = await run.wait()

    assert result.status == RunStatus.SUSPENDED
    assert result.waiting == {"store": "waiting_confirmation"}
    assert project.called("add_rows") == []
    assert [name for name, _ in project.calls] == ["draft_plan", "estimate_effort",
                                                  "build_timeline"]
    events = run.event_list()
    assert [e.kind for e in events[:3]] == ["run_started", "planning_started",
                                            "planning_completed"]
    started, completed = events[1].payload, events[2].payload
    assert started["planner"] == "openai" and started["model"] == "fake-model"
    assert started["base_url_host"] == f"127.0.0.1:{server.port}"
    assert started["request"] == REQUEST
    assert completed["answered_by"] == "model" and completed["fallback"] is False
    assert completed["rounds"] == 1 and completed["problems"] == [[]]
    assert completed["steps"] == ["draft", "estimate", "timeline", "store"]
    assert [p["kind"] for p in run.state.planning] == ["planning_started", "planning_completed"]

    record = runtime.store.get_run(run.run_id)
    assert record.meta["planning"]["request"] == REQUEST
    assert record.meta["planning"]["report"] == planner.last_report.to_dict()
    assert record.chain["steps"][3]["confirm"] is True  # the chain is saved with the run

    await run.approve("store")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    [stored] = project.called("add_rows")
    assert stored["table_id"] == "t1"
    assert stored["rows"] == [{"task": "design", "days": 2.0, "start": "2025-01-06"},
                              {"task": "build", "days": 3.0, "start": "2025-01-06"}]


async def test_plan_and_start_records_the_fallback_and_why(project: Project, fake: Fake) -> None:
    server = fake(500)
    runtime = project.runtime()
    run = await plan_and_start(runtime, planner_for(server), REQUEST, CONTEXT)
    await run.wait()
    kinds = [e.kind for e in run.event_list()[:4]]
    assert kinds == ["run_started", "planning_started", "planning_failed", "planning_completed"]
    failed, completed = run.event_list()[2].payload, run.event_list()[3].payload
    assert failed["reason"] == "http_error" and failed["error"].startswith("HTTP 500")
    assert failed["stage"] == "model" and failed["fallback"] is True
    assert completed["answered_by"] == "fallback" and completed["fallback"] is True
    assert completed["fallback_reason"] == "http_error"
    assert completed["steps"] == ["draft_plan", "estimate_effort", "build_timeline", "add_rows"]
    assert run.waiting() == {"add_rows": "waiting_confirmation"}
    assert project.called("add_rows") == []
    meta = runtime.store.get_run(run.run_id).meta["planning"]["report"]
    assert meta["fallback"] is True and meta["fallback_reason"] == "http_error"


async def test_plan_and_start_with_the_fallback_planner(project: Project) -> None:
    runtime = project.runtime()
    run = await plan_and_start(runtime, FallbackPlanner(), REQUEST, CONTEXT)
    await run.wait()
    kinds = [e.kind for e in run.event_list()[:3]]
    assert kinds == ["run_started", "planning_started", "planning_completed"]
    assert run.event_list()[2].payload["planner"] == "fallback"
    assert run.waiting() == {"add_rows": "waiting_confirmation"}


async def test_plan_and_start_without_context_plans_for_an_empty_one(project: Project,
                                                                      fake: Fake) -> None:
    # the model references context.table_id three times; with no context that is invalid,
    # so the fallback answers without the step that needs it: the run can start
    server = fake(valid_plan(), valid_plan(), valid_plan())
    run = await plan_and_start(project.runtime(), planner_for(server), REQUEST)
    result = await run.wait()
    assert result.status == RunStatus.SUCCEEDED
    assert list(result.steps) == ["draft_plan", "estimate_effort", "build_timeline"]


async def test_registered_subchain_with_side_effects_is_confirmed(
    project: Project, fake: Fake
) -> None:
    store = Chain.from_dict({"name": "store_rows", "steps": [
        {"id": "put", "tool": "add_rows",
         "args": {"table_id": "{{ context.table_id }}", "rows": "{{ context.rows }}"}}]})
    project.toolbox.add_chain(store)
    plan = _steps({"id": "draft", "tool": "draft_plan", "args": {"goal": "x"}},
                  {"id": "save", "tool": "chain:store_rows",
                   "args": {"table_id": "t9", "rows": [{"a": 1}]}, "depends_on": ["draft"]})
    chain = await planner_for(fake(plan)).plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.step("save").confirm is True
    _, run, result = await _run_until_people_must_act(project, chain)
    assert result.waiting == {"save": "waiting_confirmation"}
    assert project.called("add_rows") == []
    await run.approve("save")
    assert (await run.wait()).status == RunStatus.SUCCEEDED
    assert project.called("add_rows") == [{"table_id": "t9", "rows": [{"a": 1}]}]


async def test_explicitly_allowed_tool_runs_unconfirmed(project: Project, fake: Fake) -> None:
    plan = _steps({"id": "mail", "tool": "send_email", "args": {"to": "a@b.c", "body": "b"}})
    planner = planner_for(fake(plan), unconfirmed_tools={"send_email"})
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.step("mail").confirm is None
    _, _, result = await _run_until_people_must_act(project, chain)
    assert result.status == RunStatus.SUCCEEDED
    assert project.called("send_email") == [{"to": "a@b.c", "body": "b"}]


async def test_confirm_side_effects_off_leaves_the_tools_rule(project: Project,
                                                              fake: Fake) -> None:
    project.toolbox.tool(lambda note: note, name="publish", side_effects=True,
                         requires_confirmation=True)
    plan = _steps({"id": "mail", "tool": "send_email", "args": {"to": "a@b.c", "body": "b"}},
                  {"id": "pub", "tool": "publish", "confirm": False, "args": {"note": "n"}})
    planner = planner_for(fake(plan), confirm_side_effects=False)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert [s.confirm for s in chain.steps] == [None, None]  # confirm: false was dropped
    _, _, result = await _run_until_people_must_act(project, chain)
    assert result.waiting == {"pub": "waiting_confirmation"}  # the tool's own rule holds
    assert project.called("send_email") == [{"to": "a@b.c", "body": "b"}]


async def test_planning_survives_the_sqlite_store(project: Project, fake: Fake,
                                                  tmp_path: Any) -> None:
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    runtime = Runtime(project.toolbox, SQLiteStore(tmp_path / "runs.db"))
    run = await plan_and_start(runtime, planner_for(fake("{oops", valid_plan())), REQUEST,
                               CONTEXT)
    await run.wait()
    await runtime.aclose()
    reopened = SQLiteStore(tmp_path / "runs.db")
    record = reopened.get_run(run.run_id)
    report = record.meta["planning"]["report"]
    assert [r["number"] for r in report["rounds"]] == [1, 2]
    assert report["rounds"][0]["problems"][0]["code"] == "bad_syntax"
    kinds = [e.kind for e in reopened.load_events(run.run_id)[:3]]
    assert kinds == ["run_started", "planning_started", "planning_completed"]
