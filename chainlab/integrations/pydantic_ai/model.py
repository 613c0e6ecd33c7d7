"""The model side of a converted Pydantic AI agent: :class:`PydanticAIClient`, the
:class:`~chainlab.agent.model.ModelClient` that asks the agent's own Pydantic AI model
object (through ``pydantic_ai.direct.model_request``), and :class:`OutputSpec`, the agent's
``output_type`` as chainlab's output schema and Pydantic AI's request parameters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chainlab._text import safe_repr
from chainlab.agent.endpoint import host_of
from chainlab.agent.model import ModelCall, ModelRequest, ModelTurn, reported_usage
from chainlab.errors import AgentConversionError, MissingExtraError
from chainlab.integrations._convert import model_failure

try:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai import models as pa_models
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.messages import ModelRequest as PARequest
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise MissingExtraError("pydantic-ai-slim", "pydantic-ai",
                            "converting a Pydantic AI agent") from exc

__all__ = ["OutputSpec", "PydanticAIClient", "base_url"]


class PydanticAIClient:
    """A :class:`~chainlab.agent.model.ModelClient` that asks a Pydantic AI model object:
    chainlab's request (OpenAI-style messages and functions) becomes Pydantic AI's messages
    and request parameters, the model's ``ModelResponse`` a :class:`ModelTurn` with its
    usage. What the provider raises is classified transient or permanent, naming the
    provider and the model."""

    def __init__(self, model: Any, *, system_prompts: list[str], instructions: list[str],
                 tool_defs: Mapping[str, Any], output: OutputSpec | None,
                 settings: Mapping[str, Any]):
        self.model = model
        self.system_prompts = system_prompts
        self.instructions = "\n\n".join(t for t in instructions if t.strip()) or None
        self.tool_defs = dict(tool_defs)
        self.output = output
        self.settings = dict(settings)
        self.provider = str(getattr(model, "system", None) or type(model).__name__)
        self.model_id = f"{self.provider}:{getattr(model, 'model_name', '?')}"

    @property
    def system_text(self) -> str:
        """What the chainlab agent records as its instructions (the system prompts, then the
        instructions: the text the model reads first)."""
        return "\n\n".join([*self.system_prompts, *([self.instructions]
                                                    if self.instructions else [])])

    @property
    def endpoint(self) -> str:
        url = base_url(self.model)
        return self.model_id + (f" at {host_of(url)}" if url else "")

    def __repr__(self) -> str:
        return f"<PydanticAIClient {self.endpoint}>"

    async def complete(self, request: ModelRequest) -> ModelTurn:
        settings = dict(self.settings)
        if request.temperature is not None:
            settings["temperature"] = request.temperature
        if request.max_tokens is not None:
            settings["max_tokens"] = request.max_tokens
        params = self._parameters(request)
        try:
            response = await model_request(self.model, self._messages(request),
                                           model_settings=settings or None,  # type: ignore
                                           model_request_parameters=params)
        except Exception as exc:  # the provider's error, said once, here
            raise model_failure(exc, f"Pydantic AI {self.provider}",
                                str(getattr(self.model, "model_name", "?"))) from None
        return self._turn(response)

    # ------------------------------------------------------------------ translation
    def _messages(self, request: ModelRequest) -> list[ModelMessage]:
        """chainlab's messages as Pydantic AI's: the system prompts with the request (the
        instructions beside every request, as Pydantic AI sends them), each answer a
        ``ModelResponse``, the calls' results ``ToolReturnPart`` s (named by their call)."""
        out: list[ModelMessage] = []
        parts: list[Any] = [SystemPromptPart(p) for p in self.system_prompts]
        called: dict[str, str] = {}
        for message in request.messages[1:]:  # (the first: the system text, sent above)
            role, content = message.get("role"), message.get("content") or ""
            if role == "assistant":
                if parts:
                    out.append(PARequest(parts=parts, instructions=self.instructions))
                    parts = []
                said: list[Any] = [TextPart(content)] if content else []
                for call in message.get("tool_calls") or ():
                    function = call["function"]
                    called[call["id"]] = function["name"]
                    said.append(ToolCallPart(function["name"], function["arguments"] or "{}",
                                             tool_call_id=call["id"]))
                out.append(ModelResponse(parts=said))
            elif role == "tool":
                call_id = message["tool_call_id"]
                parts.append(ToolReturnPart(called.get(call_id, ""), content,
                                            tool_call_id=call_id))
            else:  # the request, and feedback on an answer that did not fit
                parts.append(UserPromptPart(content))
        if parts:
            out.append(PARequest(parts=parts, instructions=self.instructions))
        return out

    def _parameters(self, request: ModelRequest) -> Any:
        tools = []
        for spec in request.tools:
            function = spec["function"]
            tools.append(self.tool_defs.get(function["name"]) or ToolDefinition(
                name=function["name"], description=function.get("description"),
                parameters_json_schema=function.get("parameters") or {}))
        output = self.output
        return pa_models.ModelRequestParameters(
            function_tools=tools,
            **({} if output is None else output.parameters))

    def _turn(self, response: Any) -> ModelTurn:
        texts: list[str] = []
        calls: list[ModelCall] = []
        answer: str | None = None
        out_tools = self.output.tool_names if self.output else frozenset()
        for part in response.parts:
            if isinstance(part, TextPart):
                texts.append(part.content)
            elif isinstance(part, ToolCallPart) and part.tool_name in out_tools:
                answer = part.args_as_json_str()  # the final answer, in an output tool
            elif isinstance(part, ToolCallPart):
                calls.append(ModelCall(part.tool_call_id, part.tool_name,
                                       part.args_as_json_str()))
        text = answer if answer is not None else ("".join(texts) or None)
        if text is not None and self.output is not None:
            text = self.output.unwrap(text)
        usage = response.usage
        sent = {"input_tokens": getattr(usage, "input_tokens", None),
                "output_tokens": getattr(usage, "output_tokens", None)}
        used, unknown = reported_usage(sent, sent["input_tokens"], sent["output_tokens"],
                                       response.model_name)
        return ModelTurn(text, tuple(calls), response.finish_reason, used, unknown)


