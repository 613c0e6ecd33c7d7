"""PlanReport and planning_events: exact payloads for each outcome; import boundaries."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from chainlab import PlannerError
from chainlab.planner import (
    FallbackPlanner,
    Planner,
    PlanReport,
    PlanRound,
    plan_and_start,
    plan_with_report,
    planning_events,
)

from .conftest import Project

pytestmark = pytest.mark.anyio

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "chainlab"


def _report(**kw: object) -> PlanReport:
    report = PlanReport(planner="openai", request="goal", model="m", base_url_host="h:1",
                        started_at=1.0, **kw)  # type: ignore[arg-type]
    return report


def test_events_when_the_model_answered() -> None:
    report = _report(rounds=[PlanRound(1, 0.5, [{"code": "cycle"}]), PlanRound(2, 0.25)],
                     answered_by="model", chain_name="c", steps=["a"], duration_s=0.75,
                     output_mode="json_object", negotiation=[
                         {"mode": "json_schema", "status": 500, "error": "no json_schema"}])
    assert planning_events(report) == [
        ("planning_started", {"planner": "openai", "model": "m", "base_url_host": "h:1",
                              "request": "goal", "started_at": 1.0}),
        ("planning_completed", {"planner": "openai", "answered_by": "model", "fallback": False,
                                "fallback_reason": None, "template": None, "rounds": 2,
                                "problems": [[{"code": "cycle"}], []],
                                "output_mode": "json_object", "negotiation": [
                                    {"mode": "json_schema", "status": 500,
                                     "error": "no json_schema"}], "adjustments": [],
                                "chain": "c", "steps": ["a"], "duration_s": 0.75}),
    ]
    json.dumps(report.to_dict())  # meta must be JSON


def test_events_when_the_fallback_answered_and_when_nothing_did() -> None:
    report = _report(rounds=[PlanRound(1, 0.1, error="HTTP 500: x", status=500)],
                     answered_by="fallback", fallback_reason="http_error",
                     fallback_error="HTTP 500: x", chain_name="c", steps=["a"])
    kinds = [k for k, _ in planning_events(report)]
    assert kinds == ["planning_started", "planning_failed", "planning_completed"]
    assert planning_events(report)[1][1] == {
        "planner": "openai", "stage": "model", "reason": "http_error", "error": "HTTP 500: x",
        "rounds": 1, "problems": [[]], "fallback": True, "output_mode": None}
    nothing = _report(fallback_reason="timeout", fallback_error="slow", error="no tools")
    events = planning_events(nothing)
    assert [k for k, _ in events] == ["planning_started", "planning_failed", "planning_failed"]
    assert events[-1][1]["error"] == "no tools" and events[-1][1]["stage"] == "planning"


def test_long_requests_are_cut_in_events_only() -> None:
    report = _report(answered_by="model")
    report.request = "x" * 5000
    assert len(planning_events(report)[0][1]["request"]) == 2003
    assert report.to_dict()["request"] == "x" * 5000


async def test_planner_failure_leaves_the_report_and_starts_nothing(project: Project) -> None:
    planner = FallbackPlanner()
    runtime = project.runtime()
    with pytest.raises(PlannerError, match="shares a word"):
        await plan_and_start(runtime, planner, "xyzzy")
    assert runtime.runs() == []
    assert planner.last_report is not None and planner.last_report.error is not None
    with pytest.raises(PlannerError, match="non-empty string"):
        await plan_and_start(runtime, planner, "  ")


async def test_third_party_planner_without_reports(project: Project) -> None:
    class Fixed:
        last_report = None

        async def plan(self, request, toolbox, context=None):  # type: ignore[no-untyped-def]
            from chainlab import Chain

            return Chain.from_dict({"name": "fixed", "description": "mine", "steps": [
                {"id": "d", "tool": "draft_plan", "args": {"goal": request}}]})

    assert isinstance(Fixed(), Planner) and isinstance(FallbackPlanner(), Planner)
    _, report = await plan_with_report(Fixed(), "go", project.toolbox)
    assert (report.planner, report.answered_by, report.steps) == ("Fixed", "model", ["d"])
    run = await plan_and_start(project.runtime(), Fixed(), "go")
    assert (await run.wait()).ok


def test_only_the_two_openai_modules_import_openai() -> None:
    importers = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 \
                else []
            if any(n == "openai" or n.startswith("openai.") for n in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert sorted(set(importers)) == ["agent/openai.py", "planner/openai.py"]


def test_importing_the_planner_package_does_not_load_openai() -> None:
    code = ("import sys, chainlab.planner as p; assert 'openai' not in sys.modules; "
            "p.FallbackPlanner; from chainlab.testing import openai_server; "
            "assert 'openai' not in sys.modules; p.OpenAIPlanner; "
            "assert 'openai' in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
