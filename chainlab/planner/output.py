"""How a plan is asked for and read back: the structured-output modes and their negotiation.

OpenAI-compatible servers differ in how they constrain an answer to a JSON Schema. The
planner tries the modes in this order and keeps the first one the server takes:

===============  ==========================================================================
mode             the request carries
===============  ==========================================================================
``json_schema``  ``response_format: {"type": "json_schema", "json_schema": {...}}``
                 (api.openai.com, vLLM, Ollama, LM Studio, llama.cpp's C++ server)
``json_object``  ``response_format: {"type": "json_object", "schema": {...}}`` (llama-cpp-
                 python's server turns the schema into a grammar; others at least answer
                 JSON)
``tools``        one function ``submit_plan`` whose parameters are the schema, forced with
                 ``tool_choice``; the plan is the call's arguments
``text``         nothing: the schema goes into the system prompt and the first JSON object
                 of the answer is the plan
===============  ==========================================================================

A server *refuses* a mode when it answers an HTTP error whose message names what the mode
sent (``response_format``, ``json_schema``, ``tools``, ...): the planner then moves to the
next mode at once, without spending a repair round (:func:`refuses`). Any other error is a
failure of the request (the fallback answers). The mode that worked is remembered per base
URL and model for the life of the process (:func:`remembered_mode`), so the next plan
starts there.

Pure data in, data out: this module never imports ``openai``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

__all__ = [
    "FUNCTION_NAME",
    "OutputMode",
    "answer_text",
    "first_json_object",
    "forget_modes",
    "modes_from",
    "one_line",
    "plan_text",
    "refuses",
    "remember_mode",
    "remembered_mode",
    "request_params",
    "with_schema_prompt",
]


class OutputMode(StrEnum):
    """How the plan's JSON Schema reaches the server (in the order they are tried)."""

    JSON_SCHEMA = "json_schema"  # response_format json_schema: the server enforces the schema
    JSON_OBJECT = "json_object"  # response_format json_object carrying the schema
    TOOLS = "tools"  # a forced function call whose parameters are the schema
    TEXT = "text"  # the schema in the prompt; the first JSON object of the answer


#: The function the model is made to call in ``tools`` mode.
FUNCTION_NAME = "submit_plan"

# what an error message of a server that does not take a mode talks about
_REFUSAL_WORDS: dict[OutputMode, re.Pattern[str]] = {
    OutputMode.JSON_SCHEMA: re.compile(
        r"response_format|response format|json_schema|structured output|guided_json", re.I),
    OutputMode.JSON_OBJECT: re.compile(r"response_format|response format|json_object", re.I),
    OutputMode.TOOLS: re.compile(r"\btools?\b|tool_choice|tool choice|tool call|function",
                                 re.I),
}
# statuses that say "not this request" rather than "not you" or "not now"
_NOT_REFUSALS = frozenset({401, 403, 408, 409, 429})


def modes_from(modes: Iterable[str | OutputMode] | None) -> tuple[OutputMode, ...]:
    """The modes to try, in order (all of them when None).

    Raises ValueError for an unknown mode or an empty selection."""
    if modes is None:
        return tuple(OutputMode)
    if isinstance(modes, str):
        modes = [modes]
    out: list[OutputMode] = []
    for mode in modes:
        try:
            parsed = OutputMode(mode)
        except ValueError:
            raise ValueError(f"unknown output mode {mode!r}; choose from "
                             f"{[m.value for m in OutputMode]}") from None
        if parsed not in out:
            out.append(parsed)
    if not out:
        raise ValueError("output_modes is empty; name at least one of "
                         f"{[m.value for m in OutputMode]}")
    return tuple(out)


# --------------------------------------------------------------------------- requests


def request_params(mode: OutputMode, schema: dict[str, Any], *, name: str,
                   strict: bool) -> dict[str, Any]:
    """The request fields that ask for a plan following ``schema`` in ``mode``."""
    description = "a chainlab chain (plan) of tool calls"
    if mode is OutputMode.JSON_SCHEMA:
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "strict": strict, "description": description, "schema": schema}}}
    if mode is OutputMode.JSON_OBJECT:
        return {"response_format": {"type": "json_object", "schema": schema}}
    if mode is OutputMode.TOOLS:
        return {"tools": [{"type": "function", "function": {
                    "name": FUNCTION_NAME, "description": f"Submit {description}.",
                    "parameters": schema}}],
                "tool_choice": {"type": "function", "function": {"name": FUNCTION_NAME}}}
    return {}


