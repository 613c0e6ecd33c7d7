"""How a plan is asked for and read back: the planner's use of the structured-output modes
(:mod:`chainlab.agent.modes`, shared with agent steps: the modes, their negotiation and the
memory of the mode that worked per endpoint and model).

The planner tries ``json_schema``, ``json_object``, ``tools`` (one function ``submit_plan``
whose parameters are the plan's schema, forced with ``tool_choice``; the plan is the call's
arguments) and ``text``, and keeps the first one the server takes. A server that refuses a
mode by name gets the next one at once, without spending a repair round.

Pure data in, data out: this module never imports ``openai``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from chainlab.agent.modes import (
    OutputMode,
    first_json_object,
    forget_modes,
    json_text,
    modes_from,
    one_line,
    refuses,
    remember_mode,
    remembered_mode,
    response_format,
)
from chainlab.agent.modes import with_schema_prompt as _with_schema_prompt

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


#: The function the model is made to call in ``tools`` mode.
FUNCTION_NAME = "submit_plan"


def request_params(mode: OutputMode, schema: dict[str, Any], *, name: str,
                   strict: bool) -> dict[str, Any]:
    """The request fields that ask for a plan following ``schema`` in ``mode``."""
    description = "a chainlab chain (plan) of tool calls"
    if mode is OutputMode.TOOLS:
        return {"tools": [{"type": "function", "function": {
                    "name": FUNCTION_NAME, "description": f"Submit {description}.",
                    "parameters": schema}}],
                "tool_choice": {"type": "function", "function": {"name": FUNCTION_NAME}}}
    return response_format(mode, schema, name=name, strict=strict, description=description)


def with_schema_prompt(messages: Sequence[dict[str, Any]], mode: OutputMode,
                       schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` as sent in ``mode``: in ``text`` mode the schema is appended to the
    system message (nothing else carries it); other modes send them unchanged."""
    return _with_schema_prompt(messages, mode, schema, "the plan")


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


#: The plan's JSON text in an answer (a code fence or prose around it taken off).
plan_text = json_text
