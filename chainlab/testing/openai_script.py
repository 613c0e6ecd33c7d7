"""The script of :class:`~chainlab.testing.openai_server.FakeOpenAI`: the items a test
writes (what the server answers, one per chat completion) and the requests it reads back.

Each ``POST .../chat/completions`` consumes the next script item, in order:

==================  ==========================================================
script item         the server answers
==================  ==========================================================
``dict`` / Chain    200, the message content is the plan as JSON text
``str``             200, the message content is exactly this text
``int``             that HTTP status with an OpenAI-style error body
``float``           waits that many seconds, then 504 (the client has usually
                    timed out by then)
``Delay(s, item)``  waits ``s`` seconds, then answers ``item``
``Reply(...)``      full control: content, status, delay, refusal, raw body, tool
                    calls (:func:`tool_calls`), usage
``Call(...)``       200, an answer that asks for that one tool call
callable            ``fn(request: RecordedRequest) -> item`` (dynamic answers)
==================  ==========================================================

A request with ``stream: true`` is answered as a stream of chunks (server-sent events),
the text and each call's arguments in pieces, the usage in a last chunk when
``stream_options.include_usage`` asks for it.

:func:`as_reply` turns any item into the :class:`Reply` the server sends. Every request is
recorded as a :class:`RecordedRequest` (path, headers, parsed JSON body), so tests can
assert the repair prompt and the ``response_format``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chainlab.plan.schema import Chain

__all__ = ["Call", "Delay", "RecordedRequest", "Reply", "Responder", "as_reply", "stream_chunks",
           "tool_calls"]


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call in a scripted answer: the function's name and its ``arguments`` (a
    dict or list, sent as JSON text; a str, sent exactly as written, so a test can send
    arguments that are not JSON); ``call_id`` (default: ``call_N``, numbered by the
    server)."""

    function: str
    arguments: Any = None
    call_id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps({} if self.arguments is None else self.arguments)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer. ``content`` is the assistant message text; ``status`` != 200
    sends an error body instead (``error`` is its message); ``body`` replaces the whole JSON
    body; ``delay_s`` waits first."""

    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    refusal: str | None = None
    error: str | None = None
    body: dict[str, Any] | None = None
    tool_calls: tuple[Call, ...] = ()
    usage: dict[str, int] | None = None  # prompt_tokens / completion_tokens to report
    gap_s: float = 0.0


def tool_calls(*calls: Call, content: str | None = None,
               usage: dict[str, int] | None = None) -> Reply:
    """An answer that asks for ``calls`` (in this order: parallel tool calls), with an
    optional text beside them."""
    return Reply(content=content, tool_calls=tuple(calls), usage=usage)


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait ``seconds``, then answer ``then`` (None: 504)."""

    seconds: float
    then: Any = None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the server received (``headers`` keys are lower-case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None
    received_at: float = field(default_factory=time.time)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent (``[]`` when the body has none)."""
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.body.get("response_format") if isinstance(self.body, dict) else None

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The ``tools`` sent (None when the request has none)."""
        return self.body.get("tools") if isinstance(self.body, dict) else None

    @property
    def forced_function(self) -> str | None:
        """The function name ``tool_choice`` forces, if any."""
        choice = self.body.get("tool_choice") if isinstance(self.body, dict) else None
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return name if isinstance(name, str) else None
        return None

    @property
    def stream(self) -> bool:
        """The request asks for a streamed answer."""
        return isinstance(self.body, dict) and self.body.get("stream") is True

    def text(self) -> str:
        """All message contents joined (handy for ``assert "..." in request.text()``)."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


#: A dynamic script item: called with the request, returns a script item.
Responder = Callable[[RecordedRequest], Any]


def as_reply(item: Any) -> Reply:
    """Normalize a script item (see the module docstring). Raises TypeError."""
    if isinstance(item, Reply):
        return item
    if isinstance(item, Chain):
        return Reply(content=item.to_json(indent=None))
    if isinstance(item, dict):
        return Reply(content=json.dumps(item))
    if isinstance(item, str):
        return Reply(content=item)
    if isinstance(item, bool):
        raise TypeError("a script item may not be a bool")
    if isinstance(item, int):
        return Reply(status=item)
    if isinstance(item, float):
        return Reply(status=504, delay_s=item, error="fake server: delayed answer")
    if isinstance(item, Call):
        return Reply(tool_calls=(item,))
    if isinstance(item, Delay):
        then = as_reply(item.then) if item.then is not None else Reply(status=504)
        return Reply(then.content, then.status, item.seconds + then.delay_s, then.refusal,
                     then.error, then.body, then.tool_calls, then.usage)
    raise TypeError(f"unsupported script item {item!r}: use a plan dict, text, an HTTP "
                    "status, a delay in seconds, Delay, Reply, Call or a callable")


def stream_chunks(body: dict[str, Any], include_usage: bool, piece: int = 7
                  ) -> list[dict[str, Any]]:
    """A chat completion ``body`` as the chunks of a streamed answer: the role, the text
    in pieces of ``piece`` characters, each tool call (its id and name first, then its
    arguments in pieces), the finish reason, and the usage in a last chunk without choices
    when ``include_usage``."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
            "model": body["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                     "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": text[i:i + piece]}) for i in range(0, len(text), piece)]
    for index, call in enumerate(message.get("tool_calls") or ()):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        args = call["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": index, "function": {
            "arguments": args[i:i + piece]}}]}) for i in range(0, len(args), piece)]
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**base, "choices": [], "usage": body["usage"]})
    return out
