"""FakeOpenAI: script items answered in order, every request recorded (stdlib client and the
real openai client)."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from chainlab import Chain
from chainlab.testing.openai_script import Delay, RecordedRequest, Reply, as_reply
from chainlab.testing.openai_server import FakeOpenAI, error_body

pytestmark = pytest.mark.anyio


def _post(server: FakeOpenAI, body: Any, path: str = "/chat/completions") -> tuple[int, Any]:
    req = urllib.request.Request(server.base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _content(body: dict[str, Any]) -> Any:
    return body["choices"][0]["message"]["content"]


def test_script_is_answered_in_order_and_recorded() -> None:
    chain = Chain.from_dict({"name": "c", "steps": [{"id": "a", "tool": "t"}]})
    with FakeOpenAI(script=[{"name": "x"}, "raw text", 503, chain]) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answers = [_post(server, body) for _ in range(5)]
        assert server.remaining == 0 and server.unexpected == 1
    assert answers[0][0] == 200 and json.loads(_content(answers[0][1])) == {"name": "x"}
    assert answers[1][0] == 200 and _content(answers[1][1]) == "raw text"
    assert answers[2][0] == 503 and answers[2][1]["error"]["type"] == "server_error"
    assert json.loads(_content(answers[3][1])) == {"name": "c", "steps": [{"id": "a",
                                                                           "tool": "t"}]}
    assert answers[4][0] == 500 and "script is used up" in answers[4][1]["error"]["message"]
    assert [r.body for r in server.completions] == [body] * 5
    assert server.completions[0].messages == body["messages"]
    assert server.completions[0].model == "m" and server.completions[0].text() == "hi"


def test_callable_items_see_the_request_and_models_are_listed() -> None:
    def echo(request: RecordedRequest) -> str:
        return request.messages[-1]["content"].upper()

    with FakeOpenAI(script=[echo], model="tiny") as server:
        status, body = _post(server, {"model": "m", "messages": [{"role": "user",
                                                                  "content": "abc"}]})
        assert (status, _content(body)) == (200, "ABC")
        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "tiny"
        assert _post(server, {}, "/embeddings")[0] == 404
        assert server.remaining == 0  # the 404 consumed nothing


def test_as_reply_normalises_items() -> None:
    assert as_reply(429) == Reply(status=429)
    assert as_reply(0.25).delay_s == 0.25 and as_reply(0.25).status == 504
    assert as_reply(Delay(1.0, "x")) == Reply(content="x", delay_s=1.0)
    assert as_reply(Delay(1.0)).status == 504
    with pytest.raises(TypeError, match="unsupported script item"):
        as_reply(object())
    with pytest.raises(TypeError):
        as_reply(True)


async def test_real_client_structured_request_and_refusal() -> None:
    with FakeOpenAI(script=["{}", Reply(refusal="no"), Reply(body={"bad": "shape"})]) as server:
        client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0,
                                    timeout=2)
        fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}
        first = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}],
            response_format=fmt)  # type: ignore[arg-type]
        assert first.choices[0].message.content == "{}"
        second = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
        assert second.choices[0].message.refusal == "no"
        assert second.choices[0].message.content is None
        await client.close()
    assert server.completions[0].response_format == fmt
    assert server.completions[1].response_format is None


def test_close_cuts_a_pending_delay_short() -> None:
    server = FakeOpenAI(script=[Delay(60.0, "late")]).start()
    done = threading.Event()

    def call() -> None:
        with contextlib.suppress(Exception):  # the connection is dropped on close
            _post(server, {"messages": []})
        done.set()

    threading.Thread(target=call, daemon=True).start()
    while not server.requests:  # the request arrived and is being delayed
        done.wait(0.01)
    server.close()
    assert done.wait(10), "the delayed request was not released by close()"
    with pytest.raises(RuntimeError, match="not running"):
        server.base_url  # noqa: B018


def test_add_extends_the_script() -> None:
    with FakeOpenAI() as server:
        server.add("one", "two")
        assert [_content(_post(server, {})[1]) for _ in range(2)] == ["one", "two"]


async def test_server_kinds_refuse_without_consuming_the_script() -> None:
    schema_fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}
    with FakeOpenAI(script=["{}", "{}"], like="llama-cpp-python") as server:
        client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0,
                                    timeout=2)
        with pytest.raises(openai.InternalServerError) as refused:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}],
                response_format=schema_fmt)  # type: ignore[arg-type]
        message = refused.value.body["message"]
        assert message.startswith("1 validation error:\n  {'type': 'literal_error', 'loc': "
                                  "('body', 'response_format', 'type')")
        assert '\n  File "/opt/llm/venv/lib/python3.11/site-packages/llama_cpp/server/app.py' \
            in message
        taken = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_object", "schema": {}})  # type: ignore[arg-type]
        assert taken.choices[0].message.content == "{}"
        await client.close()
        assert (server.refused, server.remaining, len(server.completions)) == (1, 1, 2)


def test_a_plain_chat_server_refuses_formats_and_tools() -> None:
    with FakeOpenAI(script=["hello"], like="no-response-format") as server:
        text_fmt = {"messages": [], "response_format": {"type": "text"}}
        assert _post(server, text_fmt) == (400, error_body(
            400, "Unrecognized request argument supplied: response_format"))
        status, body = _post(server, {"messages": [], "tools": [{"type": "function"}]})
        assert status == 422 and body["detail"][0]["loc"] == ["body", "tools"]
        assert _content(_post(server, {"messages": []})[1]) == "hello"
        assert server.refused == 2 and server.remaining == 0


async def test_a_forced_function_is_answered_with_a_call() -> None:
    with FakeOpenAI(script=['{"name": "x"}']) as server:
        client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, max_retries=0,
                                    timeout=2)
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "submit", "parameters": {}}}],
            tool_choice={"type": "function", "function": {"name": "submit"}})
        await client.close()
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "submit"  # type: ignore[union-attr]
    assert call.function.arguments == '{"name": "x"}'  # type: ignore[union-attr]
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.choices[0].message.content is None


def test_unknown_server_kind_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown server kind 'vllm'; choose from \["):
        FakeOpenAI(like="vllm")
