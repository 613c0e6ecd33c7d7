"""Asking an agent one request from a front end (``chainlab agent``, ``%chain agent``), and
the ad-hoc agent a run keeps in its meta.

:func:`agent_request` is what both front ends call: ``NAME "REQUEST"`` asks the agent
registered as ``agent:NAME``; ``"REQUEST"`` alone asks an **ad-hoc agent** made here
(:func:`adhoc_agent`): named ``assistant`` unless told otherwise, with short default
instructions, offered every plain tool of the toolbox (not its agents, not a tool that is
another tool's compensation: undoing is the saga's, never the model's choice), and the model
and server given (else ``OPENAI_MODEL`` / ``OPENAI_BASE_URL``).

The ad-hoc agent's definition (name, instructions, tools, model, base URL; never an API key,
which every process reads from ``OPENAI_API_KEY``) is kept in the run's meta under
:data:`~chainlab.store.base.ADHOC_META`. :func:`run_toolbox` gives it back: the runtime's one
place that finds a run's toolbox (``chainlab.runtime.preparing.toolbox_of``) calls it for a
run that keeps one, wherever it compiles a stored run (a resume in another process, a
worker's claim, a takeover by the HTTP service or a notebook, a fork), so a run's agent is
found by every process that continues the run with the same toolbox. This module is the
front ends' (the runtime loads it only for such a run).

``--from MODULE:OBJ`` asks the agent that object is: a :class:`Agent`, or an agent written
with Pydantic AI or the OpenAI Agents SDK, converted (:func:`chainlab.integrations.as_agent`,
loaded on demand: the one upward hook of this layer). The run keeps ``MODULE:OBJ`` under
:data:`~chainlab.store.base.FROM_META` (never the object, never a key), and
:func:`run_toolbox` imports it again in a later process.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from chainlab._json import scalar_problem
from chainlab._text import safe_repr
from chainlab.agent.definition import Agent, AgentTool, one_step_chain
from chainlab.agent.endpoint import Endpoint, check_base_url
from chainlab.errors import AgentConversionError, UsageError
from chainlab.plan.parts import AGENT_PREFIX, STEP_ID_PATTERN
from chainlab.store.base import ADHOC_META, FROM_META

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain
    from chainlab.tools import Toolbox

__all__ = ["DEFAULT_INSTRUCTIONS", "DEFAULT_NAME", "AdhocAgent", "AgentRequest", "adhoc_agent",
           "agent_from", "agent_request", "run_toolbox"]
#: an ad-hoc agent's name (and the one-step chain's step id) unless told otherwise
DEFAULT_NAME = "assistant"
#: an ad-hoc agent's instructions unless told otherwise
DEFAULT_INSTRUCTIONS = ("You carry out the user's request with the tools you are given. Look "
                        "things up before you act, call a tool only when it helps, and when "
                        "you are done answer briefly with what you did and found.")


@dataclass(frozen=True)
class AdhocAgent:
    """An ad-hoc agent's definition, as a run keeps it (:meth:`to_meta`): never an API key."""

    name: str
    instructions: str
    tools: tuple[str, ...]
    model: str | None
    base_url: str | None

    def to_meta(self) -> dict[str, Any]:
        """The definition as JSON data for the run's meta."""
        return {"name": self.name, "instructions": self.instructions,
                "tools": list(self.tools), "model": self.model, "base_url": self.base_url}

    @classmethod
    def from_meta(cls, data: Any, run_id: str | None = None) -> AdhocAgent:
        """The definition a run kept. Raises UsageError when it is not one (a meta edited
        by hand, or written by a newer chainlab)."""
        ok = (isinstance(data, Mapping) and isinstance(data.get("name"), str)
              and isinstance(data.get("instructions"), str)
              and isinstance(data.get("tools"), list)
              and all(isinstance(t, str) for t in data["tools"])
              and all(isinstance(data.get(k), str | None) for k in ("model", "base_url")))
        if not ok:
            where = f"run {run_id!r}" if run_id else "the run"
            raise UsageError(f"{where} keeps an ad-hoc agent this chainlab cannot read "
                             f"({safe_repr(data)})",
                             hint='start it again: chainlab agent "REQUEST" (or %chain agent)')
        assert isinstance(data, Mapping)
        return cls(data["name"], data["instructions"], tuple(data["tools"]), data["model"],
                   data["base_url"])

    def agent(self) -> Agent:
        """The :class:`Agent` (its key from ``OPENAI_API_KEY``, in the process asking); it
        streams its answers (the front ends show the text as it comes)."""
        return Agent(self.name, self.instructions, self.tools, model=self.model,
                     base_url=self.base_url, stream=True)


