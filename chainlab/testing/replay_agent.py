"""Agent steps in a replay: the model's turns answer from the recording (a cassette), so a
replayed run, and the test ``chainlab export-test`` writes from it, needs no model server
and no network.

:class:`RecordedModel` is the :class:`~chainlab.agent.model.ModelClient` of every replayed
agent: asked for turn N of step S, it takes the next recorded turn of S and compares the
request with the recorded one (its hash). The same request gets the recorded answer (or the
recorded error, raised again with its kind, so a server error then an answer replays as
such); another request is never answered: the turn fails (``permanent``) with a readable
diff of the recorded request against the one made now, message by message (a changed tool
output shows in the tool message that carries it; changed instructions in the system
message). :func:`replay_agents` puts it in place of each agent's model in a replay's
toolbox (an agent named in ``live`` asks its real model).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from chainlab.agent.definition import AgentTool
from chainlab.agent.model import ModelRequest, ModelTurn
from chainlab.errors import PermanentError, ToolError
from chainlab.tools import Toolbox

__all__ = ["RecordedModel", "replay_agents", "request_lines"]


class RecordedModel:
    """Answers agent turns from recorded ones (see the module docstring)."""

    endpoint = "the recording"

    def __init__(self, turns: Iterable[Mapping[str, Any]]):
        self.left: dict[str, list[Mapping[str, Any]]] = {}
        self.asked: list[tuple[str, int]] = []
        for turn in turns:
            self.left.setdefault(turn["step_id"], []).append(turn)

    async def complete(self, request: ModelRequest) -> ModelTurn:
        self.asked.append((request.step_id, request.turn))
        left = self.left.get(request.step_id, [])
        if not left:
            raise PermanentError(
                f"replay: the recording has no more model turns of step {request.step_id!r} "
                f"(turn {request.turn} was asked): the agent now asks more than the recorded "
                "run did")
        recorded = left[0]
        if recorded["request_hash"] != request.hash:
            raise PermanentError(
                f"replay: turn {request.turn} of agent step {request.step_id!r} asks the model "
                "something the recording never asked (the recorded answer is not given):\n"
                + "\n".join(difflib.unified_diff(
                    request_lines(recorded.get("request") or {}), request_lines(request.body()),
                    "recorded request", "request now", lineterm="")))
        left.pop(0)
        if recorded.get("answer") is not None:
            return ModelTurn.from_dict(recorded["answer"], recorded.get("usage"),
                                       recorded.get("usage_unknown"))
        error = ToolError(recorded.get("error") or "recorded model error")
        error.kind = recorded.get("error_kind") or "execution_failed"
        raise error

    def recorded_checks(self, step_id: str, turn: int) -> list[Mapping[str, Any]] | None:
        """The recorded checks of turn ``turn`` of step ``step_id`` before its model is
        asked (its input guardrails' verdicts: a replay never runs a guardrail again); None
        when the recording holds none. A turn its input guardrail stopped is used up here
        (no model answer was recorded for it)."""
        left = self.left.get(step_id) or []
        if not left or left[0].get("turn") != turn:
            return None
        entry = left[0]
        checks = entry.get("checks")
        if not checks:
            return None
        if entry.get("answer") is None and any(c.get("stage") == "input" and c.get("tripped")
                                               for c in checks):
            left.pop(0)
            self.asked.append((step_id, turn))
        return list(checks)

    def unused(self) -> list[Mapping[str, Any]]:
        """Recorded turns no replayed agent asked for."""
        return [turn for turns in self.left.values() for turn in turns]


def request_lines(body: Mapping[str, Any]) -> list[str]:
    """A request as lines a diff reads well: one per message (its role, then its text or
    its calls), then the tools offered and the output schema."""
    out = []
    for message in body.get("messages") or ():
        role = message.get("role")
        if role == "tool":
            role = f"tool[{message.get('tool_call_id')}]"
        text = message.get("content")
        calls = message.get("tool_calls") or ()
        if calls:
            called = ", ".join(f"{c['function']['name']}({c['function']['arguments']})"
                               for c in calls)
            text = f"{text} -> calls {called}" if text else f"calls {called}"
        out.append(f"{role}: {text}")
    for tool in body.get("tools") or ():
        function = tool.get("function") or {}
        params = json.dumps(function.get("parameters"), sort_keys=True, separators=(",", ":"))
        out.append(f"tool offered: {function.get('name')} {params}")
    if body.get("output_schema") is not None:
        out.append("output schema: " + json.dumps(body["output_schema"], sort_keys=True))
    if body.get("temperature") is not None:
        out.append(f"temperature: {body['temperature']}")
    return out


def replay_agents(toolbox: Toolbox, model: RecordedModel, live: Iterable[str],
                  tools: Mapping[str, Any] | None = None) -> list[AgentTool]:
    """The agents of ``toolbox`` as a replay runs them: each asks ``model`` (the recording)
    unless named in ``live``; same code fingerprint as the original. ``tools``: the replay's
    tools by name: the tools and sub-agents an agent brings (a converted agent's) are
    those, so registering it does not put the real ones back."""
    live = set(live)
    twins: dict[str, Any] = dict(tools or {})
    made = [tool.agent.with_client(model) for tool in toolbox
            if isinstance(tool, AgentTool) and tool.name not in live]
    twins.update({twin.tool.name: twin for twin in made})
    for twin in made:  # (a copy: the original agent keeps its own)
        twin.own_tools = tuple(twins.get(_name(t), t) for t in twin.own_tools)
    return [twin.tool for twin in made]


def _name(tool: Any) -> str:
    return tool.tool.name if hasattr(tool, "own_tools") else tool.name
