"""The conversion of a Pydantic AI agent (:func:`from_pydantic_ai`; the module docstring of
:mod:`chainlab.integrations.pydantic_ai` says what maps to what): what is refused, the tools
(each a :class:`~chainlab.integrations._convert.ConvertedTool` whose body is Pydantic AI's
own validation and call of the function, with a RunContext), the agent put together."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chainlab._text import safe_repr
from chainlab.agent.definition import Agent
from chainlab.errors import AgentConversionError, MissingExtraError, PermanentError
from chainlab.integrations._convert import (
    CONTRACT_METADATA_KEY,
    ConvertedTool,
    PerRun,
    agent_name,
    check_version,
    contracts,
    own_compensation,
    unique_tools,
)
from chainlab.integrations.pydantic_ai.model import OutputSpec, PydanticAIClient, base_url
from chainlab.tools import CallContext

try:
    import pydantic_ai
    from pydantic_ai import models as pa_models
    from pydantic_ai import toolsets as pa_toolsets
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.messages import ToolReturn
    from pydantic_ai.tools import RunContext, Tool
    from pydantic_ai.usage import RunUsage
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise MissingExtraError("pydantic-ai-slim", "pydantic-ai",
                            "converting a Pydantic AI agent") from exc

__all__ = ["SUPPORTED", "from_pydantic_ai"]

#: the Pydantic AI versions chainlab converts agents of: [low, high)
SUPPORTED = ((2, 78), (3,))


def from_pydantic_ai(agent: Any, *, name: str | None = None,
                     tools: Mapping[str, Mapping[str, Any]] | None = None,
                     deps: Callable[[], Any] | None = None) -> Agent:
    """The Pydantic AI ``agent`` as a chainlab :class:`~chainlab.Agent` (see the module
    docstring): register it with ``toolbox.add_agent(...)`` and run it as ``tool:
    agent:NAME``. ``name``: its name (default: the agent's, made a step id); ``tools``: the
    side-effect contract of its tools by name; ``deps``: a factory of the agent's deps
    (called once per run). Raises AgentConversionError naming what cannot be converted."""
    if not isinstance(agent, pydantic_ai.Agent):
        raise AgentConversionError(
            safe_repr(agent), "it is not a Pydantic AI Agent", "pass a pydantic_ai.Agent (for "
            "an OpenAI Agents SDK agent: chainlab.integrations.openai_agents."
            "from_openai_agents)")
    check_version("Pydantic AI", pydantic_ai.__version__, *SUPPORTED, "pydantic-ai")
    label = f"{name or agent.name or '(unnamed)'!r} (Pydantic AI)"
    _refuse_unmapped(agent, label)
    chainlab_name = agent_name(name, agent.name, label)
    label = f"{chainlab_name!r} (Pydantic AI)"
    if deps is None and agent.deps_type not in (object, type(None)):
        raise AgentConversionError(
            label, f"it declares deps_type={safe_repr(agent.deps_type)} and no deps= was "
            "given", "pass deps=a factory that makes them (called once per run)")
    model = _model(agent, label)
    found = _function_tools(agent, label)
    contract = contracts(tools, {n: _sdk_contract(t) for n, t in found.items()},
                         {n: (t.metadata or {}).get(CONTRACT_METADATA_KEY)
                          for n, t in found.items() if isinstance(t.metadata, Mapping)}, label)
    made = PerRun(deps, "deps", label)
    names = {n: f"{chainlab_name}.{n}" for n in found}
    own = [ConvertedTool(_call(t, model, made, names[n]), name=names[n],
                         description=t.description or "",
                         input_schema=t.function_schema.json_schema, function=t.function,
                         origin=f"Pydantic AI agent {chainlab_name!r}", label=label,
                         **own_compensation(contract[n], names))
           for n, t in found.items()]
    system_prompts = [p for p in agent._system_prompts if p.strip()]  # (literal text only:
    texts = [str(i.instruction) for i in agent._instructions]  # _refuse_unmapped checked)
    output = OutputSpec.of(agent, label)
    settings: dict[str, Any] = dict(agent.model_settings or {})  # type: ignore[arg-type]
    client = PydanticAIClient(model, system_prompts=system_prompts, instructions=texts,
                              tool_defs={n: t.tool_def for n, t in found.items()},
                              output=output, settings=settings)
    return Agent(chainlab_name, client.system_text or f"(the Pydantic AI agent "
                 f"{chainlab_name!r} has no instructions)",
                 own_tools=own, model=client.model_id, base_url=base_url(model),
                 output_schema=output.schema if output else None,
                 temperature=settings.get("temperature"),
                 max_tokens=settings.get("max_tokens"), client=client,
                 description=_text(agent.description))


# --------------------------------------------------------------------------- tools


def _call(tool: Any, model: Any, deps: PerRun, name: str) -> Any:
    """The body of the converted tool ``name``: Pydantic AI's validation of the args, then
    its call of the function, with a RunContext."""
    schema = tool.function_schema

    async def call(context: CallContext, args: dict[str, Any]) -> Any:
        run_context = RunContext(deps=deps.get(context.run_id, name), model=model,
                                 usage=RunUsage(), run_id=context.run_id,
                                 tool_call_id=context.step_id, tool_name=tool.name,
                                 retry=max(context.attempt - 1, 0))
        try:
            validated = schema.validator.validate_python(args)
        except Exception as exc:  # (the JSON Schema passed; a stricter validator did not)
            raise PermanentError(f"{tool.name}: the args do not fit: {exc}",
                                 before_effect=True) from None
        try:
            result = await schema.call(validated, run_context)
        except ModelRetry as exc:  # the tool asks the model to try again: it reads why
            raise PermanentError(f"{tool.name} asks to try again: {exc.message}",
                                 before_effect=True) from None
        if isinstance(result, ToolReturn):
            result = result.return_value
        return to_jsonable_python(result)
    return call


def _function_tools(agent: Any, label: str) -> dict[str, Any]:
    """The agent's function tools by name, in its order (its own, then its toolsets')."""
    pairs: list[tuple[str, Any]] = []
    for toolset in agent.toolsets:
        if not isinstance(toolset, pa_toolsets.FunctionToolset):
            raise AgentConversionError(
                label, f"its toolset {type(toolset).__name__} has no mapping (its tools are "
                "listed when a run starts: MCP servers, dynamic or wrapped toolsets)",
                "give the agent function tools (or a FunctionToolset); an MCP server's tools "
                "can be chainlab tools of their own: toolbox.add_mcp(...)")
        if getattr(toolset, "_instructions", None):
            raise AgentConversionError(label, f"its {type(toolset).__name__} has "
                                       "instructions", "put them in the agent's instructions")
        pairs += list(toolset.tools.items())
    found = unique_tools(pairs, label, "in the agent and its toolsets")
    for tool_name, tool in found.items():
        for feature, fix in (("prepare", "prepare the tool list before converting"),
                             ("args_validator", "validate in the tool's body"),
                             ("defer_loading", "leave defer_loading out")):
            if getattr(tool, feature, None):
                raise AgentConversionError(label, f"its tool {tool_name!r} has {feature}=, "
                                           "which has no mapping", fix)
        if not isinstance(tool, Tool):  # pragma: no cover - FunctionToolset holds Tools
            raise AgentConversionError(label, f"its tool {tool_name!r} is not a Tool", "")
    return found


def _sdk_contract(tool: Any) -> dict[str, Any]:
    """What the tool's own definition says of its contract."""
    return {"requires_confirmation": True if tool.requires_approval else None,
            "parallel_safe": False if tool.sequential else None,
            "timeout_s": tool.timeout}


