"""A Pydantic AI ``Agent`` converted to a chainlab :class:`~chainlab.Agent` (DESIGN §23):

    from pydantic_ai import Agent as PydanticAgent
    from chainlab.integrations.pydantic_ai import from_pydantic_ai

    support = PydanticAgent("openai:gpt-4o-mini", name="support", instructions="...")

    @support.tool_plain(requires_approval=True)
    def refund(order_id: int, amount: float) -> str: ...

    toolbox.add_agent(from_pydantic_ai(support, tools={"lookup": {"side_effects": False}}))

What comes over, unchanged: the instructions and static system prompts, the function tools
(the agent's own and those of its ``FunctionToolset`` s) with their JSON Schemas, the
``output_type`` (the output schema) and the model object with its settings. The loop is
chainlab's (DESIGN §18): each model turn is a recorded attempt, asked through the agent's
OWN model object (:class:`PydanticAIClient`, through ``pydantic_ai.direct.model_request``:
every provider Pydantic AI reaches), and each tool call is a step (``NAME.TOOL``) under
every rule. A tool with ``requires_approval=True`` waits for a person bound to the exact
args; the rest of a tool's contract comes from ``tools={"TOOL": {...}}``, else its
``metadata={"chainlab": {...}}``, else it is side-effecting and not idempotent (never
retried automatically, ``in_doubt`` after a crash). ``sequential=True`` makes the tool's
calls never overlap (``parallel_safe=False``); its ``timeout`` is the step's ``timeout_s``.

A tool that takes ``RunContext`` gets one: ``deps`` from the ``deps=`` factory (called once
per run in each process), ``run_id`` the chainlab run's, ``tool_call_id`` the call's step
id (``support/1.2``: stable across retries and restarts), ``retry`` the attempts before
this one, ``tool_name``, ``model`` the agent's model. A ``ModelRetry`` a tool raises goes
back to the model as the call's error (the call's step fails; it is not retried).

Refused at conversion, naming the feature and what to do (nothing half-converts): an object
that is not a ``pydantic_ai.Agent``; a Pydantic AI version outside the supported range; an
agent without a model; instructions or system prompts made by functions (they need a live
run); toolsets other than ``FunctionToolset`` (MCP servers, dynamic toolsets); a tool with
``prepare``, ``args_validator`` or ``defer_loading``; native (provider-hosted) tools;
capabilities beyond the ones every agent has; output validators, output functions and
several output types; a ``deps_type`` without ``deps=``; two tools of one name; a tool
whose schema chainlab's value gate refuses. The original agent is not modified: it still
runs natively (``agent.run_sync(...)``).
"""
from chainlab.integrations.pydantic_ai.convert import SUPPORTED, from_pydantic_ai
from chainlab.integrations.pydantic_ai.model import PydanticAIClient

__all__ = ["SUPPORTED", "PydanticAIClient", "from_pydantic_ai"]
