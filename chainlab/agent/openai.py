"""``OpenAIClient``: asks an OpenAI-compatible chat endpoint for an agent's turns (the agent
layer's only module that imports ``openai``; loaded when an agent first asks).

One request per turn: the messages, the tools as functions, and, when the agent has an
``output_schema``, the schema in the mode the server takes (:mod:`chainlab.agent.modes`:
``json_schema``, then ``json_object``, then in the prompt; a refused mode is dropped at once
and the one that worked is remembered per endpoint and model, shared with the planner).
Streamed answers (``stream=True``) are put together from their chunks: text, tool calls
(their arguments arrive in pieces) and the usage of the last chunk; each piece is told to the
request's ``on_delta`` as it arrives (:meth:`~chainlab.agent.model.ModelRequest.tell`).

One ``openai.AsyncOpenAI`` is kept per endpoint and event loop (:func:`kept_client`): every
turn reuses its connection and its loaded CA store; a Runtime's ``aclose`` closes it
(:func:`close_clients`, through the toolbox's agents).

What went wrong is said once, here, naming the endpoint: a connection error, a timeout, HTTP
408/409/429 or 5xx is a :class:`~chainlab.errors.TransientError` (the step's retry policy
asks again); any other HTTP error (a server that does not take tool calls, a bad request)
and an answer without a choice are a :class:`~chainlab.errors.PermanentError`.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping
from typing import Any

from chainlab._json import clean_text
from chainlab.agent.endpoint import PLACEHOLDER_KEY, Endpoint
from chainlab.agent.model import (
    ModelCall,
    ModelRequest,
    ModelTurn,
    reported_usage,
    status_error,
)
from chainlab.agent.modes import (
    OutputMode,
    modes_from,
    one_line,
    refuses,
    remember_mode,
    remembered_mode,
    response_format,
    with_schema_prompt,
)
from chainlab.errors import MissingExtraError, PermanentError, TransientError

try:
    import openai
except ImportError as exc:  # pragma: no cover - the [llm] extra is installed in dev
    raise MissingExtraError("openai", "llm", "an agent step") from exc

__all__ = ["OpenAIClient", "close_clients", "error_text", "kept_client", "make_client"]

#: the modes an agent's output schema is asked in (a forced function would end the turn)
AGENT_MODES = (OutputMode.JSON_SCHEMA, OutputMode.JSON_OBJECT, OutputMode.TEXT)


def make_client(endpoint: Endpoint, **overrides: Any) -> openai.AsyncOpenAI:
    """A new ``openai.AsyncOpenAI`` for ``endpoint`` (the caller closes it); ``overrides``
    replace client options."""
    kwargs: dict[str, Any] = {"api_key": endpoint.api_key or PLACEHOLDER_KEY,
                              "timeout": endpoint.timeout, "max_retries": endpoint.max_retries}
    if endpoint.base_url:
        kwargs["base_url"] = endpoint.base_url
    kwargs.update(overrides)
    return openai.AsyncOpenAI(**kwargs)


#: the clients kept open: per event loop (an httpx connection pool belongs to the loop it was
#: opened on), per endpoint (its URL, key, timeout and retries); a loop that is gone takes its
#: clients with it
_KEPT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                 dict[tuple[Any, ...], openai.AsyncOpenAI]] = \
    weakref.WeakKeyDictionary()


def _key(endpoint: Endpoint) -> tuple[Any, ...]:
    return endpoint.base_url, endpoint.api_key, endpoint.timeout, endpoint.max_retries


def kept_client(endpoint: Endpoint) -> openai.AsyncOpenAI | None:
    """The ``openai.AsyncOpenAI`` kept for ``endpoint`` on the running asyncio loop (made on
    first use: the CA store is loaded and the connection opened once, then every turn
    reuses them), or None outside an asyncio loop (under trio: the caller makes one per
    request and closes it). :func:`close_clients` closes it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    clients = _KEPT.setdefault(loop, {})
    key = _key(endpoint)
    client = clients.get(key)
    if client is None or client.is_closed():
        client = clients[key] = make_client(endpoint)
    return client


async def close_clients(endpoint: Endpoint | None = None) -> int:
    """Close the clients kept on the running loop (only ``endpoint``'s when given); returns
    how many were closed. The next request opens a new one."""
    try:
        clients = _KEPT.get(asyncio.get_running_loop(), {})
    except RuntimeError:
        return 0
    keys = [key for key in clients if endpoint is None or key == _key(endpoint)]
    for key in keys:
        await clients.pop(key).close()
    return len(keys)


