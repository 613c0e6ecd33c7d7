"""The structured-output negotiation against servers that take less than api.openai.com, over
real HTTP with the real ``openai`` client: which mode each kind of server ends up with, that a
refusal spends no repair round, that the mode is remembered, and that server errors reach the
report as one clean line and never the chain."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from chainlab.planner import plan_and_start
from chainlab.planner.output import OutputMode, forget_modes, remembered_mode
from chainlab.planner.policy import model_schema
from chainlab.testing.openai_script import Delay
from chainlab.testing.openai_server import FakeOpenAI, ServerKind, error_body

from .conftest import REQUEST, Project, planner_for, valid_plan

pytestmark = pytest.mark.anyio

CONTEXT = {"table_id": "t1"}
MODEL_STEPS = ["draft", "estimate", "timeline", "store"]
FALLBACK_STEPS = ["draft_plan", "estimate_effort", "build_timeline", "add_rows"]
Fake = Callable[..., FakeOpenAI]
# what llama-cpp-python 0.3's server says to json_schema, as one line: FastAPI's validation
# error without the frame under it (the server's file path and the route)
LLAMA_REFUSAL = ("1 validation error: {'type': 'literal_error', 'loc': ('body', "
                 "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                 "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
                 "'json_object'\"}}")


@pytest.fixture
def kind() -> Callable[..., FakeOpenAI]:
    servers: list[FakeOpenAI] = []

    def start(like: str | ServerKind, *script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script=script, like=like).start()
        servers.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


def assert_clean(text: str) -> None:
    """What a person may be shown of a server's error: one line, no traceback, no path."""
    assert "\n" not in text
    for leak in ("Traceback", 'File "', "/opt/llm", "site-packages", "app.py", "POST /v1"):
        assert leak not in text, f"{leak!r} leaked into {text!r}"


