"""How an answer is constrained to a JSON Schema on an OpenAI-compatible server, and how that
is negotiated: the planner (a plan) and agent steps (an ``output_schema``) share it.

Servers differ in how they constrain an answer to a JSON Schema. The modes, in the order
they are tried (the first one the server takes is kept):

===============  ==========================================================================
mode             the request carries
===============  ==========================================================================
``json_schema``  ``response_format: {"type": "json_schema", "json_schema": {...}}``
                 (api.openai.com, vLLM, Ollama, LM Studio, llama.cpp's C++ server)
``json_object``  ``response_format: {"type": "json_object", "schema": {...}}`` (llama-cpp-
                 python's server turns the schema into a grammar; others at least answer
                 JSON)
``tools``        (the planner only) one function whose parameters are the schema, forced
                 with ``tool_choice``; the answer is the call's arguments
``text``         nothing: the schema goes into the system prompt and the first JSON object
                 of the answer is read
===============  ==========================================================================

A server *refuses* a mode when it answers an HTTP error whose message names what the mode
sent (``response_format``, ``json_schema``, ``tools``, ...): the caller then moves to the
next mode at once (:func:`refuses`). Any other error is a failure of the request. The mode
that worked is remembered per base URL and model for the life of the process
(:func:`remembered_mode`), so the next request starts there, whoever makes it.

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
    "OutputMode",
    "first_json_object",
    "forget_modes",
    "json_text",
    "modes_from",
    "one_line",
    "refuses",
    "remember_mode",
    "remembered_mode",
    "response_format",
    "with_schema_prompt",
]


class OutputMode(StrEnum):
    """How a JSON Schema for the answer reaches the server (in the order they are tried)."""

    JSON_SCHEMA = "json_schema"  # response_format json_schema: the server enforces the schema
    JSON_OBJECT = "json_object"  # response_format json_object carrying the schema
    TOOLS = "tools"  # a forced function call whose parameters are the schema
    TEXT = "text"  # the schema in the prompt; the first JSON object of the answer


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


def modes_from(modes: Iterable[str | OutputMode] | None,
               allowed: Sequence[OutputMode] = tuple(OutputMode)) -> tuple[OutputMode, ...]:
    """The modes to try, in order (all ``allowed`` ones when None).

    Raises ValueError for an unknown mode or an empty selection."""
    if modes is None:
        return tuple(allowed)
    if isinstance(modes, str):
        modes = [modes]
    out: list[OutputMode] = []
    for mode in modes:
        try:
            parsed = OutputMode(mode)
        except ValueError:
            parsed = None
        if parsed is None or parsed not in allowed:
            raise ValueError(f"unknown output mode {mode!r}; choose from "
                             f"{[m.value for m in allowed]}") from None
        if parsed not in out:
            out.append(parsed)
    if not out:
        raise ValueError("output_modes is empty; name at least one of "
                         f"{[m.value for m in allowed]}")
    return tuple(out)


def response_format(mode: OutputMode, schema: dict[str, Any], *, name: str, strict: bool,
                    description: str) -> dict[str, Any]:
    """The ``response_format`` request field that asks for an answer following ``schema``
    in ``mode`` (``{}`` in ``text`` and ``tools`` mode: nothing to send there)."""
    if mode is OutputMode.JSON_SCHEMA:
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "strict": strict, "description": description, "schema": schema}}}
    if mode is OutputMode.JSON_OBJECT:
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


def with_schema_prompt(messages: Sequence[dict[str, Any]], mode: OutputMode,
                       schema: dict[str, Any], what: str = "the plan") -> list[dict[str, Any]]:
    """``messages`` as sent in ``mode``: in ``text`` mode the schema is appended to the
    system message (nothing else carries it); other modes send them unchanged."""
    out = [dict(m) for m in messages]
    if mode is OutputMode.TEXT and out and out[0].get("role") == "system":
        out[0]["content"] = (
            f"{out[0]['content']}\nAnswer with {what} only: ONE JSON object, no prose, "
            f"following this JSON Schema:\n{json.dumps(schema, separators=(',', ':'))}")
    return out


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
    """Forget every remembered mode (the next request negotiates again)."""
    with _lock:
        _remembered.clear()


# --------------------------------------------------------------------------- answers


def json_text(text: str) -> str:
    """The JSON text in an answer: inside a Markdown code fence if the whole answer is one
    (some local models add it even under structured output); else the first JSON object
    when the answer does not start with one (prose around it); else the text."""
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

    For answers that wrap the JSON in prose or a code fence ("Here is the plan: {...}")."""
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