@dataclass(frozen=True)
class AgentRequest:
    """What a front end starts: ``chain`` (one step, the agent) with ``context``, ``meta``
    to keep with the run (the ad-hoc agent's definition, if any) and ``toolbox`` to validate
    it against (the front end's, with the ad-hoc agent)."""

    chain: Chain
    context: dict[str, Any]
    meta: dict[str, Any]
    toolbox: Toolbox
    agent: str


def agent_request(toolbox: Toolbox, name: str | None, request: str, *,
                  adhoc_name: str | None = None, instructions: str | None = None,
                  model: str | None = None, base_url: str | None = None,
                  source: str | None = None, command: str = "chainlab agent") -> AgentRequest:
    """The run that asks ``request`` of the registered agent ``name``, of the agent
    ``source`` (``--from MODULE:OBJ``: :func:`agent_from`) or, with neither, of an ad-hoc
    agent (:func:`adhoc_agent`, with ``adhoc_name``, ``instructions``, ``model`` and
    ``base_url``). Raises UsageError naming the fix (``command``: how the front end's hints
    spell it): an empty request, ad-hoc options given with a registered agent or with
    ``--from``, a bad ad-hoc agent, a ``MODULE:OBJ`` that is not an agent."""
    if not isinstance(request, str) or not request.strip():
        raise UsageError("the request is empty: say what the agent should do",
                         hint=f'for example: {command} "find order 7"')
    context = {"request": request}
    if source is not None:
        given = [flag for flag, value in (("NAME", name), ("--name", adhoc_name),
                                          ("--model", model), ("--base-url", base_url),
                                          ("--instructions", instructions)) if value]
        if given:
            raise UsageError(f"{', '.join(given)} and --from do not go together: the agent "
                             f"of --from {source} is the one its object defines",
                             hint=f'{command} --from {source} "REQUEST"')
        kept: dict[str, Any] = {FROM_META: source}
        box = run_toolbox(toolbox, kept)
        agent = agent_from(source)
        return AgentRequest(one_step_chain(agent.name), context, kept, box, agent.name)
    if name is None and AGENT_PREFIX + request.strip() in toolbox:  # a name, no request
        raise UsageError(f"{request.strip()!r} is a registered agent, and no request was "
                         "given", hint=f'{command} {request.strip()} "REQUEST"')
    if name is not None:
        given = [flag for flag, value in (("--name", adhoc_name), ("--model", model),
                                          ("--base-url", base_url),
                                          ("--instructions", instructions)) if value]
        if given and AGENT_PREFIX + name in toolbox:  # (an unknown NAME: validation says
            raise UsageError(                            # so, with a did-you-mean)
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for an ad-hoc "
                f"agent, but {name!r} is a registered one, whose model, server and "
                "instructions are its Agent's",
                hint=f"set them on Agent({name!r}, ...) (or OPENAI_MODEL / OPENAI_BASE_URL), "
                     f"or leave out {name!r} to ask an ad-hoc agent: "
                     f'{command} "REQUEST" {" ".join(given)} ...')
        return AgentRequest(one_step_chain(name), context, {}, toolbox, name)
    spec = adhoc_agent(toolbox, name=adhoc_name, instructions=instructions, model=model,
                       base_url=base_url, command=command)
    meta = {ADHOC_META: spec.to_meta()}
    return AgentRequest(one_step_chain(spec.name), context, meta, run_toolbox(toolbox, meta),
                        spec.name)