async def test_llama_cpp_python_server_gets_json_object_with_the_schema(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("llama-cpp-python", valid_plan())
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    assert chain.step_ids == MODEL_STEPS
    report = planner.last_report
    assert report is not None
    assert (report.answered_by, report.output_mode) == ("model", "json_object")
    assert len(report.rounds) == 1 and report.rounds[0].mode == "json_object"
    assert report.problems_per_round == [[]]  # the refusal spent no repair round
    [refusal] = report.negotiation
    assert (refusal["mode"], refusal["status"]) == ("json_schema", 500)
    assert refusal["error"] == LLAMA_REFUSAL
    assert_clean(refusal["error"])

    refused, answered = server.completions
    assert refused.response_format is not None
    assert refused.response_format["type"] == "json_schema"
    assert answered.response_format == {
        "type": "json_object", "schema": model_schema(project.toolbox, planner.policy)}
    assert answered.messages == refused.messages  # the same question, another format
    assert (server.refused, server.remaining) == (1, 0)


async def test_the_mode_is_remembered_per_endpoint_and_model(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("llama-cpp-python", valid_plan(), valid_plan(), valid_plan())
    await planner_for(server).plan(REQUEST, project.toolbox, CONTEXT)
    assert remembered_mode(server.base_url, "fake-model") is OutputMode.JSON_OBJECT

    again = planner_for(server)  # another planner object, same endpoint and model
    await again.plan(REQUEST, project.toolbox, CONTEXT)
    assert again.last_report is not None
    assert again.last_report.negotiation == []
    assert again.last_report.output_mode == "json_object"
    assert server.refused == 1 and len(server.completions) == 3

    other = planner_for(server)
    other.model = "other-model"  # another model on that server negotiates for itself
    await other.plan(REQUEST, project.toolbox, CONTEXT)
    assert other.last_report is not None
    assert [n["mode"] for n in other.last_report.negotiation] == ["json_schema"]
    assert server.refused == 2

    forget_modes()
    assert remembered_mode(server.base_url, "fake-model") is None


async def test_plain_chat_server_ends_in_text_mode_with_the_schema_in_the_prompt(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    prose = ("Sure! Here is the plan:\n```json\n" + json.dumps(valid_plan(), indent=2)
             + "\n```\nTell me if you want changes {or not}.")
    server = kind("no-response-format", prose)
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    assert chain.step_ids == MODEL_STEPS
    report = planner.last_report
    assert report is not None
    assert report.output_mode == "text" and len(report.rounds) == 1
    assert [(n["mode"], n["status"]) for n in report.negotiation] == [
        ("json_schema", 400), ("json_object", 400), ("tools", 422)]
    assert report.negotiation[0]["error"] == \
        "Unrecognized request argument supplied: response_format"
    assert "extra_forbidden" in report.negotiation[2]["error"]  # the 422 body, as one line

    *_, text_request = server.completions
    assert text_request.response_format is None and text_request.tools is None
    system = text_request.messages[0]["content"]
    schema = json.dumps(model_schema(project.toolbox, planner.policy), separators=(",", ":"))
    assert system.endswith("following this JSON Schema:\n" + schema)
    assert server.completions[0].messages[0]["content"] + "\nAnswer with the plan only" \
        in system  # the same rules, the schema appended


async def test_repair_rounds_stay_in_the_negotiated_mode(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    bad = {**valid_plan(), "steps": [{"id": "x", "tool": "drop_database", "args": {}}]}
    server = kind("no-response-format", json.dumps(bad), json.dumps(valid_plan()))
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    assert chain.step_ids == MODEL_STEPS
    report = planner.last_report
    assert report is not None
    assert [r.mode for r in report.rounds] == ["text", "text"]
    assert [[p["code"] for p in r] for r in report.problems_per_round] == [["unknown_tool"], []]
    assert server.refused == 3 and len(server.completions) == 5  # negotiated once
    repair = server.completions[-1]
    assert repair.response_format is None
    assert "[unknown_tool]" in repair.messages[-1]["content"]


async def test_a_server_with_tools_only_gets_a_forced_function_call(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    tools_only = ServerKind("tools-only", frozenset(), True,
                            lambda what: (400, error_body(400, f"{what} is not supported")))
    server = kind(tools_only, valid_plan())
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    assert chain.step_ids == MODEL_STEPS
    report = planner.last_report
    assert report is not None and report.output_mode == "tools"
    assert [n["mode"] for n in report.negotiation] == ["json_schema", "json_object"]
    call = server.completions[-1]
    assert call.response_format is None
    assert call.tools == [{"type": "function", "function": {
        "name": "submit_plan", "description": "Submit a chainlab chain (plan) of tool calls.",
        "parameters": model_schema(project.toolbox, planner.policy)}}]
    assert call.forced_function == "submit_plan"


async def test_an_error_that_names_no_mode_falls_back_at_once(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("openai", 500)
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.step_ids == FALLBACK_STEPS
    report = planner.last_report
    assert report is not None
    assert (report.fallback_reason, report.negotiation, report.output_mode) == \
        ("http_error", [], None)
    assert len(server.completions) == 1
    assert remembered_mode(server.base_url, "fake-model") is None  # nothing worked


async def test_a_timeout_after_a_refusal_still_falls_back(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("llama-cpp-python", Delay(5.0, valid_plan()))
    planner = planner_for(server)
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)
    assert chain.step_ids == FALLBACK_STEPS
    report = planner.last_report
    assert report is not None
    assert report.fallback_reason == "timeout"
    assert [n["mode"] for n in report.negotiation] == ["json_schema"]
    assert report.rounds[0].mode == "json_object"


async def test_refused_last_mode_falls_back_with_a_clean_error_and_a_clean_chain(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("llama-cpp-python", valid_plan())
    planner = planner_for(server, output_modes=["json_schema"])  # nothing to move on to
    chain = await planner.plan(REQUEST, project.toolbox, CONTEXT)

    assert chain.step_ids == FALLBACK_STEPS
    report = planner.last_report
    assert report is not None
    assert (report.fallback_reason, report.rounds[0].status) == ("http_error", 500)
    assert report.fallback_error == f"HTTP 500: {LLAMA_REFUSAL}"
    assert_clean(report.explanation.splitlines()[0])
    # the chain a person keeps says what it does, nothing about the server's failure
    for text in (chain.name, chain.description):
        for leak in ("HTTP", "500", "response_format", "validation error", "/opt/",
                     "http_error", "gave no usable plan"):
            assert leak not in text, f"{leak!r} in {text!r}"
    assert chain.description == report.explanation.split("\n", 1)[1]


async def test_the_run_records_the_mode_and_the_clean_error(
    project: Project, kind: Callable[..., FakeOpenAI]
) -> None:
    server = kind("llama-cpp-python", valid_plan())
    runtime = project.runtime()
    run = await plan_and_start(runtime, planner_for(server), REQUEST, CONTEXT)
    completed = [e.payload for e in run.event_list() if e.kind == "planning_completed"]
    assert [(p["output_mode"], [n["mode"] for n in p["negotiation"]]) for p in completed] \
        == [("json_object", ["json_schema"])]
    meta = runtime.store.get_run(run.run_id).meta["planning"]["report"]
    assert meta["output_mode"] == "json_object"
    assert meta["rounds"][0]["mode"] == "json_object"

    failing = kind("llama-cpp-python")
    run = await plan_and_start(runtime, planner_for(failing, output_modes=["json_schema"]),
                               REQUEST, CONTEXT)
    [failed] = [e.payload for e in run.event_list() if e.kind == "planning_failed"]
    assert failed["reason"] == "http_error" and failed["output_mode"] is None
    assert_clean(failed["error"])
    assert failed["error"] == f"HTTP 500: {LLAMA_REFUSAL}"
    assert "HTTP" not in run.chain.description
    assert "HTTP" not in runtime.store.get_run(run.run_id).chain["description"]


async def test_output_modes_are_checked(project: Project) -> None:
    from chainlab.planner.openai import OpenAIPlanner

    with pytest.raises(ValueError, match=r"unknown output mode 'xml'; choose from \['json_s"):
        OpenAIPlanner(model="m", output_modes=["xml"])
    with pytest.raises(ValueError, match="output_modes is empty"):
        OpenAIPlanner(model="m", output_modes=[])
    planner = OpenAIPlanner(model="m", output_modes=["text", "tools", "text"])
    assert planner.modes_to_try() == (OutputMode.TEXT, OutputMode.TOOLS)
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAIPlanner(model="m", max_tokens=0)


async def test_max_tokens_is_sent_when_set(project: Project, fake: Fake) -> None:
    server = fake(valid_plan(), valid_plan())
    await planner_for(server, max_tokens=512).plan(REQUEST, project.toolbox, CONTEXT)
    await planner_for(server).plan(REQUEST, project.toolbox, CONTEXT)
    first, second = server.completions
    assert first.body["max_tokens"] == 512 and "max_tokens" not in second.body