def _refuse_unmapped(agent: Any, label: str) -> None:
    """Raise AgentConversionError for the first feature of ``agent`` with no mapping."""
    if agent._system_prompt_functions or agent._system_prompt_dynamic_functions:
        raise AgentConversionError(label, "its system prompts are made by functions "
                                   "(@agent.system_prompt), which need a live run",
                                   "give the text: Agent(system_prompt='...')")
    if any(not isinstance(i.instruction, str) for i in agent._instructions) \
            or agent._cap_instructions:
        raise AgentConversionError(label, "its instructions are made by functions or "
                                   "templates (they need a live run)",
                                   "give the text: Agent(instructions='...')")
    hosted = [t for t in agent._cap_native_tools if not getattr(t, "optional", False)]
    if hosted:
        raise AgentConversionError(
            label, f"its native tool {type(hosted[0]).__name__} runs inside the provider, "
            "where chainlab can neither record nor approve its calls",
            "leave it out, or write a function tool that does the same")
    extra = [c for c in agent._root_capability.capabilities
             if type(c) not in _default_capabilities()]
    if extra:
        raise AgentConversionError(label, f"its capability {type(extra[0]).__name__} has no "
                                   "mapping", "leave it out (chainlab's loop has limits, "
                                   "approvals and budgets of its own)")
    if agent._output_validators:
        raise AgentConversionError(label, "it has output validators (@agent.output_validator)",
                                   "check the answer in a step after the agent")
    if callable(agent.model_settings):
        raise AgentConversionError(label, "its model_settings are a function of the run",
                                   "give a dict")
    if list(agent._event_hooks._get("on_event")):
        raise AgentConversionError(label, "it has event listeners (@agent.on_event)",
                                   "subscribe to the chainlab run's events instead")
    if agent._validation_context is not None:
        raise AgentConversionError(label, "it has a validation_context", "leave it out")


_DEFAULTS: set[type] | None = None


def _default_capabilities() -> set[type]:
    """The capability types every Pydantic AI agent gets without asking."""
    global _DEFAULTS
    if _DEFAULTS is None:
        _DEFAULTS = {type(c) for c in pydantic_ai.Agent()._root_capability.capabilities}
    return _DEFAULTS


def _model(agent: Any, label: str) -> Any:
    model = agent.model
    if model is None:
        raise AgentConversionError(label, "it has no model (it is given per run)",
                                   "give the agent its model: Agent('openai:gpt-4o', ...)")
    if isinstance(model, str):
        try:
            return pa_models.infer_model(model)
        except Exception as exc:
            raise AgentConversionError(label, f"its model {model!r} cannot be made: "
                                       f"{type(exc).__name__}: {exc}",
                                       "check the model's name and its provider's key") \
                from None
    return model


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
