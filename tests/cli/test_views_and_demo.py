"""Read-only commands (runs, show, timeline, render, validate), planning, and the demo."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .helpers import TOOLS, chainlab, write

SVG = "{http://www.w3.org/2000/svg}svg"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A demo run, suspended at its confirmation, then approved in another process."""
    cwd = tmp_path_factory.mktemp("demo")
    r = chainlab("demo", cwd=cwd)
    assert r.code == 3, r.out + r.err
    run_id = r.run_id()
    assert f"chainlab approve {run_id} publish" in r.out
    assert "publish waits for confirmation" in r.out
    assert not (cwd / ".chainlab" / "outbox").exists()
    approved = chainlab("approve", run_id, "publish", cwd=cwd)
    assert approved.code == 0, approved.err
    return cwd, run_id


def test_demo_publishes_after_approval_and_rolls_back(demo_dir: tuple[Path, str]) -> None:
    cwd, run_id = demo_dir
    [report] = (cwd / ".chainlab" / "outbox").glob("report-*.json")
    assert json.loads(report.read_text())["run_id"] == run_id
    shown = chainlab("show", run_id, "--json", cwd=cwd).json
    assert shown["status"] == "succeeded"
    assert shown["outputs"]["summary"]["total"] == 3717.49


def test_timeline_table_and_csv(demo_dir: tuple[Path, str]) -> None:
    cwd, run_id = demo_dir
    out = cwd / "attempts.csv"
    r = chainlab("timeline", run_id, "--csv", str(out), cwd=cwd)
    assert r.code == 0
    assert "7 attempts" in r.out and "fetch_rate" in r.out and "transient" in r.out
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(x["step_id"], x["attempt"]) for x in rows if x["step_id"] == "rate"] == [
        ("rate", "1"), ("rate", "2")]
    first, second = (x for x in rows if x["step_id"] == "rate")
    assert (first["status"], first["error_kind"], first["retry_delay_s"]) == (
        "failed", "transient", "0.2")
    assert "rate service busy" in first["error"]
    assert second["status"] == "succeeded" and second["error"] == ""
    publish = next(x for x in rows if x["step_id"] == "publish")
    # approved in a second process: a later epoch, and a real idempotency key
    assert (publish["epoch"], publish["status"], publish["kind"]) == ("2", "succeeded", "call")
    assert len(publish["idempotency_key"]) == 32
    for x in rows:
        assert x["run_id"] == run_id and x["tool"]
        assert float(x["ended_at"]) >= float(x["started_at"])
        assert float(x["duration_s"]) >= 0 and float(x["offset_s"]) >= 0
    assert sorted(float(x["offset_s"]) for x in rows) == [float(x["offset_s"]) for x in rows]


def test_runs_lists_the_run(demo_dir: tuple[Path, str]) -> None:
    cwd, run_id = demo_dir
    r = chainlab("runs", cwd=cwd)
    assert r.code == 0 and run_id in r.out and "sales-report" in r.out
    [record] = chainlab("runs", "--json", cwd=cwd).json
    assert record["run_id"] == run_id and record["status"] == "succeeded"
    assert record["meta"]["tools"] == "chainlab.examples.report_tools:toolbox"


def test_show_prints_steps_statuses_and_attempts(demo_dir: tuple[Path, str]) -> None:
    cwd, run_id = demo_dir
    r = chainlab("show", run_id, cwd=cwd)
    assert r.code == 0
    lines = {line.split()[0]: line for line in r.out.splitlines() if line.strip()}
    assert "fetch_rate" in lines["rate"] and "succeeded" in lines["rate"]
    assert " 2 " in lines["rate"]  # two attempts
    assert "publish_report" in lines["publish"]
    assert f"run {run_id} (sales-report) succeeded" in r.out


