"""The model side of a converted OpenAI Agents SDK agent: :class:`OpenAIAgentsClient`, the
:class:`~chainlab.agent.model.ModelClient` that asks the agent's SDK ``Model``
(``get_response``) and runs its guardrails around the request, and :class:`OutputSpec`, the
agent's ``output_type`` as chainlab's output schema and the SDK's own schema object."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import safe_repr
from chainlab.agent.endpoint import host_of
from chainlab.agent.model import ModelCall, ModelRequest, ModelTurn, reported_usage
from chainlab.errors import AgentConversionError, MissingExtraError, PermanentError
from chainlab.integrations._convert import PerRun, model_failure

try:
    from agents import AgentOutputSchema, AgentOutputSchemaBase, FunctionTool, ModelSettings
    from agents.models import get_default_model
    from agents.models.interface import Model, ModelTracing
    from agents.models.multi_provider import MultiProvider
    from agents.run_context import RunContextWrapper
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise MissingExtraError("openai-agents", "openai-agents",
                            "converting an OpenAI Agents SDK agent") from exc

__all__ = ["OpenAIAgentsClient", "OutputSpec", "base_url"]


class OpenAIAgentsClient:
    """A :class:`~chainlab.agent.model.ModelClient` that asks an OpenAI Agents SDK ``Model``
    (``get_response``): chainlab's request becomes the SDK's system instructions, input items
    (the Responses format), tools and output schema; its ``ModelResponse`` a
    :class:`ModelTurn` with its usage. The agent's guardrails run around it: the input
    guardrails before the first turn, the output guardrails on a final answer; their
    verdicts are recorded with the turn. What the provider raises is classified transient or
    permanent, naming the provider and the model."""

    def __init__(self, model: Any, agent: Any, *, instructions: str | None,
                 tools: Mapping[str, Any], output: OutputSpec | None, settings: Any,
                 context: PerRun):
        self.agent = agent
        self.instructions = instructions
        self.tools = dict(tools)
        self.output = output
        self.settings = settings
        self.context = context
        if isinstance(model, Model):
            self._model: Any = model
            self.provider = type(model).__name__
            model_name = getattr(model, "model", None)
            self.model_name = model_name if isinstance(model_name, str) else self.provider
        else:  # a name: the SDK's default provider makes it when first asked (its key is
            self._model = None  # read then, in the process that asks)
            self.provider = "MultiProvider"
            self.model_name = model or get_default_model()
        self.base_url = base_url(self._model)

    @property
    def model(self) -> Any:
        """The SDK ``Model`` asked (one given by name is made by the SDK's default provider
        on first use). Raises PermanentError when it cannot be made (no key)."""
        if self._model is None:
            try:
                self._model = MultiProvider().get_model(self.model_name)
            except Exception as exc:
                raise PermanentError(f"the OpenAI Agents SDK cannot make the model "
                                     f"{self.model_name!r}: {type(exc).__name__}: {exc}") \
                    from None
        return self._model

    @property
    def endpoint(self) -> str:
        where = f" at {host_of(self.base_url)}" if self.base_url else ""
        return f"{self.provider} {self.model_name!r}{where}"

    def __repr__(self) -> str:
        return f"<OpenAIAgentsClient {self.endpoint}>"

    async def complete(self, request: ModelRequest) -> ModelTurn:
        checks: list[dict[str, Any]] = []
        user = next((m.get("content") or "" for m in request.messages
                     if m.get("role") == "user"), "")
        if request.turn == 1:
            for guard in self.agent.input_guardrails:
                result = await guard.run(self.agent, user, self._wrapper())
                checks.append(_verdict("input", guard, result.output))
        settings = self.settings.resolve(ModelSettings(
            temperature=request.temperature, max_tokens=request.max_tokens))
        try:
            response = await self.model.get_response(
                self.instructions, self._items(request), settings, self._tools(request),
                self.output.sdk if self.output else None, [], ModelTracing.DISABLED,
                previous_response_id=None, conversation_id=None, prompt=None)
        except Exception as exc:  # the provider's error, said once, here
            raise model_failure(exc, f"OpenAI Agents SDK {self.provider}",
                                self.model_name) from None
        text, calls = _read(response.output)
        if not calls and text is not None:
            value, text = self.output.parse(text) if self.output else (text, text)
            if value is not _UNFIT:
                for guard in self.agent.output_guardrails:
                    result = await guard.run(self._wrapper(), self.agent, value)
                    checks.append(_verdict("output", guard, result.output))
        used, unknown = _usage(response.usage, self.model_name)
        return ModelTurn(text, tuple(calls), None, used, unknown, tuple(checks))

    def _wrapper(self) -> Any:
        return RunContextWrapper(context=self.context.make("a guardrail"))

    @staticmethod
    def _items(request: ModelRequest) -> list[dict[str, Any]]:
        """chainlab's messages (after the system one) as the SDK's input items."""
        out: list[dict[str, Any]] = []
        for message in request.messages[1:]:
            role, content = message.get("role"), message.get("content") or ""
            if role == "assistant":
                if content:
                    out.append({"role": "assistant", "content": content})
                out += [{"type": "function_call", "call_id": c["id"],
                         "name": c["function"]["name"],
                         "arguments": c["function"]["arguments"] or "{}"}
                        for c in message.get("tool_calls") or ()]
            elif role == "tool":
                out.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                            "output": content})
            else:
                out.append({"role": "user", "content": content})
        return out

    def _tools(self, request: ModelRequest) -> list[Any]:
        """The agent's own FunctionTools as they are; any other function offered (a
        sub-agent) as a FunctionTool of chainlab's spec (never invoked by the SDK)."""
        out = []
        for spec in request.tools:
            function = spec["function"]
            tool = self.tools.get(function["name"])
            out.append(tool if tool is not None else FunctionTool(
                name=function["name"], description=function.get("description") or "",
                params_json_schema=function.get("parameters") or {},
                on_invoke_tool=_not_here, strict_json_schema=False))
        return out


