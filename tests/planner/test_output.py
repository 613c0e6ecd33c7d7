"""chainlab.planner.output: the pure pieces of the negotiation (refusal rules, the plan's
text in an answer, error texts fit for a person)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chainlab.planner.output import (
    OutputMode,
    answer_text,
    first_json_object,
    one_line,
    plan_text,
    refuses,
    request_params,
    with_schema_prompt,
)

SCHEMA, OBJECT, TOOLS, TEXT = (OutputMode.JSON_SCHEMA, OutputMode.JSON_OBJECT, OutputMode.TOOLS,
                               OutputMode.TEXT)


@pytest.mark.parametrize("mode,status,message,expected", [
    # llama-cpp-python, older llama.cpp servers
    (SCHEMA, 500, 'response_format type must be one of "text" or "json_object", but got: '
             "json_schema", True),
    (SCHEMA, 400, "Unrecognized request argument supplied: response_format", True),
    (SCHEMA, 422, '{"detail": [{"loc": ["body", "response_format", "type"]}]}', True),
    (SCHEMA, 400, "structured outputs are not supported for this model", True),
    (OBJECT, 400, "json_object is not supported", True),
    (TOOLS, 400, "registry.ollama.ai/library/gemma:2b does not support tools", True),
    (TOOLS, 400, '"auto" tool choice requires --enable-auto-tool-choice', True),
    (TOOLS, 422, '{"detail": [{"loc": ["body", "tools"], "msg": "Extra inputs"}]}', True),
    # errors that are not about the mode: the request failed, do not negotiate
    (SCHEMA, 500, "CUDA out of memory", False),
    (SCHEMA, 503, "model is loading", False),
    (SCHEMA, 429, "rate limit on response_format requests", False),  # not now, not "not this"
    (SCHEMA, 401, "invalid api key for response_format", False),
    (OBJECT, 400, "the tools are broken", False),  # names another mode's field
    (TOOLS, 400, "response_format is not supported", False),
    (TEXT, 400, "response_format is not supported", False),  # nothing left to drop
    (SCHEMA, None, "response_format", False),
])
def test_refusal_rules(mode: OutputMode, status: int | None, message: str,
                       expected: bool) -> None:
    assert refuses(mode, status, message) is expected


def test_request_params_per_mode() -> None:
    schema = {"type": "object"}
    assert request_params(SCHEMA, schema, name="n", strict=True) == {"response_format": {
        "type": "json_schema", "json_schema": {
            "name": "n", "strict": True, "description": "a chainlab chain (plan) of tool calls",
            "schema": schema}}}
    assert request_params(OBJECT, schema, name="n", strict=False) == {
        "response_format": {"type": "json_object", "schema": schema}}
    tools = request_params(TOOLS, schema, name="n", strict=False)
    assert tools["tools"][0]["function"]["parameters"] is schema
    assert tools["tool_choice"] == {"type": "function", "function": {"name": "submit_plan"}}
    assert request_params(TEXT, schema, name="n", strict=False) == {}


def test_only_text_mode_puts_the_schema_into_the_prompt() -> None:
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "goal"}]
    assert with_schema_prompt(messages, SCHEMA, {"a": 1}) == messages
    sent = with_schema_prompt(messages, TEXT, {"a": 1})
    assert sent[0]["content"] == ('rules\nAnswer with the plan only: ONE JSON object, no prose, '
                                  'following this JSON Schema:\n{"a":1}')
    assert sent[1] == messages[1] and messages[0]["content"] == "rules"  # not mutated


def test_answer_text_reads_the_forced_call_or_the_content() -> None:
    call = SimpleNamespace(function=SimpleNamespace(arguments='{"name": "x"}'))
    assert answer_text(TOOLS, SimpleNamespace(tool_calls=[call], content=None)) == '{"name": "x"}'
    assert answer_text(TOOLS, SimpleNamespace(tool_calls=None, content="{}")) == "{}"
    assert answer_text(SCHEMA, SimpleNamespace(tool_calls=[call], content="{}")) == "{}"
    assert answer_text(SCHEMA, None) is None


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1}', '{"a": 1}'),
    ('```json\n{"a": 1}\n```', '{"a": 1}'),
    ('Here it is: {"a": {"b": "}"}} and {"c": 2}', '{"a": {"b": "}"}}'),
    ('Plan:\n```json\n{"a": [1, 2]}\n```\nDone {maybe}.', '{"a": [1, 2]}'),
    ('{broken {"a": 1}', '{broken {"a": 1}'),  # starts like JSON: left to the parser
    ("no json here", "no json here"),
    ('[{"a": 1}]', '{"a": 1}'),
])
def test_plan_text(text: str, expected: str) -> None:
    assert plan_text(text) == expected


def test_first_json_object_skips_what_does_not_parse() -> None:
    assert first_json_object('{ nope } {"ok": true}') == '{"ok": true}'
    assert first_json_object('{"open": ') is None


def test_one_line_keeps_the_message_and_drops_the_traceback_and_paths() -> None:
    traceback = ('Traceback (most recent call last):\n  File "/srv/app/server/errors.py", '
                 "line 173, in handler\n    response = await route(request)\n"
                 "               ^^^^^^^^^^^^^^\nValueError: bad format in /srv/app/x.py")
    assert one_line(traceback) == "ValueError: bad format in <path>"
    fastapi = ("1 validation error:\n  {'loc': ('body', 'response_format')}\n\n"
               '  File "/srv/app/server/app.py", line 376, in create\n'
               "    POST /v1/chat/completions\nmore after the frame")
    assert one_line(fastapi) == "1 validation error: {'loc': ('body', 'response_format')} " \
        "more after the frame"
    assert one_line("Error code: 500 - model\n  not   loaded") == "model not loaded"
    assert one_line("see C:\\Users\\me\\llm\\server.py now") == "see <path> now"
    url = "cannot reach http://127.0.0.1:8080/v1/chat/completions (refused)"
    assert one_line(url) == url  # a URL is not a file path of the server
    assert one_line("x" * 500, limit=20) == "x" * 17 + "..."
    assert one_line("   ") == "(no message)"
