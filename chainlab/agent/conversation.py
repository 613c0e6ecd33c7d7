"""An agent step's conversation, rebuilt from what its run recorded (pure data in and out).

The model sees the agent's ``instructions`` (system), the step's ``request`` (user), then for
each recorded turn: its answer (with the tool calls it asked for) and one ``tool`` message
per call, in the model's call order whatever order the calls finished in (:func:`messages`).
What a call's message says is :func:`result_text`: its output; the error of a call that
failed or could not be made; a person's rejection with the reason; the args a person edited
before approving. A turn whose final answer did not fit the output schema is followed by a
``user`` message saying why (its ``feedback``).

The tools are offered as OpenAI functions (:class:`Offer`): a function name is the tool's
name where OpenAI allows it (``[A-Za-z0-9_-]``, at most 64 characters), else a close one
(``chain:triage`` -> ``chain__triage``); :func:`check_calls` maps what the model asked for
back to tools and checks each call before it becomes a step: a function the agent does not
offer, arguments that are not a JSON object, longer than :data:`MAX_ARGUMENTS_CHARS`, or
that do not fit the tool, and calls past ``max_calls_per_turn`` are refused to the model
(each is that call's result, recorded; no step is made for it).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import safe_repr
from chainlab.agent.model import ModelCall, ModelTurn

__all__ = ["MAX_ARGUMENTS_CHARS", "Accepted", "Offer", "PastTurn", "Refused", "check_calls",
           "function_names", "messages", "result_text"]

#: the longest arguments text (characters) of one call the runtime takes from a model
MAX_ARGUMENTS_CHARS = 100_000
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Offer:
    """A tool an agent offers its model: the tool's name in the toolbox (``lookup``,
    ``chain:NAME``, ``agent:NAME``), the function name the model sees, what the model reads
    about it, and ``check``: the args as the step will run with them (a sub-chain's with
    its defaults filled in), or ValueError saying what does not fit."""

    tool: str
    function: str
    description: str
    parameters: dict[str, Any]
    check: Callable[[dict[str, Any]], dict[str, Any]]

    def spec(self) -> dict[str, Any]:
        """The OpenAI function spec."""
        return {"type": "function", "function": {
            "name": self.function, "description": self.description,
            "parameters": self.parameters}}


@dataclass(frozen=True, slots=True)
class Accepted:
    """A call that becomes a step: its position in the model's calls, tool and args."""

    index: int
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Refused:
    """A call that cannot be made: its position and why (what the model is told)."""

    index: int
    error: str


@dataclass(frozen=True, slots=True)
class PastTurn:
    """One recorded turn as the next request sends it back: the model's answer, one result
    text per call (in the model's order) and the feedback on a final answer that did not
    fit."""

    answer: ModelTurn
    results: Sequence[str]
    feedback: str | None = None


def function_names(tools: Iterable[str], given: Mapping[str, str] | None = None
                   ) -> dict[str, str]:
    """``{function name: tool name}`` for an agent's tools, in their order: the name
    ``given`` for the tool (an agent's own tool: the name its SDK gave it), else the tool's
    own name where OpenAI allows it, else ``:`` as ``__`` and any other character as ``_``
    (cut to 64 characters), made unique with a ``_2``, ``_3`` ... suffix."""
    out: dict[str, str] = {}
    for tool in tools:
        base = (given or {}).get(tool) or tool
        base = _NOT_ALLOWED.sub("_", base.replace(":", "__"))[:60] or "tool"
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}_{n}"
        out[name] = tool
    return out


def messages(instructions: str, request: str, turns: Sequence[PastTurn]
             ) -> list[dict[str, Any]]:
    """The chat messages of the next request, rebuilt from the recorded turns."""
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions},
                                 {"role": "user", "content": request}]
    for turn in turns:
        answer = turn.answer
        # a turn that only called tools has no text: "" rather than null, which OpenAI takes
        # either way but llama-cpp-python's server refuses (a 500 on every next turn)
        said: dict[str, Any] = {"role": "assistant", "content": answer.content or ""}
        if answer.calls:
            said["tool_calls"] = [{"id": c.call_id, "type": "function",
                                   "function": {"name": c.function, "arguments": c.arguments}}
                                  for c in answer.calls]
        out.append(said)
        out += [{"role": "tool", "tool_call_id": call.call_id, "content": text}
                for call, text in zip(answer.calls, turn.results, strict=True)]
        if turn.feedback is not None:
            out.append({"role": "user", "content": turn.feedback})
    return out


def check_calls(calls: Sequence[ModelCall], offers: Mapping[str, Offer],
                max_calls: int) -> list[Accepted | Refused]:
    """What becomes of each call the model asked for, in its order (see the module
    docstring)."""
    out: list[Accepted | Refused] = []
    for index, call in enumerate(calls):
        if index >= max_calls:
            out.append(Refused(index, f"refused: at most {max_calls} tool calls are made per "
                               f"turn and this turn asked for {len(calls)}; ask again for "
                               "the ones you still need"))
            continue
        offer = offers.get(call.function)
        if offer is None:
            close = difflib.get_close_matches(call.function, list(offers), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            out.append(Refused(index, f"unknown tool {call.function!r}{hint or '.'} The tools are: "
                               f"{', '.join(offers) or 'none'}"))
            continue
        if len(call.arguments) > MAX_ARGUMENTS_CHARS:
            out.append(Refused(index, f"the arguments of {call.function!r} are "
                               f"{len(call.arguments):,} characters; at most "
                               f"{MAX_ARGUMENTS_CHARS:,} are taken: pass less data"))
            continue
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            out.append(Refused(index, f"the arguments of {call.function!r} are not valid "
                               f"JSON ({exc}): {safe_repr(call.arguments, 80)}"))
            continue
        try:  # the value gate, as for every value that enters (DESIGN §20)
            args = to_json_value(args, "arguments")
        except NotJSONError as exc:
            out.append(Refused(index, f"the arguments of {call.function!r} cannot be taken: "
                               f"{exc}"))
            continue
        if not isinstance(args, dict):
            out.append(Refused(index, f"the arguments of {call.function!r} must be a JSON "
                               f"object, got {safe_repr(args, 60)}"))
            continue
        try:
            out.append(Accepted(index, offer.tool, offer.check(args)))
        except ValueError as exc:
            out.append(Refused(index, f"the arguments do not fit {call.function!r}: {exc}"))
    return out


def result_text(status: str, *, output: Any = None, error: str | None = None,
                error_kind: str | None = None, reason: str | None = None,
                edited_args: Mapping[str, Any] | None = None) -> str:
    """What the model is told about one call that became a step, by the step's status."""
    if status in ("succeeded", "compensated", "compensating", "compensation_failed"):
        text = json.dumps(output, ensure_ascii=False, separators=(",", ":"))
        if edited_args is not None:
            args = json.dumps(dict(edited_args), ensure_ascii=False, separators=(",", ":"))
            return (f"(a person changed the arguments before approving; the call ran with "
                    f"{args}) {text}")
        return text
    if status == "rejected":
        return f"a person rejected this call: {reason or 'no reason given'}"
    if status == "failed":
        kind = f" ({error_kind})" if error_kind else ""
        return f"error{kind}: {error or 'the call failed'}"
    return f"not run: the call was {status}" + (f" ({reason})" if reason else "")