def adhoc_agent(toolbox: Toolbox, *, name: str | None = None, instructions: str | None = None,
                model: str | None = None, base_url: str | None = None,
                command: str = "chainlab agent") -> AdhocAgent:
    """An ad-hoc agent over ``toolbox``: every tool that is neither an agent nor another
    tool's compensation, ``model`` and ``base_url`` (else ``OPENAI_MODEL`` /
    ``OPENAI_BASE_URL``, resolved now and kept: a later process asks the same model).
    Raises UsageError naming the fix."""
    for flag, given in (("--name", name), ("--instructions", instructions),
                        ("--model", model), ("--base-url", base_url)):
        why = scalar_problem(given) if given is not None else None  # (the one value gate:
        if why is not None:  # the run keeps them, and a store refuses such text later)
            raise UsageError(f"{flag}: {why}", hint=f"pass {flag} as plain text")
    name = DEFAULT_NAME if name is None else name
    if len(name) > 100 or not re.fullmatch(STEP_ID_PATTERN, name):
        raise UsageError(f"--name {name!r}: the agent's name is its step's id, so it takes "
                         "letters, digits, '_' and '-' only (at most 100)",
                         hint=f"for example --name {DEFAULT_NAME}")
    if AGENT_PREFIX + name in toolbox:
        raise UsageError(f"toolbox {toolbox.name!r} has a registered agent {name!r}: an "
                         "ad-hoc agent may not take its name",
                         hint=f'ask it by name ({command} {name} "REQUEST"), or pass --name '
                              "with another name")
    if instructions is not None and not instructions.strip():
        raise UsageError("--instructions is empty", hint="leave it out for the default ones")
    if base_url is not None:
        _check_url(base_url)
    tools = _offered(toolbox)
    if not tools:
        raise UsageError(f"toolbox {toolbox.name!r} has no tool an ad-hoc agent can call "
                         "(agents and compensations are not offered)",
                         hint="register tools in it (@toolbox.tool), or pass --tools with "
                              "another toolbox")
    endpoint = Endpoint.configure(model, base_url)
    if not endpoint.model:
        raise UsageError("no model for the ad-hoc agent",
                         hint="pass --model M, or set OPENAI_MODEL")
    if endpoint.base_url is not None and base_url is None:
        _check_url(endpoint.base_url, "OPENAI_BASE_URL")
    problem = endpoint.not_configured()
    if problem is not None:
        raise UsageError(f"the ad-hoc agent cannot reach a model: {problem}",
                         hint="pass --base-url URL for an OpenAI-compatible server")
    return AdhocAgent(name, instructions or DEFAULT_INSTRUCTIONS, tools, endpoint.model,
                      endpoint.base_url)


def run_toolbox(toolbox: Toolbox, meta: Mapping[str, Any], run_id: str | None = None
                ) -> Toolbox:
    """The toolbox a run with ``meta`` is compiled against: ``toolbox`` itself, or, when the
    run keeps an ad-hoc agent or the ``MODULE:OBJ`` of its agent, an overlay of it with that
    agent (the same overlay object for the same toolbox and agent, so caches keyed by the
    toolbox hold). Raises UsageError for a definition it cannot read or an agent it cannot
    load."""
    data = meta.get(ADHOC_META)
    source = meta.get(FROM_META)
    if data is None and source is None:
        return toolbox
    if source is not None:
        if not isinstance(source, str):
            raise UsageError(f"run {run_id!r} keeps an agent source this chainlab cannot read "
                             f"({safe_repr(source)})", hint="start it again with --from")
        cwd = meta.get("cwd")
        agent = agent_from(source, cwd if isinstance(cwd, str) else None)
        key: Any = (FROM_META, source, id(agent))
    else:
        spec = AdhocAgent.from_meta(data, run_id)
        agent, key = None, spec
    overlays = _OVERLAYS.setdefault(toolbox, {})
    found = overlays.get(key)
    if found is None:  # (kept only once its agent is made: a refused one is refused again)
        found = toolbox.overlay()
        found.add_agent(agent or spec.agent())  # the run's own, over one registered since
        overlays[key] = found
    return found


def agent_from(source: str, cwd: str | None = None) -> Agent:
    """The agent ``MODULE:OBJ`` names (``--from``): a chainlab :class:`Agent`, or an agent of
    Pydantic AI or the OpenAI Agents SDK converted with its defaults (to describe its tools,
    point at the converted agent: ``support = from_pydantic_ai(agent, tools={...})``). The
    same object gives the same agent for the life of the process. ``cwd``: a directory to
    import from too (where the run was started). Raises UsageError naming the fix."""
    from chainlab.integrations import load_agent  # (the hook: loaded when a run needs it)

    try:
        return load_agent(source, extra_paths=[cwd] if cwd else ())
    except AgentConversionError as exc:
        raise UsageError(f"--from {source}: {exc.feature}", hint=exc.fix) from None


#: toolbox -> ad-hoc definition (or agent source) -> the overlay with that agent (gone with
#: the toolbox)
_OVERLAYS: weakref.WeakKeyDictionary[Toolbox, dict[Any, Toolbox]] = \
    weakref.WeakKeyDictionary()


def _offered(toolbox: Toolbox) -> tuple[str, ...]:
    undo = {tool.compensate.tool for tool in toolbox if tool.compensate is not None}
    owned = {name for tool in toolbox if isinstance(tool, AgentTool)  # (another agent's own)
             for name in tool.agent.tools if name.startswith(f"{tool.agent.name}.")}
    return tuple(tool.name for tool in toolbox if not tool.name.startswith(AGENT_PREFIX)
                 and tool.name not in undo and tool.name not in owned)


def _check_url(url: str, what: str = "--base-url") -> None:
    parts = urlsplit(check_base_url(url, what))  # (first: the message below shows the URL)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {url!r} is not an http(s) URL",
                         hint="give the server's base URL, e.g. http://127.0.0.1:8080/v1")