def _svg(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == SVG
    return root


def test_render_a_run_and_a_chain(demo_dir: tuple[Path, str]) -> None:
    cwd, run_id = demo_dir
    r = chainlab("render", run_id, "-o", "run.svg", cwd=cwd)
    assert r.code == 0, r.err
    text = " ".join(_svg(cwd / "run.svg").itertext())
    for step_id in ("eu", "us", "apac", "rate", "summary", "publish"):
        assert step_id in text
    assert "succeeded" in text

    from chainlab.examples import SALES_REPORT

    r2 = chainlab("render", str(SALES_REPORT), "-o", "chain.svg", "--tools",
                  "chainlab.examples.report_tools:toolbox", cwd=cwd)
    assert r2.code == 0, r2.err
    assert "publish" in " ".join(_svg(cwd / "chain.svg").itertext())
    r3 = chainlab("render", str(SALES_REPORT), "-o", "chain.dot", cwd=cwd)
    assert r3.code == 0 and (cwd / "chain.dot").read_text().lstrip().startswith("digraph")


def test_demo_rollback_unpublishes(tmp_path: Path) -> None:
    r = chainlab("demo", "--approve", "--db", "runs/demo.db", "-q", cwd=tmp_path)
    assert r.code == 0, r.out + r.err
    run_id = r.run_id()
    assert f"chainlab rollback {run_id} --db runs/demo.db" in r.out
    assert len(list((tmp_path / "runs" / "outbox").glob("report-*.json"))) == 1
    rolled = chainlab("rollback", run_id, "--db", "runs/demo.db", cwd=tmp_path)
    assert rolled.code == 4
    assert list((tmp_path / "runs" / "outbox").glob("report-*.json")) == []


def test_validate(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yaml", """
name: good
steps:
  - {id: a, tool: add, args: {a: 1, b: 2}}
  - {id: b, tool: add, args: {a: "{{ steps.a.output }}", b: 1}}
""")
    r = chainlab("validate", str(good), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 0 and "is valid (2 steps)" in r.out and "b: add  (after a)" in r.out
    bad = write(tmp_path / "bad.yaml", """
name: bad
steps:
  - {id: a, tool: ad, args: {a: 1, b: 2}}
  - {id: b, tool: add, args: {a: "{{ steps.x.output }}", b: 1}, depends_on: [b]}
""")
    r2 = chainlab("validate", str(bad), "--tools", TOOLS, cwd=tmp_path)
    assert r2.code == 2
    assert "has 3 problems" in r2.err
    assert "[unknown_tool]" in r2.err and "did you mean 'add'" in r2.err
    assert "[self_dependency]" in r2.err and "[unknown_reference]" in r2.err


def test_validate_shows_and_checks_the_declared_inputs_and_output(tmp_path: Path) -> None:
    typed = write(tmp_path / "typed.yaml", """
name: typed
inputs:
  x: {type: integer, description: the first term}
  y: {type: integer, default: 1}
steps:
  - {id: a, tool: add, args: {a: "{{ context.x }}", b: "{{ context.y }}"}}
output: "{{ steps.a.output }}"
""")
    r = chainlab("validate", str(typed), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 0, r.err
    assert "inputs:\n  x: integer, required: the first term\n  y: integer, default 1" in r.out
    assert "a run needs --context with x" in r.out
    assert 'output: "{{ steps.a.output }}"' in r.out
    ok = chainlab("validate", str(typed), "--tools", TOOLS, "--context", '{"x": 2}',
                  cwd=tmp_path)
    assert ok.code == 0 and "a run needs" not in ok.out
    wrong = chainlab("validate", str(typed), "--tools", TOOLS, "--context", '{"x": "two"}',
                     cwd=tmp_path)
    assert wrong.code == 2
    assert "[invalid_input] context.x: the value is 'two' (string), but it is declared as " \
           "integer" in wrong.err
    undeclared = write(tmp_path / "undeclared.yaml", """
name: undeclared
inputs: {x: {type: integer}}
steps:
  - {id: a, tool: add, args: {a: "{{ context.x }}", b: "{{ context.z }}"}}
""")
    r2 = chainlab("validate", str(undeclared), "--tools", TOOLS, cwd=tmp_path)
    assert r2.code == 2 and "[undeclared_input]" in r2.err and "'z' is not a declared" in r2.err


def test_run_prints_the_declared_output_and_json_carries_it(tmp_path: Path) -> None:
    typed = write(tmp_path / "typed.yaml", """
name: typed
inputs:
  x: {type: integer}
  y: {type: integer, default: 1}
steps:
  - {id: a, tool: add, args: {a: "{{ context.x }}", b: "{{ context.y }}"}}
output: {sum: "{{ steps.a.output }}", x: "{{ context.x }}"}
""")
    r = chainlab("run", str(typed), "--tools", TOOLS, "--context", '{"x": 2}', cwd=tmp_path)
    assert r.code == 0, r.err
    assert 'output: {"sum": 3, "x": 2}' in r.out
    shown = chainlab("show", r.run_id(), "--json", cwd=tmp_path).json
    assert shown["output"] == {"sum": 3, "x": 2}
    missing = chainlab("run", str(typed), "--tools", TOOLS, cwd=tmp_path)
    assert missing.code == 2 and "[missing_input]" in missing.err


def test_plan_with_the_fallback_planner(tmp_path: Path) -> None:
    r = chainlab("plan", "add two numbers", "--tools", TOOLS, "-o", "planned.yaml",
                 cwd=tmp_path)
    assert r.code == 0, r.err
    assert "fallback planner" in r.err
    assert chainlab("validate", "planned.yaml", "--tools", TOOLS, cwd=tmp_path).code == 0
    printed = chainlab("plan", "add two numbers", "--tools", TOOLS, cwd=tmp_path)
    assert printed.code == 0 and printed.out == (tmp_path / "planned.yaml").read_text()


def test_plan_with_an_openai_compatible_model(tmp_path: Path) -> None:
    from chainlab.testing import FakeOpenAI

    bad = {"name": "sum", "steps": [{"id": "s", "tool": "ad", "args": {"a": 1, "b": 2}}]}
    good = {"name": "sum", "steps": [{"id": "s", "tool": "add", "args": {"a": 1, "b": 2}}]}
    with FakeOpenAI(script=[bad, good], model="fake-model") as server:
        r = chainlab("plan", "add one and two", "--tools", TOOLS, "-o", "sum.yaml",
                     cwd=tmp_path, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test",
                     OPENAI_MODEL="fake-model")
        assert r.code == 0, r.err
        assert "planned by fake-model at 127.0.0.1" in r.err and "in 2 rounds" in r.err
        assert len(server.requests) == 2  # the problem went back for repair
    ran = chainlab("run", "sum.yaml", "--tools", TOOLS, "--json", cwd=tmp_path)
    assert ran.code == 0 and ran.json["outputs"] == {"s": 3}


@pytest.mark.parametrize("answer,code,status", [("y\n", 0, "succeeded"),
                                                ("n\n", 3, "waiting_confirmation")])
def test_demo_asks_before_publishing(tmp_path: Path, answer: str, code: int,
                                     status: str) -> None:
    r = chainlab("demo", "--ask", "-q", cwd=tmp_path, stdin=answer)
    assert r.code == code, r.out + r.err
    assert "Approve it now" in r.err and '"total": 3717.49' in r.err
    shown = chainlab("show", r.run_id(), "--json", cwd=tmp_path).json
    assert shown["steps"]["publish"]["status"] == status
