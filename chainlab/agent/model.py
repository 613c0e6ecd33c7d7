"""What passes between an agent step and its model: the request of one model turn
(:class:`ModelRequest`), the model's answer (:class:`ModelTurn`, with the tool calls it asks
for, :class:`ModelCall`) and the one seam that asks (:class:`ModelClient`).

A turn is recorded in the run's log as plain JSON (:meth:`ModelTurn.to_dict`): a resume,
a takeover and a replay read it back from there and never ask the model again. A client
says how a request failed by raising :class:`~chainlab.errors.TransientError` (the server
is down, busy or slow: asked again by the step's retry policy) or
:class:`~chainlab.errors.PermanentError` (asking again cannot help), naming the endpoint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from chainlab._text import safe_repr
from chainlab.errors import PermanentError, ToolError, TransientError
from chainlab.events.event import MODEL_DELTA
from chainlab.events.usage import normalize_usage

__all__ = ["MODEL_DELTA", "TRANSIENT_STATUSES", "ModelCall", "ModelClient", "ModelDelta",
           "ModelRequest", "ModelTurn", "RequestHasher", "reported_usage", "request_hash",
           "status_error"]


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One tool call the model asked for: its id (the model's), the function it named and
    the arguments as the model wrote them (text: they may not even be JSON)."""

    call_id: str
    function: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.call_id, "function": self.function, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelCall:
        return cls(str(data["id"]), str(data["function"]), str(data["arguments"]))


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """The model's answer to one request: its text (``content``), the tool calls it asks
    for (in its order), why it stopped, and what the request consumed (a usage dict:
    ``input_tokens``, ``output_tokens``, ``tokens``, ``model``). ``usage_unknown``: why
    what the server reported cannot be taken (negative, NaN, over the limit: ``usage`` is
    then None), which the runtime records with the turn, counting the step's expected usage
    in its stead (:func:`chainlab.runtime.engine.budget.turn_usage`). ``checks``: the
    verdicts of the checks the client ran around the request (JSON data each, e.g. an
    OpenAI Agents SDK guardrail's ``{"guardrail": NAME, "stage": "input", "tripped": false,
    "info": ...}``), recorded with the answer so that a replay does not run them again."""

    content: str | None = None
    calls: tuple[ModelCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    usage_unknown: str | None = None
    checks: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The answer as recorded in the run's log (the usage is recorded beside it; the
        checks only when there were some, so an answer without them is recorded as
        before)."""
        out = {"content": self.content, "calls": [c.to_dict() for c in self.calls],
               "finish_reason": self.finish_reason}
        if self.checks:
            out["checks"] = [dict(c) for c in self.checks]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], usage: dict[str, Any] | None = None,
                  usage_unknown: str | None = None) -> ModelTurn:
        """The answer :meth:`to_dict` recorded, with the ``usage`` recorded beside it (or
        why it was unknown: then the usage recorded was counted in its stead, not the
        server's)."""
        return cls(data.get("content"), tuple(ModelCall.from_dict(c)
                                              for c in data.get("calls") or ()),
                   data.get("finish_reason"), None if usage_unknown else usage, usage_unknown,
                   tuple(dict(c) for c in data.get("checks") or ()))


@dataclass(frozen=True, slots=True)
class ModelDelta:
    """A piece of a model's answer as it arrives (DESIGN §24): a notification of kind
    ``model_delta`` to the run's ``deltas=True`` subscribers, never stored (the turn is
    recorded whole when it ends). ``text``: a piece of the answer's text; or, for a tool
    call, ``call_index`` (its position in the answer), ``function`` (with its first piece)
    and ``arguments`` (a piece of them). ``step_id`` and ``turn`` say whose; ``run_id`` is
    filled in by the run that tells it."""

    kind: ClassVar[str] = MODEL_DELTA

    step_id: str
    turn: int
    text: str = ""
    call_index: int | None = None
    function: str | None = None
    arguments: str = ""
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The piece as JSON data (what SSE's ``event: delta`` carries)."""
        out: dict[str, Any] = {"kind": MODEL_DELTA, "run_id": self.run_id,
                               "step_id": self.step_id, "turn": self.turn}
        if self.call_index is None:
            out["text"] = self.text
        else:
            out.update(call_index=self.call_index, function=self.function,
                       arguments=self.arguments)
        return out


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model turn's request: the chat ``messages``, the ``tools`` offered (OpenAI
    function specs), the JSON Schema the final answer must follow (``output_schema``) and
    the ``temperature``, the most tokens the answer may take (``max_tokens``). ``step_id``
    and ``turn`` say where it comes from (a recorded model answers by them); ``hash``
    identifies what is asked (:func:`request_hash`). ``on_delta``: where a client that
    streams tells each piece of the answer as it arrives (:meth:`tell`; not part of what is
    asked)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    temperature: float | None = None
    step_id: str = ""
    turn: int = 1
    max_tokens: int | None = None
    on_delta: Callable[[ModelDelta], None] | None = field(default=None, compare=False,
                                                          repr=False)

    def tell(self, text: str = "", *, call_index: int | None = None,
             function: str | None = None, arguments: str = "") -> None:
        """Tell a piece of the answer as it arrives (a client that streams calls it; one
        that does not never does): text, or a piece of tool call ``call_index``'s
        arguments. Nothing happens when nobody listens."""
        if self.on_delta is not None and (text or arguments or function):
            self.on_delta(ModelDelta(self.step_id, self.turn, text, call_index, function,
                                     arguments))

    def body(self) -> dict[str, Any]:
        """What is asked, as JSON data: what :attr:`hash` is computed over and what the log
        records (the model's name and the endpoint are not in it: a recorded run replays
        against another server as long as it asks the same)."""
        out: dict[str, Any] = {"messages": self.messages}
        if self.tools:
            out["tools"] = self.tools
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out

    @property
    def hash(self) -> str:
        return request_hash(self.body())


def reported_usage(sent: Mapping[str, Any], input_tokens: Any, output_tokens: Any,
                   model: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(the usage a model's answer reported, None) or, when its numbers cannot be taken
    (negative, NaN, over the limit: never dropped silently), (None, what it reported and why
    not: a turn's ``usage_unknown``). ``sent``: the numbers as the answer named them (said in
    that message); ``model``: the model's name when it is text."""
    found = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "model": model if isinstance(model, str) else None}
    try:
        return normalize_usage(found) or None, None
    except ValueError as exc:
        said = ", ".join(f"{key}={safe_repr(value, 40)}" for key, value in sent.items()
                         if value is not None)
        return None, f"the server reported {said} ({exc})"


#: HTTP statuses of a failed model request that asking again may cure (besides 5xx)
TRANSIENT_STATUSES = frozenset({408, 409, 429})


def status_error(status: int, said: str) -> ToolError:
    """How a model request that got HTTP ``status`` failed, for the step's retry policy: a
    :class:`~chainlab.errors.TransientError` for 408/409/429 and 5xx (busy, slow, down:
    asked again), else a :class:`~chainlab.errors.PermanentError`. ``said`` names the
    endpoint (or the provider and model) and what it answered."""
    if status in TRANSIENT_STATUSES or status >= 500:
        return TransientError(said)
    return PermanentError(said)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(body: Mapping[str, Any]) -> str:
    """A stable hash of a request body (sorted keys, compact JSON)."""
    return hashlib.sha256(_dumps(body).encode()).hexdigest()[:32]


class RequestHasher:
    """:func:`request_hash` of the requests of one agent step, turn after turn, at the cost
    of what each adds: the hash's state after the messages already hashed is kept, and a
    request whose messages begin with them (and whose other keys come out the same) hashes
    only its new messages. The same value as :func:`request_hash`, always: a request that
    does not continue the last one is hashed whole."""

    __slots__ = ("_head", "_messages", "_state")

    def __init__(self) -> None:
        self._head = ""
        self._messages: list[Any] = []
        self._state: Any = None

    def hash(self, body: Mapping[str, Any]) -> str:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return request_hash(body)
        # the compact sorted JSON of the body is HEAD "messages":[m0,m1,...] TAIL
        head = _dumps({k: v for k, v in body.items() if k < "messages"})[:-1]
        tail = _dumps({k: v for k, v in body.items() if k > "messages"})
        done = len(self._messages)
        if self._state is None or head != self._head or done > len(messages) \
                or messages[:done] != self._messages:
            self._head, self._messages = head, []
            self._state = hashlib.sha256(
                (head + ("," if head != "{" else "") + '"messages":[').encode())
            done = 0
        for message in messages[done:]:
            self._state.update(("," if self._messages else "").encode()
                               + _dumps(message).encode())
            self._messages.append(message)
        state = self._state.copy()
        state.update(("]" + ("," + tail[1:] if tail != "{}" else "}")).encode())
        return state.hexdigest()[:32]


class ModelClient(Protocol):
    """What asks a model (:class:`chainlab.agent.openai.OpenAIClient` over HTTP; a recorded
    run's turns in a replay). ``endpoint``: where it asks, for messages."""

    @property
    def endpoint(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelTurn:
        """The model's answer. Raises TransientError or PermanentError naming the
        endpoint."""
        ...
