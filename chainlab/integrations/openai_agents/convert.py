"""The conversion of an OpenAI Agents SDK agent (:func:`from_openai_agents`; the module
docstring of :mod:`chainlab.integrations.openai_agents` says what maps to what): what is
refused, the handoffs converted as sub-agents, the tools (each a
:class:`~chainlab.integrations._convert.ConvertedTool` whose body is the SDK's own
invocation of the tool, with a ToolContext), the agent put together."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from chainlab._text import did_you_mean, safe_repr
from chainlab.agent.definition import Agent
from chainlab.errors import AgentConversionError, MissingExtraError
from chainlab.integrations._convert import (
    ConvertedTool,
    PerRun,
    agent_name,
    check_version,
    contracts,
    own_compensation,
    unique_tools,
)
from chainlab.integrations.openai_agents.model import OpenAIAgentsClient, OutputSpec
from chainlab.tools import CallContext

try:
    import agents
    from agents import FunctionTool, ModelSettings
    from agents.models.interface import Model
    from agents.tool import (
        default_tool_error_function,
        resolve_function_tool_failure_error_function,
        set_function_tool_failure_error_function,
    )
    from agents.tool_context import ToolContext
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - the extra is installed in dev
    raise MissingExtraError("openai-agents", "openai-agents",
                            "converting an OpenAI Agents SDK agent") from exc

__all__ = ["SUPPORTED", "from_openai_agents"]

#: the OpenAI Agents SDK versions chainlab converts agents of: [low, high)
SUPPORTED = ((0, 25), (0, 26))


def from_openai_agents(agent: Any, *, name: str | None = None,
                       tools: Mapping[str, Mapping[str, Any]] | None = None,
                       context: Callable[[], Any] | None = None) -> Agent:
    """The OpenAI Agents SDK ``agent`` as a chainlab :class:`~chainlab.Agent` (see the module
    docstring), its handoffs converted with it as sub-agents: register it with
    ``toolbox.add_agent(...)`` (which registers them too) and run it as ``tool:
    agent:NAME``. ``name``: its name (default: the agent's, made a step id, e.g. ``"Refund
    agent"`` -> ``refund_agent``); ``tools``: the side-effect contract of its tools (and
    its handoffs') by name; ``context``: a factory of the run context its tools and
    guardrails read (called once per run). Raises AgentConversionError naming what cannot
    be converted (nothing is converted then)."""
    if not isinstance(agent, agents.Agent):
        raise AgentConversionError(
            safe_repr(agent), "it is not an OpenAI Agents SDK Agent", "pass an agents.Agent "
            "(for a Pydantic AI agent: chainlab.integrations.pydantic_ai.from_pydantic_ai)")
    check_version("the OpenAI Agents SDK", agents.__version__, *SUPPORTED, "openai-agents")
    made = PerRun(context, "context", f"{agent.name!r} (OpenAI Agents SDK)")
    conversion = _Conversion(tools or {}, made)
    converted = conversion.convert(agent, name, ())
    conversion.check_spec()
    return converted


class _Conversion:
    """One conversion: the agents converted so far by name (handoffs may share one), the
    ``tools=`` contracts and which of them were used."""

    def __init__(self, spec: Mapping[str, Any], context: PerRun):
        if not isinstance(spec, Mapping):
            raise AgentConversionError("(OpenAI Agents SDK)", f"tools={safe_repr(spec)} is "
                                       "not a mapping", 'pass tools={"TOOL": {...}}')
        self.spec = spec
        self.context = context
        self.done: dict[str, tuple[Any, Agent]] = {}
        self.used: set[str] = set()
        self.tool_names: list[str] = []

    def convert(self, sdk: Any, name: str | None, path: tuple[str, ...]) -> Agent:
        chainlab_name = agent_name(name, sdk.name, f"{sdk.name!r} (OpenAI Agents SDK)")
        label = f"{chainlab_name!r} (OpenAI Agents SDK)"
        if chainlab_name in path:
            raise AgentConversionError(
                label, f"its handoffs go round in a circle ({' -> '.join((*path, chainlab_name))}):"
                " a chainlab sub-agent is a tool of its parent, and an agent may not call "
                "itself", "remove the handoff back (the parent reads the sub-agent's answer "
                "and goes on itself)")
        if chainlab_name in self.done:
            other, converted = self.done[chainlab_name]
            if other is not sdk:
                raise AgentConversionError(label, "two different agents of its handoffs are "
                                           f"named {chainlab_name!r}", "give them other names")
            return converted
        _refuse_unmapped(sdk, label)
        subs = [self.convert(target, None, (*path, chainlab_name)) for target in sdk.handoffs]
        found = _function_tools(sdk, label)
        self.tool_names += [*found, *(f"{chainlab_name}.{n}" for n in found)]
        own_spec = {}
        for tool_name in found:
            for key in (f"{chainlab_name}.{tool_name}", tool_name):
                if key in self.spec:
                    own_spec[tool_name] = self.spec[key]
                    self.used.add(key)
                    break
        contract = contracts(own_spec, {n: _sdk_contract(t) for n, t in found.items()}, {},
                             label)
        names = {n: f"{chainlab_name}.{n}" for n in found}
        own: list[Any] = [ConvertedTool(_call(t, self.context, sdk, names[n]), name=names[n],
                                        description=t.description or "",
                                        input_schema=t.params_json_schema,
                                        function=_wrapped(t),
                                        origin=f"OpenAI Agents SDK agent {chainlab_name!r}",
                                        label=label,
                                        **own_compensation(contract[n], names))
                          for n, t in found.items()]
        output = OutputSpec.of(sdk, label)
        model = _model(sdk, label)  # (a name: made by the SDK when first asked)
        settings = sdk.model_settings or ModelSettings()
        client = OpenAIAgentsClient(model, sdk, instructions=sdk.instructions,
                                    tools={t.name: t for t in found.values()}, output=output,
                                    settings=settings, context=self.context)
        converted = Agent(chainlab_name, sdk.instructions or f"(the OpenAI Agents SDK agent "
                          f"{chainlab_name!r} has no instructions)",
                          own_tools=[*own, *subs], model=client.model_name,
                          base_url=client.base_url,
                          output_schema=output.schema if output else None,
                          temperature=settings.temperature, max_tokens=settings.max_tokens,
                          client=client, description=sdk.handoff_description)
        self.done[chainlab_name] = (sdk, converted)
        return converted

    def check_spec(self) -> None:
        unknown = [key for key in self.spec if key not in self.used]
        if unknown:
            raise AgentConversionError(
                "(OpenAI Agents SDK)", f"tools={{...}} describes {unknown[0]!r}, which no "
                f"converted agent has a tool of{did_you_mean(str(unknown[0]), self.tool_names)}",
                "describe the tools by their names (or AGENT.TOOL)")


# --------------------------------------------------------------------------- tools


def _call(tool: Any, context: PerRun, agent: Any, name: str) -> Any:
    """The body of the converted tool ``name``: the SDK's own invocation of the tool, with
    a ToolContext; an error the SDK's default handler would turn into text is raised (the
    call's step fails and the model reads it)."""
    if resolve_function_tool_failure_error_function(tool) is default_tool_error_function:
        import copy

        tool = copy.copy(tool)  # (the agent's own tool is left as it is)
        set_function_tool_failure_error_function(tool, None)

    async def call(call: CallContext, args: dict[str, Any]) -> Any:
        arguments = json.dumps(args)
        tool_context = ToolContext(context.get(call.run_id, name), tool_name=tool.name,
                                   tool_call_id=call.step_id, tool_arguments=arguments,
                                   agent=agent)
        result = await tool.on_invoke_tool(tool_context, arguments)
        return to_jsonable_python(result)
    return call


def _function_tools(agent: Any, label: str) -> dict[str, Any]:
    pairs: list[tuple[str, Any]] = []
    for tool in agent.tools:
        if not isinstance(tool, FunctionTool):
            raise AgentConversionError(
                label, f"its tool {type(tool).__name__} is hosted: it runs inside OpenAI, "
                "where chainlab can neither record nor approve its calls",
                "leave it out, or write a function tool that does the same")
        if getattr(tool, "_is_agent_tool", False) or getattr(tool, "_is_codex_tool", False):
            raise AgentConversionError(
                label, f"its tool {tool.name!r} is an agent run as a tool (agent.as_tool()), "
                "which would start a second runner", "list that agent in handoffs= (it "
                "becomes a sub-agent), or convert it and name agent:NAME in a chainlab.Agent")
        for feature, bad, fix in (
                ("needs_approval as a function", callable(tool.needs_approval),
                 f'say when in tools={{"{tool.name}": {{"requires_confirmation": '
                 '<a callable on the args>}}'),
                ("is_enabled as a function", callable(tool.is_enabled), "give a bool"),
                ("tool input guardrails", bool(tool.tool_input_guardrails),
                 "check the args in the tool's body"),
                ("tool output guardrails", bool(tool.tool_output_guardrails),
                 "check the output in the tool's body"),
                ("defer_loading", bool(tool.defer_loading), "leave defer_loading out")):
            if bad:
                raise AgentConversionError(label, f"its tool {tool.name!r} has {feature}, "
                                           "which has no mapping", fix)
        if tool.is_enabled is False:
            continue  # (the SDK hides it from the model: so does chainlab)
        pairs.append((tool.name, tool))
    return unique_tools(pairs, label, "among its tools")


def _sdk_contract(tool: Any) -> dict[str, Any]:
    return {"requires_confirmation": True if tool.needs_approval is True else None,
            "timeout_s": tool.timeout_seconds}


def _wrapped(tool: Any) -> Any:
    """The function behind a @function_tool (its code fingerprint), or None."""
    found = getattr(tool, "__wrapped__", None)
    return found if callable(found) else None


def _refuse_unmapped(agent: Any, label: str) -> None:
    """Raise AgentConversionError for the first feature of ``agent`` with no mapping."""
    if callable(agent.instructions):
        raise AgentConversionError(label, "its instructions are made by a function (it needs "
                                   "a live run context)", "give the text: instructions='...'")
    if agent.prompt is not None:
        raise AgentConversionError(label, "it has a prompt (a stored prompt of the Responses "
                                   "API)", "give its text as instructions")
    if agent.mcp_servers:
        raise AgentConversionError(label, "it has MCP servers (their tools are listed when a "
                                   "run starts)", "make them chainlab tools of their own: "
                                   "toolbox.add_mcp(...)")
    if agent.hooks is not None:
        raise AgentConversionError(label, "it has lifecycle hooks", "subscribe to the chainlab "
                                   "run's events (run.events()) instead")
    if agent.tool_use_behavior != "run_llm_again":
        raise AgentConversionError(label, f"its tool_use_behavior "
                                   f"{safe_repr(agent.tool_use_behavior)} ends the run at a "
                                   "tool's output", "leave the default, run_llm_again")
    choice = agent.model_settings.tool_choice if agent.model_settings else None
    if choice not in (None, "auto"):
        raise AgentConversionError(label, f"its model_settings.tool_choice={choice!r} (the "
                                   "SDK resets it after a call; chainlab asks the same every "
                                   "turn)", "leave tool_choice out")
    for handoff in agent.handoffs:
        if not isinstance(handoff, agents.Agent):
            raise AgentConversionError(label, f"its handoff {safe_repr(handoff)} is a Handoff "
                                       "object (callbacks, an input filter or input type have "
                                       "no mapping)", "list the agent itself in handoffs=")


def _model(agent: Any, label: str) -> Any:
    """The agent's ``Model``, or its model's name (None: the SDK's default model)."""
    model = agent.model
    if model is None or isinstance(model, str | Model):
        return model
    raise AgentConversionError(label, f"its model {safe_repr(model)} is neither a Model nor "
                               "a name", "give a Model object (e.g. "
                               "OpenAIChatCompletionsModel, LitellmModel) or a model's name")


