"""An OpenAI Agents SDK ``Agent`` converted to a chainlab :class:`~chainlab.Agent` (DESIGN §23):

    from agents import Agent as SDKAgent, function_tool
    from chainlab.integrations.openai_agents import from_openai_agents

    support = SDKAgent(name="support", instructions="...", model=model,
                       tools=[function_tool(lookup), function_tool(refund, needs_approval=True)],
                       handoffs=[billing])
    toolbox.add_agent(from_openai_agents(support, tools={"lookup": {"side_effects": False}}))

What comes over, unchanged: the instructions (a text), the function tools with their JSON
Schemas, the ``output_type`` (the output schema) and the model with its settings. The loop
is chainlab's (DESIGN §18): each model turn is a recorded attempt, asked through the SDK's
own :class:`agents.models.interface.Model` interface (:class:`OpenAIAgentsClient`: a
``Model`` object the agent holds, ``LitellmModel`` or a custom provider's included; a model
given by name is resolved by the SDK's default provider), each tool call a step
(``NAME.TOOL``) under every rule: ``needs_approval=True`` waits for a person bound to the
exact args; the rest of a tool's contract comes from ``tools={"TOOL": {...}}`` (or
``{"AGENT.TOOL": {...}}`` for one agent's tool among its handoffs'), else it is
side-effecting and not idempotent (never retried automatically, ``in_doubt`` after a
crash). A tool's ``timeout`` is its step's ``timeout_s``; a tool whose ``is_enabled`` is
False is left out, as the SDK hides it.

Mapped, not copied:

=====================  ====================================================================
the SDK's              chainlab's
=====================  ====================================================================
``handoffs=[agent]``   a sub-agent: the converted agent (``agent:NAME``) is a tool of this
                       one; the model asks it a request and reads its answer as the call's
                       result, then goes on (the conversation does not move over to it)
input guardrails       run before the agent's first model turn; output guardrails on its
                       final answer. Each verdict is recorded with its turn (``checks``), so
                       a resume or a replay does not run it again; a tripwire fails the
                       agent step with the guardrail's name and output (not retried)
a tool's errors        with the SDK's default ``failure_error_function`` an error fails the
                       call's step and the model reads it (chainlab's ``error: ...``); a
                       tool's own ``failure_error_function`` is kept (its text is the
                       call's output)
``context=``           a factory of the run context (``RunContextWrapper.context``), called
                       once per run in each process; a tool's ``ToolContext`` has the run's
                       context, ``tool_call_id`` the call's step id (``support/1.2``)
=====================  ====================================================================

Refused at conversion, naming the feature and what to do (nothing half-converts): an object
that is not an ``agents.Agent``; an SDK version outside the supported range; instructions or
a prompt made by a function (they need a live run); hosted tools (web and file search, code
interpreter, computer use, hosted MCP, image generation, shell: they run inside OpenAI,
where chainlab can neither record nor approve their calls); MCP servers; an agent used as a
tool (``agent.as_tool()``: a second runner); a ``Handoff`` object with callbacks or an
input filter (list the agent itself); tools with a ``needs_approval`` or ``is_enabled``
function, tool guardrails or ``defer_loading``; lifecycle ``hooks``; a ``tool_use_behavior``
other than ``run_llm_again``; a ``tool_choice`` other than ``auto``; handoffs in a circle;
two tools of one name; a tool whose schema chainlab's value gate refuses.
"""
from chainlab.integrations.openai_agents.convert import SUPPORTED, from_openai_agents
from chainlab.integrations.openai_agents.model import OpenAIAgentsClient

__all__ = ["SUPPORTED", "OpenAIAgentsClient", "from_openai_agents"]
