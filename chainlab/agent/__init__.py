"""Agent steps (DESIGN §18): a model that chooses tool calls turn by turn, as a step of a
chain, on the same kernel and under every rule a chain keeps.

- :mod:`.definition`: :class:`Agent` (instructions, tools, model endpoint, limits), registered
  with ``toolbox.add_agent(agent)`` as the tool ``agent:NAME`` (:class:`AgentTool`), and
  :func:`one_step_chain`, the chain the front ends run to ask one agent one request;
- :mod:`.model`: one model turn's request and answer, and the :class:`ModelClient` seam;
- :mod:`.conversation`: the conversation rebuilt from a run's recorded turns, the tools as
  functions, each call checked before it becomes a step;
- :mod:`.turns`: an agent step's turns as its run recorded them, the read side every view
  and front end uses (the transcript, the turns a drawing lays out, the tools of the calls);
- :mod:`.endpoint` and :mod:`.modes`: the endpoint's configuration and the negotiation of
  structured output, shared with the planner;
- :mod:`.openai`: the client over the ``openai`` package (the only module here importing
  it, loaded when an agent first asks its model);
- :mod:`.adhoc`: the front ends' ad-hoc agent (``chainlab agent "REQUEST"``, ``%chain
  agent``) and the definition a run keeps of it.

The runtime runs an agent step (``chainlab.runtime.engine.attempt.agent``); this package
imports nothing of the runtime.
"""

from chainlab.agent.definition import Agent, AgentTool, one_step_chain
from chainlab.agent.model import ModelCall, ModelClient, ModelRequest, ModelTurn

__all__ = ["Agent", "AgentTool", "ModelCall", "ModelClient", "ModelRequest", "ModelTurn",
           "one_step_chain"]