class OpenAIClient:
    """A :class:`~chainlab.agent.model.ModelClient` over the ``openai`` package."""

    def __init__(self, endpoint: Endpoint, *, stream: bool = False,
                 output_modes: Any = None):
        self.config = endpoint
        self.stream = stream
        self.output_modes = modes_from(output_modes, AGENT_MODES)

    @property
    def endpoint(self) -> str:
        return self.config.url

    def __repr__(self) -> str:
        return f"<OpenAIClient {self.config.model!r} at {self.config.host}>"

    async def complete(self, request: ModelRequest) -> ModelTurn:
        why = self.config.not_configured()
        if why is not None:
            raise PermanentError(f"the agent's model cannot be asked: {why}")
        kept = kept_client(self.config)
        client = kept or make_client(self.config)
        try:
            modes = list(self._modes()) if request.output_schema is not None else [None]
            while True:
                mode = modes[0]
                try:
                    return await self._ask(client, request, mode)
                except openai.APIStatusError as exc:
                    text = error_text(exc)
                    if mode is not None and len(modes) > 1 \
                            and refuses(mode, exc.status_code, text):
                        modes.pop(0)
                        continue
                    raise self._status_error(exc.status_code, text) from None
                except openai.APITimeoutError:
                    raise TransientError(f"model endpoint {self.endpoint}: no answer within "
                                         f"{self.config.timeout:g} s") from None
                except openai.APIConnectionError as exc:
                    raise TransientError(f"cannot reach the model endpoint {self.endpoint}: "
                                         f"{one_line(exc.__cause__ or exc)}") from None
                except openai.OpenAIError as exc:
                    raise PermanentError(f"model endpoint {self.endpoint}: "
                                         f"{type(exc).__name__}: {one_line(exc)}") from None
        finally:
            if kept is None:
                await client.close()

    async def aclose(self) -> None:
        """Close the client kept for this endpoint on the running loop (a Runtime's
        ``aclose`` calls it through its toolbox); the next turn opens one again."""
        await close_clients(self.config)

    def _modes(self) -> tuple[OutputMode, ...]:
        known = remembered_mode(self.endpoint, self.config.model or "")
        if known is not None and known in self.output_modes:
            return self.output_modes[self.output_modes.index(known):]
        return self.output_modes

    def _status_error(self, status: int, text: str) -> Exception:
        return status_error(status, f"model endpoint {self.endpoint} answered HTTP {status}: "
                                    f"{one_line(text)}")

    async def _ask(self, client: openai.AsyncOpenAI, request: ModelRequest,
                   mode: OutputMode | None) -> ModelTurn:
        params: dict[str, Any] = {"model": self.config.model}
        messages = request.messages
        if mode is not None and request.output_schema is not None:
            params.update(response_format(mode, request.output_schema, name="answer",
                                          strict=False, description="the final answer"))
            messages = with_schema_prompt(messages, mode, request.output_schema,
                                          "the final answer")
        if request.tools:
            params["tools"] = request.tools
            # said, not left to the default: OpenAI's default with tools is "auto", but a
            # server may read no tool_choice as "none" (llama-cpp-python's function-calling
            # chat formats then leave the tools out of the prompt: the model never sees them)
            params.setdefault("tool_choice", "auto")
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_tokens is not None:  # (a model that runs on is cut, not waited for)
            params["max_tokens"] = request.max_tokens
        if self.stream:
            turn = await _streamed(client, request, messages, params)
        else:
            completion = await client.chat.completions.create(
                messages=messages, **params)  # type: ignore[arg-type]
            turn = _turn(completion)
        if mode is not None:
            remember_mode(self.endpoint, self.config.model or "", mode)
        return turn


def _turn(completion: Any) -> ModelTurn:
    choices = getattr(completion, "choices", None) or []
    if not choices:
        raise PermanentError("the model's answer has no choices")
    message = choices[0].message
    refusal = getattr(message, "refusal", None)
    if refusal:
        raise PermanentError(f"the model refused: {one_line(refusal)}")
    calls = tuple(_call(str(c.id), str(c.function.name), _arguments(c.function.arguments))
                  for c in (message.tool_calls or ()))
    return ModelTurn(_text(message.content), calls, choices[0].finish_reason,
                     *_usage(completion.usage, completion.model))


async def _streamed(client: openai.AsyncOpenAI, request: ModelRequest, messages: Any,
                    params: dict[str, Any]) -> ModelTurn:
    """A streamed answer, put together: text pieces, tool calls by index (their arguments
    arrive in pieces), the finish reason and the last chunk's usage; each piece is told
    (:meth:`ModelRequest.tell`) as it arrives."""
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        messages=messages, stream=True, stream_options={"include_usage": True}, **params)
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = usage = model = None
    async for chunk in stream:
        model = chunk.model or model
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices or ():
            delta = choice.delta
            finish = choice.finish_reason or finish
            if getattr(delta, "refusal", None):
                raise PermanentError(f"the model refused: {one_line(delta.refusal)}")
            if delta.content:
                text.append(delta.content)
                request.tell(delta.content)
            for piece in delta.tool_calls or ():
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["name"] += piece.function.name or ""
                    call["arguments"] += piece.function.arguments or ""
                    request.tell(call_index=piece.index, function=piece.function.name,
                                 arguments=piece.function.arguments or "")
    return ModelTurn(_text("".join(text)) if text else None,
                     tuple(_call(c["id"], c["name"], c["arguments"])
                           for _, c in sorted(calls.items())),
                     finish, *_usage(usage, model))


def _text(value: Any) -> str | None:
    """A model's text as the log can keep it (what a server sends is kept as sent, a lone
    surrogate made U+FFFD: the value gate then judges what is parsed out of it)."""
    return clean_text(value) if isinstance(value, str) else None


def _call(call_id: str, function: str, arguments: str) -> ModelCall:
    return ModelCall(clean_text(call_id), clean_text(function), clean_text(arguments))


def _arguments(value: Any) -> str:
    """A call's arguments as text (a server that sends them as an object is answered the
    same as one that sends the JSON text)."""
    if isinstance(value, str):
        return value
    return json.dumps(value) if value is not None else ""


def _usage(usage: Any, model: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(the usage the server reported, None), or (None, why it cannot be taken)."""
    if usage is None:
        return None, None
    sent = {"prompt_tokens": getattr(usage, "prompt_tokens", None),
            "completion_tokens": getattr(usage, "completion_tokens", None)}
    return reported_usage(sent, sent["prompt_tokens"], sent["completion_tokens"], model)


def error_text(exc: openai.APIStatusError) -> str:
    """What the server said: the error body's ``message`` (OpenAI's shape), else the whole
    body as text, else the client's."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message.strip():
            return message
        return json.dumps(body, default=str)
    if isinstance(body, str) and body.strip():
        return body
    return exc.message