def with_schema_prompt(messages: Sequence[dict[str, Any]], mode: OutputMode,
                       schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` as sent in ``mode``: in ``text`` mode the schema is appended to the
    system message (nothing else carries it); other modes send them unchanged."""
    out = [dict(m) for m in messages]
    if mode is OutputMode.TEXT and out and out[0].get("role") == "system":
        out[0]["content"] = (
            f"{out[0]['content']}\nAnswer with the plan only: ONE JSON object, no prose, "
            f"following this JSON Schema:\n{json.dumps(schema, separators=(',', ':'))}")
    return out


def answer_text(mode: OutputMode, message: Any) -> str | None:
    """The plan's text in a chat message: the forced call's arguments in ``tools`` mode
    (the content when the server answered without a call), else the content."""
    if mode is OutputMode.TOOLS:
        for call in getattr(message, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            arguments = getattr(function, "arguments", None)
            if isinstance(arguments, str) and arguments.strip():
                return arguments
            if isinstance(arguments, dict):
                return json.dumps(arguments)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else None


def refuses(mode: OutputMode, status: int | None, message: str) -> bool:
    """True when an HTTP error answering a request in ``mode`` says the server does not
    take that mode (so the next mode should be tried), not that the request failed."""
    words = _REFUSAL_WORDS.get(mode)
    if words is None or status is None or status < 400 or status in _NOT_REFUSALS:
        return False
    return words.search(message) is not None


# --------------------------------------------------------------------------- memory

_remembered: dict[tuple[str, str], OutputMode] = {}
_lock = threading.Lock()


def remembered_mode(base_url: str, model: str) -> OutputMode | None:
    """The mode that last worked for this endpoint and model in this process, if any."""
    with _lock:
        return _remembered.get((base_url.rstrip("/"), model))


def remember_mode(base_url: str, model: str, mode: OutputMode) -> None:
    """Remember that ``mode`` worked for this endpoint and model (for this process)."""
    with _lock:
        _remembered[(base_url.rstrip("/"), model)] = mode


def forget_modes() -> None:
    """Forget every remembered mode (the next plan negotiates again)."""
    with _lock:
        _remembered.clear()


# --------------------------------------------------------------------------- answers


def plan_text(text: str) -> str:
    """The plan's JSON text in an answer: inside a Markdown code fence if the whole answer
    is one (some local models add it even under structured output); else the first JSON
    object when the answer does not start with one (prose around it); else the text."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        inner = stripped[3:-3]
        first_newline = inner.find("\n")
        if first_newline != -1 and inner[:first_newline].strip().isalpha():
            inner = inner[first_newline + 1:]  # drop a language tag such as ``json``
        return inner.strip()
    if stripped and not stripped.startswith("{"):
        return first_json_object(stripped) or text
    return text


def first_json_object(text: str) -> str | None:
    """The first complete JSON object (``{...}``) in ``text`` that parses, or None.

    For answers that wrap the plan in prose or a code fence ("Here is the plan: {...}")."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            value, end = None, -1
        if isinstance(value, dict):
            return text[start:end]
        start = text.find("{", start + 1)
    return None


# an absolute path (POSIX or Windows) that does not belong to a URL
_PATH = re.compile(r"(?<![\w:/.\\-])(?:[A-Za-z]:\\|/)(?:[\w.\-]+[/\\])+[\w.\-]*")
_ERROR_PREFIX = re.compile(r"^Error code: \d+ - ")


def one_line(text: object, limit: int = 300) -> str:
    """An error text fit to show a person: one line, at most ``limit`` characters, without
    traceback frames (``Traceback ...``, ``File "..."`` and the code lines under it, as
    Python and FastAPI print them) and with file paths of the machine that produced it
    replaced by ``<path>``."""
    kept: list[str] = []
    frame_indent: int | None = None  # inside a frame: skip what is indented deeper
    for line in _ERROR_PREFIX.sub("", str(text).strip()).splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if frame_indent is not None and stripped and indent > frame_indent:
            continue
        frame_indent = None
        if stripped.startswith('File "'):
            frame_indent = indent
        elif stripped and not stripped.startswith("Traceback (most recent call last)"):
            kept.append(stripped)
    joined = _PATH.sub("<path>", " ".join(" ".join(kept).split()))
    if len(joined) > limit:
        joined = joined[:limit - 3].rstrip() + "..."
    return joined or "(no message)"