_UNFIT = object()


class OutputSpec:
    """The agent's ``output_type`` as chainlab's output schema, the SDK's schema object the
    model is given, and the parse of a final answer (the SDK's own validation)."""

    def __init__(self, sdk: Any, schema: Any):
        self.sdk = sdk
        self.schema = schema

    @classmethod
    def of(cls, agent: Any, label: str) -> OutputSpec | None:
        given = agent.output_type
        if given is None or given is str:
            return None
        try:
            sdk = given if isinstance(given, AgentOutputSchemaBase) else AgentOutputSchema(given)
        except Exception as exc:
            raise AgentConversionError(label, f"output_type={safe_repr(given)} cannot be "
                                       f"made a schema: {exc}", "give one JSON-able type") \
                from None
        if sdk.is_plain_text():
            return None
        json_schema = sdk.json_schema()
        if getattr(sdk, "_is_wrapped", False):  # a non-object type travels as {"response": v}
            inner = dict(json_schema["properties"]["response"])
            if "$defs" in json_schema:
                inner["$defs"] = json_schema["$defs"]
            return cls(sdk, inner)
        is_model = isinstance(given, type) and hasattr(given, "model_validate")
        return cls(sdk, given if is_model else json_schema)

    def parse(self, text: str) -> tuple[Any, str]:
        """(the output as the SDK makes it, the answer's JSON unwrapped), or (_UNFIT, the
        text) when it does not validate (chainlab's check then tells the model why)."""
        try:
            value = self.sdk.validate_json(text)
        except Exception:
            return _UNFIT, text
        return value, json.dumps(to_jsonable_python(value))


def base_url(model: Any) -> str | None:
    client = getattr(model, "_client", None)
    url = str(getattr(client, "base_url", "") or "")
    return url if url.startswith(("http://", "https://")) else None


def _read(output: list[Any]) -> tuple[str | None, list[ModelCall]]:
    """The answer's text and its function calls, from the SDK's output items."""
    texts: list[str] = []
    calls: list[ModelCall] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "message":
            for piece in getattr(item, "content", ()) or ():
                if getattr(piece, "type", None) == "output_text":
                    texts.append(piece.text)
                elif getattr(piece, "type", None) == "refusal":
                    raise PermanentError(f"the model refused: {piece.refusal}")
        elif kind == "function_call":
            calls.append(ModelCall(item.call_id, item.name, item.arguments or ""))
    return ("".join(texts) or None), calls


def _usage(usage: Any, model: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the usage the SDK's response reported, None), or (None, why it cannot be taken)."""
    sent = {"input_tokens": getattr(usage, "input_tokens", None),
            "output_tokens": getattr(usage, "output_tokens", None)}
    return reported_usage(sent, sent["input_tokens"], sent["output_tokens"], model)


def _verdict(stage: str, guard: Any, output: Any) -> dict[str, Any]:
    """A guardrail's verdict as recorded with the turn; a tripwire raises PermanentError
    naming the guardrail and what it found (the agent step fails)."""
    name = guard.get_name() if hasattr(guard, "get_name") else getattr(guard, "name", "?")
    try:
        info = to_json_value(to_jsonable_python(output.output_info, fallback=str), "info")
    except (NotJSONError, ValueError, TypeError):
        info = safe_repr(output.output_info)
    if output.tripwire_triggered:
        raise PermanentError(f"the {stage} guardrail {name!r} tripped: "
                             f"{json.dumps(info, ensure_ascii=False)[:500]}")
    return {"guardrail": name, "stage": stage, "tripped": False, "info": info}


async def _not_here(context: Any, arguments: str) -> Any:  # pragma: no cover - never called
    raise PermanentError("a sub-agent's call is made by chainlab, not by the SDK")
