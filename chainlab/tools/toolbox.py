"""A :class:`Toolbox` is a named set of tools (and of chains usable as sub-chains);
:data:`default_toolbox` is the one ``@chainlab.tool`` registers in."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from chainlab.errors import ToolDefinitionError, UnknownToolError
from chainlab.tools.contract import Tool

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain

__all__ = ["Toolbox", "default_toolbox", "tool"]


class Toolbox:
    """A named set of tools (and chains usable as sub-chains).

    ``redact``: the redactor of every runtime made over it that is given none
    (:mod:`chainlab.redaction`): it travels with the toolbox, so every process that loads it
    (``chainlab run``, ``serve``, ``worker``, a resume in another process) redacts alike."""

    def __init__(self, name: str = "toolbox", *, redact: Callable[[Any], Any] | None = None):
        if redact is not None and not callable(redact):
            raise ToolDefinitionError(f"toolbox {name!r}: redact must be a function of a value "
                                      "returning it masked (chainlab.redaction)")
        self.name = name
        #: the redactor runtimes over this toolbox use unless given their own
        self.redact = redact
        self._tools: MutableMapping[str, Tool] = {}
        self.chains: dict[str, Chain] = {}
        self._owned: list[Any] = []  # what aclose() closes: the MCP servers' sessions

    def tool(self, fn: Callable[..., Any] | None = None, /, **meta: Any) -> Any:
        """Register a function as a tool: ``@toolbox.tool`` or ``@toolbox.tool(side_effects=True)``.

        Returns the :class:`Tool` (still callable like the function).
        Raises ToolDefinitionError for a duplicate name or bad metadata.
        """
        if fn is not None:
            return self.add(Tool(fn, **meta))

        def decorate(f: Callable[..., Any]) -> Tool:
            return self.add(Tool(f, **meta))

        return decorate

    def job(self, cls: Any = None, /, **meta: Any) -> Any:
        """Register a remote job class (``submit``, ``poll``, optional ``cancel``/``find``):
        ``@toolbox.job`` or ``@toolbox.job(side_effects=True, poll_every_s=2.0,
        timeout_s=3600, dedupe_by_key=True)``; see :mod:`chainlab.tools.job`.

        Returns the :class:`~chainlab.tools.job.JobTool`. Raises ToolDefinitionError.
        """
        from chainlab.tools.job import make_job

        if cls is not None:
            return self.add(make_job(cls, **meta))

        def decorate(c: Any) -> Any:
            return self.add(make_job(c, **meta))

        return decorate

    def add(self, tool: Tool) -> Tool:
        """Register a tool. Re-defining a function interactively (same qualified name in
        ``__main__``: a notebook cell run again) replaces it; any other function with a taken
        name is an error."""
        old = self._tools.get(tool.name)
        if old is not None and _same_definition(old.fn, tool.fn):
            self._tools[tool.name] = tool
            return tool
        if tool.name in self._tools:
            raise ToolDefinitionError(
                f"toolbox {self.name!r} already has a tool named {tool.name!r}; "
                "pass name=... to register this one under another name"
            )
        self._tools[tool.name] = tool
        return tool

    def add_agent(self, agent: Any) -> Any:
        """Register a :class:`chainlab.Agent` as the tool ``agent:NAME`` (a chain step runs
        it with ``tool: agent:NAME``; another agent may name it among its tools), with the
        tools and sub-agents it brings (its ``own_tools``: an agent converted from another
        SDK). An agent registered again under the same name replaces the earlier one and
        the tools it brought (a notebook cell run again); a plain tool of that name cannot
        exist (``:`` is not allowed in tool names). Returns the agent.

        Raises ToolDefinitionError when a tool the agent brings has the name of a tool the
        toolbox has from elsewhere; nothing is registered then."""
        tool = agent.tool
        old = self._tools.get(tool.name)
        if old is not None and type(old) is not type(tool):  # pragma: no cover - see above
            raise ToolDefinitionError(f"toolbox {self.name!r} already has a tool named "
                                      f"{tool.name!r}")
        brought = [t for t in agent.own_tools if not hasattr(t, "tool")]  # (Agents have .tool)
        replaced = {t.name for t in getattr(getattr(old, "agent", None), "own_tools", ())
                    if not hasattr(t, "tool")}
        taken = sorted(t.name for t in brought if t.name in self._tools and t.name not in
                       replaced and self._tools[t.name] is not t)
        if taken:
            raise ToolDefinitionError(
                f"agent {agent.name!r} brings tools {taken}, which toolbox {self.name!r} has "
                "from elsewhere; give the agent another name (its tools are NAME.TOOL) or "
                "register it in another toolbox")
        for sub in agent.own_tools:
            if hasattr(sub, "tool"):
                self.add_agent(sub)
        for own in brought:
            self._tools[own.name] = own
        self._tools[tool.name] = tool
        return agent

    def add_mcp(self, command: Sequence[str] | str | None = None, *, url: str | None = None,
                **options: Any) -> list[Tool]:
        """Register the tools of an MCP server: a stdio server's ``command`` (argv or a
        command line) or a streamable-HTTP server's ``url``. Options: ``prefix``,
        ``include``, ``exclude``, ``confirm``, ``overrides``, ``env``, ``cwd``, ``label``,
        ``init_timeout_s`` (:func:`chainlab.mcp.add_mcp`). Needs ``chainlab[mcp]``.

        Raises MCPServerError naming the server and the fix; nothing is registered then.
        """
        from chainlab.mcp import add_mcp  # the integration: loaded only when used

        return list(add_mcp(self, command, url=url, **options))

    @classmethod
    def from_mcp(cls, command: Sequence[str] | str | None = None, *, url: str | None = None,
                 name: str = "mcp", **options: Any) -> Toolbox:
        """A new toolbox called ``name`` with the tools of one MCP server (:meth:`add_mcp`)."""
        toolbox = cls(name)
        toolbox.add_mcp(command, url=url, **options)
        return toolbox

    def overlay(self) -> Toolbox:
        """A toolbox of the same name that sees this one's tools and sub-chains as they are
        now and later (a tool redefined in a notebook included), plus what is added to the
        overlay alone: a run's ad-hoc agent (:func:`chainlab.agent.adhoc.run_toolbox`)."""
        box = Toolbox(self.name)
        box._tools = ChainMap({}, self._tools)
        box.chains = self.chains
        box._owned = self._owned
        return box

    def replace(self, tool: Tool) -> Tool:
        """Register ``tool`` in place of the tool of its name (an experiment's changed tool,
        on an :meth:`overlay`). Raises UnknownToolError when there is no such tool."""
        self.get(tool.name)  # (raises naming the tools it has)
        self._tools[tool.name] = tool
        return tool

    def own(self, resource: Any) -> None:
        """Close ``resource`` (an object with ``async aclose()``) with the toolbox."""
        self._owned.append(resource)

    async def aclose(self) -> None:
        """Close what the toolbox holds open (its MCP sessions, its agents' connections to
        their model endpoints; a Runtime's ``aclose`` calls this). Its tools stay usable: a
        session or a connection opens again on the next call."""
        for resource in self._owned:
            await resource.aclose()
        for tool in list(self._tools.values()):
            await tool.aclose()

    def add_chain(self, chain: Chain) -> Chain:
        """Make ``chain`` callable as a sub-chain step (``tool: chain:NAME``)."""
        self.chains[chain.name] = chain
        return chain

    def get(self, name: str) -> Tool:
        """The tool called ``name``.

        Raises :class:`~chainlab.errors.UnknownToolError` (a ``KeyError`` too) with a
        did-you-mean and, when there are few, the names the toolbox has.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self._tools, toolbox=self.name) from None

    def names(self) -> list[str]:
        return list(self._tools)

    def describe(self) -> list[dict[str, Any]]:
        return [t.describe() for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<Toolbox {self.name!r}: {', '.join(self._tools) or 'empty'}>"


def _same_definition(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    return (getattr(a, "__module__", None) == getattr(b, "__module__", None) == "__main__"
            and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None))


default_toolbox = Toolbox("default")


def tool(fn: Callable[..., Any] | None = None, /, **meta: Any) -> Any:
    """Register a tool in :data:`default_toolbox` (``@chainlab.tool`` or with metadata)."""
    return default_toolbox.tool(fn, **meta)
