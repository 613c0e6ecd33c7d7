"""Agents written with other SDKs, converted to chainlab agents (DESIGN §23): converted, not
wrapped. Their instructions, tools, output type and model object become a
:class:`chainlab.Agent` whose loop is chainlab's (DESIGN §18), so every rule holds: each
model turn a recorded attempt (asked through the SDK's own model interface, so every
provider the SDK reaches works), each tool call a step.

- :mod:`.pydantic_ai`: :func:`~chainlab.integrations.pydantic_ai.from_pydantic_ai`
  (``pip install "chainlab[pydantic-ai]"``);
- :mod:`.openai_agents`: :func:`~chainlab.integrations.openai_agents.from_openai_agents`
  (``pip install "chainlab[openai-agents]"``);
- :func:`as_agent` and :func:`load_agent`: an object (or ``MODULE:OBJ``) that is a chainlab
  agent or an agent of one of those SDKs, as a chainlab agent: what ``chainlab agent --from
  MODULE:OBJ`` and ``%chain agent --from MODULE:OBJ`` ask, and what a later process asks
  again to find the agent of such a run (the run keeps ``MODULE:OBJ``, never the object).

Neither SDK is imported before an agent of it is converted: ``import chainlab`` loads
neither.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any

from chainlab._text import safe_repr
from chainlab.agent.definition import Agent
from chainlab.errors import AgentConversionError, UsageError

__all__ = ["as_agent", "load_agent"]


def as_agent(obj: Any, *, name: str | None = None) -> Agent:
    """``obj`` as a chainlab agent: a :class:`chainlab.Agent` as it is (``name`` must then
    be None or its own), a Pydantic AI or OpenAI Agents SDK agent converted with its
    defaults (``name``: the chainlab agent's). Raises AgentConversionError for anything
    else, or for what cannot be converted."""
    if isinstance(obj, Agent):
        if name is not None and name != obj.name:
            raise AgentConversionError(repr(obj.name), f"it is a chainlab agent named "
                                       f"{obj.name!r}, not {name!r}", "leave the name out")
        return obj
    root = (type(obj).__module__ or "").split(".")[0]
    if root == "pydantic_ai":
        from chainlab.integrations.pydantic_ai import from_pydantic_ai

        return from_pydantic_ai(obj, name=name)
    if root == "agents":
        from chainlab.integrations.openai_agents import from_openai_agents

        return from_openai_agents(obj, name=name)
    raise AgentConversionError(safe_repr(obj), "it is not an agent chainlab can run",
                               "give a chainlab.Agent, a pydantic_ai.Agent or an OpenAI "
                               "Agents SDK agents.Agent")


def load_agent(ref: str, *, extra_paths: Iterable[str] = ()) -> Agent:
    """The agent ``MODULE:OBJ`` names (the module imported, from the current directory or
    ``extra_paths`` too; its attribute ``OBJ`` taken, a dotted path allowed), as a chainlab
    agent (:func:`as_agent`). The same object gives the same agent for the life of the
    process (a converted agent is made once). Raises UsageError naming the fix for a
    reference that does not resolve, AgentConversionError for an object that is not an agent
    chainlab can run."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--from {ref!r} is not MODULE:OBJ",
                         hint="for example --from shop_agents:support")
    for path in (os.getcwd(), *extra_paths):
        if path and path not in sys.path:
            sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--from {ref!r}: cannot import {module_name!r}: {exc}",
                         hint="run from the directory that holds the module, or put it "
                              "on PYTHONPATH") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"--from {ref!r}: {module_name!r} has no {attr!r}",
                             hint="name the agent object: MODULE:OBJ") from None
    known = _LOADED.get(ref)
    if known is not None and known[0] is obj:
        return known[1]
    agent = as_agent(obj)
    _LOADED[ref] = (obj, agent)
    return agent


#: MODULE:OBJ -> (the object, its chainlab agent): converted once per object and process
_LOADED: dict[str, tuple[Any, Agent]] = {}
