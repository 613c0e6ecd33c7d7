"""An :class:`Agent`: a model that chooses tool calls turn by turn, as a step of a chain.

    support = Agent("support", "You help customers with their orders.",
                    tools=["lookup_order", "refund", "chain:escalate", "agent:billing"],
                    max_turns=8)
    toolbox.add_agent(support)
    # a chain step:   - {id: help, tool: "agent:support", args: {request: "{{ context.ask }}"}}

Registered in a toolbox it is the tool ``agent:NAME`` (an :class:`AgentTool`: its args are
``request`` and, optionally, raised limits; its output is the model's final answer), which
the runtime runs as an agent step (DESIGN §18). Its ``tools`` name tools of the toolbox,
sub-chains (``chain:NAME``) and other agents (``agent:NAME``); plan validation reports a
name the toolbox does not have, and agents that call each other in a circle.

The model is any OpenAI-compatible endpoint (``model``, ``base_url``, ``api_key``, defaulting
to ``OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, as the planner's), asked
through ``client`` (default: :class:`chainlab.agent.openai.OpenAIClient`, made on first use).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from chainlab._json import NotJSONError, to_json_value
from chainlab._text import did_you_mean, safe_repr
from chainlab.agent.conversation import Offer, function_names
from chainlab.agent.endpoint import Endpoint
from chainlab.agent.modes import json_text
from chainlab.errors import InputError, MissingExtraError, ToolDefinitionError
from chainlab.plan.inputs import fit_args, inputs_json_schema
from chainlab.plan.parts import AGENT_PREFIX, STEP_ID_PATTERN, RetryPolicy
from chainlab.tools.contract import Tool
from chainlab.tools.schema_tool import schema_fingerprint

if TYPE_CHECKING:
    from chainlab.agent.model import ModelClient
    from chainlab.plan.schema import Chain
    from chainlab.tools import Toolbox

__all__ = ["LIMIT_ARGS", "MODEL_RETRY", "Agent", "AgentTool", "one_step_chain"]

#: how a model turn that failed (server down, busy, slow) is asked again by default
MODEL_RETRY = RetryPolicy(max_attempts=3, backoff="exponential", delay_s=1.0,
                          retry_on=("transient", "timeout"))  # type: ignore[arg-type]
_LIMIT = Annotated[int, Field(ge=1, le=10_000)]
#: an agent step's args that raise its limits: a person's to set (approving the step with
#: them), never a model's: a sub-agent is offered to a model without them
LIMIT_ARGS = ("max_turns", "max_calls_per_turn")


def one_step_chain(name: str) -> Chain:
    """The chain that ``chainlab agent NAME "REQUEST"`` and ``%chain agent NAME "REQUEST"``
    run: one step whose tool is the agent ``agent:NAME``, asked the run's
    ``context.request`` (the request is a value of the context, so it is taken as written,
    never as a template). The step's id is the agent's name (``agent`` when the name is not
    a step id). The front ends start it like any chain, through the one runtime."""
    from chainlab.plan.schema import Chain

    step_id = name if len(name) <= 100 and re.fullmatch(STEP_ID_PATTERN, name) else "agent"
    return Chain.from_dict({
        "name": f"agent-{step_id}",
        "description": f"the agent {name!r} asked one request",
        "inputs": {"request": {"type": "string", "description": "what the agent is asked"}},
        "steps": [{"id": step_id, "tool": AGENT_PREFIX + name,
                   "args": {"request": "{{ context.request }}"}}]})


class Agent:
    """A model that chooses tool calls turn by turn (see the module docstring).

    ``max_turns``: model turns before the step waits for a person (raise it and go on, or
    stop); ``max_calls_per_turn``: calls past it in one turn are refused to the model;
    ``output_schema``: the final answer must be JSON following it (a JSON Schema dict or a
    pydantic model class), else it is sent back once or twice, then the step fails;
    ``stream``: ask for streamed answers; ``timeout_s``: one model request's timeout;
    ``client``: the :class:`~chainlab.agent.model.ModelClient` to ask instead of the
    endpoint; ``own_tools``: tools and sub-agents the agent brings with it (an agent converted
    from another SDK, :mod:`chainlab.integrations`): ``toolbox.add_agent(agent)`` registers
    them too, and the agent offers each after its ``tools``; a tool named
    ``NAME.FUNCTION`` (this agent's name, a dot) is offered to the model as ``FUNCTION``.
    Raises ToolDefinitionError naming a bad setting.
    """

    def __init__(self, name: str, instructions: str, tools: Sequence[str] = (), *,
                 model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, max_turns: int = 10,
                 output_schema: dict[str, Any] | type[BaseModel] | None = None,
                 temperature: float | None = None, max_calls_per_turn: int = 16,
                 description: str | None = None, stream: bool = False,
                 timeout_s: float = 60.0, client: ModelClient | None = None,
                 max_tokens: int | None = None, own_tools: Sequence[Tool | Agent] = ()):
        if not isinstance(instructions, str) or not instructions.strip():
            raise ToolDefinitionError(f"agent {name!r}: instructions must be a non-empty text")
        if isinstance(tools, str):
            raise ToolDefinitionError(f"agent {name!r}: tools must be a list of names, got "
                                      f"the text {tools!r}")
        self.own_tools = tuple(own_tools)
        self.tools = [str(t) for t in tools] + [_own_name(t, name) for t in self.own_tools]
        dupes = sorted({t for t in self.tools if self.tools.count(t) > 1})
        if dupes:
            raise ToolDefinitionError(f"agent {name!r}: tools {dupes} are named twice")
        for what, value in (("max_turns", max_turns), ("max_calls_per_turn", max_calls_per_turn)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise ToolDefinitionError(f"agent {name!r}: {what} must be an int from 1 to "
                                          f"10000, got {safe_repr(value)}")
        if temperature is not None and not (isinstance(temperature, int | float)
                                            and 0 <= temperature <= 2):
            raise ToolDefinitionError(f"agent {name!r}: temperature must be a number from 0 "
                                      f"to 2, got {safe_repr(temperature)}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(
                max_tokens, int) or not 1 <= max_tokens <= 1_000_000):
            raise ToolDefinitionError(f"agent {name!r}: max_tokens must be an int from 1 to "
                                      f"1000000 (the most one answer may take), got "
                                      f"{safe_repr(max_tokens)}")
        self.name = name
        self.instructions = instructions
        self.description = (description or instructions.strip().splitlines()[0])[:500]
        self.max_turns = max_turns
        self.max_calls_per_turn = max_calls_per_turn
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.stream = stream
        self.endpoint = Endpoint.configure(model, base_url, api_key, timeout=timeout_s,
                                           max_retries=0)  # the step's retry asks again
        self.output_json_schema, self._check_output = _output_checker(output_schema, name)
        self._client = client
        self._offers: tuple[tuple[int, ...], dict[str, Offer]] | None = None
        self.tool = AgentTool(self)

    def __repr__(self) -> str:
        asks = f"model {self.endpoint.model!r} at {self.endpoint.host}" if self._client is None \
            else f"asks {self._client.endpoint}"  # (a converted agent's: its SDK's model)
        return f"<Agent {self.name!r}: {len(self.tools)} tools, {asks}>"

    @property
    def client(self) -> ModelClient:
        """What the agent asks (made on first use from the endpoint)."""
        client = self._client
        if client is None:
            from chainlab.agent.openai import OpenAIClient

            client = self._client = OpenAIClient(self.endpoint, stream=self.stream)
        return client

    async def aclose(self) -> None:
        """Close the agent's connection to its model (its client's ``aclose``, when it has
        one: the ``openai`` client kept per endpoint and event loop); the next turn opens
        one again. A Runtime's ``aclose`` calls it through its toolbox."""
        close = getattr(self._client, "aclose", None)
        if close is not None:
            await close()

    def with_client(self, client: ModelClient) -> Agent:
        """A copy of this agent that asks ``client`` (a replay's recorded model, a test's)."""
        twin = copy.copy(self)
        twin._client = client
        twin.tool = AgentTool(twin, fingerprint=self.tool.fingerprint)
        return twin

    # ------------------------------------------------------------------ the model's side
    def offers(self, toolbox: Toolbox, chains: Mapping[str, Chain]) -> dict[str, Offer]:
        """The tools offered to the model, by function name (made again only when one of
        the tools or sub-chains it names is another object: a tool redefined in a notebook).
        Raises KeyError for a name the toolbox does not have (validation reports it
        first)."""
        key = tuple(id(chains[name[len("chain:"):]] if name.startswith("chain:")
                       else toolbox.get(name)) for name in self.tools)
        if self._offers is not None and self._offers[0] == key:
            return self._offers[1]
        out = self._make_offers(toolbox, chains)
        self._offers = (key, out)
        return out

    def _make_offers(self, toolbox: Toolbox, chains: Mapping[str, Chain]) -> dict[str, Offer]:
        out: dict[str, Offer] = {}
        prefix = self.name + "."
        given = {t.name: t.name[len(prefix):] for t in self.own_tools
                 if isinstance(t, Tool) and t.name.startswith(prefix)}
        for function, name in function_names(self.tools, given).items():
            if name.startswith("chain:"):
                chain = chains[name[len("chain:"):]]
                params = inputs_json_schema(chain) or {"type": "object",
                                                       "additionalProperties": True}
                out[function] = Offer(name, function, chain.description or f"run {name}",
                                      params, _chain_check(chain))
            else:
                tool = toolbox.get(name)
                out[function] = Offer(name, function, tool.description or name,
                                      _parameters(tool), _tool_check(tool))
        return out

    def check_answer(self, text: str | None) -> Any:
        """The final answer as the step's output: the text, or the JSON it holds checked
        against ``output_schema``. Raises ValueError saying what to fix (for the model)."""
        if self._check_output is None:
            if not text or not text.strip():
                raise ValueError("the answer was empty: answer the request, or call a tool")
            try:  # the value gate, as for every value that enters (DESIGN §20)
                return to_json_value(text, "answer")
            except NotJSONError as exc:
                raise ValueError(f"the answer cannot be taken: {exc}") from None
        try:
            value = json.loads(json_text(text or ""))
        except ValueError as exc:
            raise ValueError(f"the answer is not JSON ({exc}): answer with ONE JSON object "
                             "following the schema") from None
        try:
            value = to_json_value(value, "answer")
        except NotJSONError as exc:
            raise ValueError(f"the answer cannot be taken: {exc}") from None
        return self._check_output(value)

    # ------------------------------------------------------------------ validation
    def problems(self, toolbox: Toolbox, chains: Mapping[str, Chain],
                 seen: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        """What is wrong with this agent's tools in ``toolbox``: ``(code, message)`` for an
        unknown tool, sub-chain or agent, and for agents that call each other in a circle."""
        if self.name in seen:
            circle = " -> ".join((*seen, self.name))
            return [("recursive_chain", f"agent recursion {circle}: an agent may not call "
                     "itself through its tools")]
        out: list[tuple[str, str]] = []
        path = (*seen, self.name)
        for name in self.tools:
            if name.startswith("chain:"):
                sub = name[len("chain:"):]
                if sub not in chains:
                    out.append(("unknown_tool", f"agent {self.name!r} names unknown sub-chain "
                                f"{sub!r}{did_you_mean(sub, chains)}; register it with "
                                "toolbox.add_chain(chain) or fix the agent's tools"))
            elif name not in toolbox:
                out.append(("unknown_tool", f"agent {self.name!r} names unknown tool {name!r}"
                            f"{did_you_mean(name, toolbox.names())}; register it in toolbox "
                            f"{toolbox.name!r} or fix the agent's tools"))
            else:  # a sub-agent's own tools (and a circle back to one of these agents)
                out += [(code, message) for code, message, _ in
                        toolbox.get(name).fit_findings(toolbox, chains, path)]
        return out


class AgentTool(Tool):
    """An agent as the tool ``agent:NAME``: its args are ``request`` (and optionally raised
    ``max_turns`` / ``max_calls_per_turn``, :data:`LIMIT_ARGS`: a chain's author or a person
    approving the step sets them; a model calling it as a sub-agent is not offered them,
    and its call that passes one is refused to it); the runtime runs it as an agent step (kind
    ``agent``); its code fingerprint covers the instructions, tools, model and limits."""

    kind = "agent"
    __slots__ = ("agent",)

    def __init__(self, agent: Agent, fingerprint: str | None = None):
        def run_agent(request: str, max_turns: _LIMIT | None = None,
                      max_calls_per_turn: _LIMIT | None = None) -> Any:
            raise ToolDefinitionError(f"agent {agent.name!r} runs as a step of a chain "
                                      f"(tool: agent:{agent.name}), not as a function")

        super().__init__(run_agent, name=agent.name, description=agent.description,
                         retry=MODEL_RETRY)
        self.name = AGENT_PREFIX + agent.name
        self.agent = agent
        self.fingerprint = fingerprint or schema_fingerprint(
            agent.instructions, agent.tools, agent.endpoint.model, agent.output_json_schema,
            agent.temperature, agent.max_turns, agent.max_calls_per_turn,
            *(() if agent.max_tokens is None else (agent.max_tokens,)))  # (as before without)

    def output_schema(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.agent.output_json_schema) or {"type": "string"}

    async def aclose(self) -> None:
        """Close the agent's connection to its model (:meth:`Agent.aclose`)."""
        await self.agent.aclose()

    def fit_findings(self, toolbox: Toolbox, chains: Mapping[str, Chain],
                     seen: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
        return [(code, message, "tool")
                for code, message in self.agent.problems(toolbox, chains, seen)]

    def __repr__(self) -> str:
        return f"<AgentTool {self.name}>"


def _own_name(tool: Any, agent: str) -> str:
    """The toolbox name of a tool or sub-agent an agent brings (``own_tools``)."""
    if isinstance(tool, Agent):
        return tool.tool.name
    if isinstance(tool, Tool) and not isinstance(tool, AgentTool):
        return tool.name
    raise ToolDefinitionError(f"agent {agent!r}: own_tools takes Tool and Agent objects, got "
                              f"{safe_repr(tool)}")


def _parameters(tool: Tool) -> dict[str, Any]:
    """What a model sees of ``tool``'s args (a sub-agent's without its limits)."""
    schema = tool.input_schema()
    schema.pop("title", None)
    if isinstance(tool, AgentTool):
        for key in LIMIT_ARGS:
            schema.get("properties", {}).pop(key, None)
    return schema


def _tool_check(tool: Tool) -> Any:
    limits = LIMIT_ARGS if isinstance(tool, AgentTool) else ()

    def check(args: dict[str, Any]) -> dict[str, Any]:
        raised = [key for key in limits if key in args]
        if raised:  # refused, not dropped: the model learns why, and nothing runs unasked
            raise ValueError(
                f"{raised[0]} is the agent's own limit, which only a person raises (its "
                "step waits for one when it reaches it): call it with its request only")
        try:
            tool.validate_args(args)
        except ValidationError as exc:
            raise ValueError(_errors(exc)) from None
        return args
    return check


def _chain_check(chain: Chain) -> Any:
    def check(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return fit_args(chain, args)
        except InputError as exc:
            raise ValueError("; ".join(p.message for p in exc.problems)) from None
    return check


def _errors(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    parts = [f"{'.'.join(str(x) for x in e['loc']) or 'args'}: {e['msg']}" for e in errors[:4]]
    return "; ".join(parts) + (f" (+{len(errors) - 4} more)" if len(errors) > 4 else "")


def _output_checker(schema: Any, name: str) -> tuple[dict[str, Any] | None, Any]:
    """(the output's JSON Schema, a checker of a parsed answer) for an ``output_schema``."""
    if schema is None:
        return None, None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        model = schema

        def check_model(value: Any) -> Any:
            try:
                return model.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                raise ValueError(f"the answer does not fit the schema: {_errors(exc)}") \
                    from None
        return model.model_json_schema(), check_model
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"agent {name!r}: output_schema must be a JSON Schema (a "
                                  f"dict) or a pydantic model class, got {safe_repr(schema)}")
    try:
        import jsonschema
    except ImportError:
        raise MissingExtraError("jsonschema", "llm", "an agent's output_schema") from None
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolDefinitionError(f"agent {name!r}: output_schema is not a valid JSON Schema: "
                                  f"{exc.message}") from None
    validator = cls(schema)

    def check_schema(value: Any) -> Any:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "the top"
            raise ValueError(f"the answer does not fit the schema at {where}: "
                             f"{errors[0].message}")
        return value
    return dict(schema), check_schema