class OutputSpec:
    """The agent's ``output_type`` (one structured type) as chainlab's output schema and
    Pydantic AI's request parameters: the output tools it offers (``final_result``) or the
    native / prompted mode, and the key a non-object type is wrapped under."""

    def __init__(self, schema: Any, parameters: dict[str, Any], tool_names: frozenset[str],
                 wrapped: str | None):
        self.schema = schema
        self.parameters = parameters
        self.tool_names = tool_names
        self.wrapped = wrapped

    @classmethod
    def of(cls, agent: Any, label: str) -> OutputSpec | None:
        """None for a text answer (``output_type=str``). ``DeferredToolRequests`` among
        the output types is left out: it is how a Pydantic AI run ends to wait for an
        approval, which a chainlab call does as a step. Raises AgentConversionError."""
        given = agent.output_type
        types = [t for t in (given if isinstance(given, list | tuple) else [given])
                 if t is not DeferredToolRequests]
        if types == [str]:
            return None
        schema = agent._output_schema  # (Pydantic AI's own build of the output_type)
        processor = getattr(schema, "processor", None) or getattr(schema, "text_processor",
                                                                   None)
        object_def = getattr(schema, "object_def", None)
        if object_def is None or type(processor).__name__ != "ObjectOutputProcessor" \
                or getattr(processor, "_function_schema", None) is not None \
                or len(types) != 1 \
                or len(getattr(schema.toolset, "processors", {}) or {}) > 1:
            raise AgentConversionError(
                label, f"output_type={safe_repr(agent.output_type)} has no mapping (chainlab "
                "takes text or ONE structured type; output functions, unions and several "
                "types are not converted)", "give one type (a pydantic model, a dataclass, "
                "a TypedDict, a list or a scalar)")
        wrapped = processor.outer_typed_dict_key  # type: ignore[union-attr]
        json_schema = dict(object_def.json_schema)
        if wrapped is not None:
            inner = dict(json_schema["properties"][wrapped])
            if "$defs" in json_schema:
                inner["$defs"] = json_schema["$defs"]
            json_schema = inner
        output_type = types[0]
        chainlab_schema = output_type if wrapped is None and isinstance(output_type, type) \
            and hasattr(output_type, "model_validate") else json_schema
        tools = list(schema.toolset.tool_defs) if schema.toolset is not None else []
        template = getattr(schema, "template", None)
        parameters = {"output_mode": schema.mode, "output_tools": tools,
                      "output_object": object_def, "allow_text_output": schema.allows_text,
                      **({"prompted_output_template": template} if template else {})}
        return cls(chainlab_schema, parameters, frozenset(t.name for t in tools), wrapped)

    def unwrap(self, text: str) -> str:
        """A final answer's JSON with Pydantic AI's wrapper taken off (a non-object output
        type's value travels as ``{"response": value}``)."""
        if self.wrapped is None:
            return text
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, dict) and set(value) == {self.wrapped}:
            return json.dumps(value[self.wrapped])
        return text


def base_url(model: Any) -> str | None:
    try:
        url = model.base_url
    except Exception:
        return None
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None
