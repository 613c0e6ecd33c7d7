"""Does a plan fit a toolbox? The checks of plan validation that need the tools: the tool (or
sub-chain) a step names exists, its literal args fit the tool's parameters (a template is
only known at run time), a rollback's tool exists and takes its args, and a pool is large
enough for the units a tool draws from it.

Each check returns its findings, ``(code, message, field)``; :mod:`chainlab.plan.validate`
turns them into problems of the step they are about.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from chainlab._text import did_you_mean, safe_repr
from chainlab.plan.refs import has_template

if TYPE_CHECKING:
    from chainlab.plan.parts import ChainData, Rollback, Step
    from chainlab.tools.contract import Tool

__all__ = ["Finding", "ToolSource", "arg_findings", "pool_findings", "rollback_tool",
           "step_tool"]

#: one thing wrong: (problem code, message, field of the step it is about)
Finding = tuple[str, str, str]


class ToolSource(Protocol):
    """What the plan's checks read of a toolbox: its tools by name and the sub-chains
    registered with it. A :class:`chainlab.tools.Toolbox` is one (the plan names this role
    instead of importing the toolbox, which holds chains)."""

    @property
    def chains(self) -> Mapping[str, ChainData]: ...

    def get(self, name: str) -> Tool: ...

    def names(self) -> list[str]: ...

    def __contains__(self, name: object) -> bool: ...

    def __iter__(self) -> Iterator[Tool]: ...


def step_tool(step: Step, toolbox: ToolSource | None,
              chains: Mapping[str, ChainData]) -> tuple[Tool | None, list[Finding]]:
    """The tool a step calls (None for a sub-chain, or without a toolbox) and what is wrong
    with its name: an unknown tool, or an unknown sub-chain when a toolbox is given; and
    what the tool itself says is wrong in this toolbox (an agent naming an unknown tool)."""
    if step.is_subchain:
        name = step.subchain_name or ""
        if toolbox is not None and name not in chains:
            return None, [(
                "unknown_tool",
                f"unknown sub-chain {name!r}"
                f"{did_you_mean(name, chains)}; register it with "
                "toolbox.add_chain(chain)",
                "tool",
            )]
        return None, []
    if toolbox is None:
        return None, []
    if step.tool not in toolbox:
        return None, [(
            "unknown_tool",
            f"unknown tool {step.tool!r}{did_you_mean(step.tool, toolbox.names())}",
            "tool",
        )]
    tool = toolbox.get(step.tool)
    return tool, tool.fit_findings(toolbox, chains)


def rollback_tool(rollback: Rollback, toolbox: ToolSource) -> tuple[Tool | None, list[Finding]]:
    """The tool a rollback calls, or the finding that the toolbox has no such tool."""
    if rollback.tool not in toolbox:
        return None, [(
            "unknown_tool",
            f"unknown rollback tool {rollback.tool!r}"
            f"{did_you_mean(rollback.tool, toolbox.names())}",
            "rollback.tool",
        )]
    return toolbox.get(rollback.tool), []


def arg_findings(tool: Tool, args: Mapping[str, Any], field: str) -> list[Finding]:
    """Args the tool has no parameter for, literal values that do not fit their parameter's
    type, and required parameters left out (``field``: ``args`` or ``rollback.args``)."""
    out: list[Finding] = []
    fields = tool.params
    allows_extra = tool.input_model.model_config.get("extra") == "allow"
    for key, value in args.items():
        if key not in fields:
            if not allows_extra:
                out.append((
                    "invalid_args",
                    f"tool {tool.name!r} has no parameter {key!r}{did_you_mean(key, fields)}",
                    f"{field}.{key}",
                ))
            continue
        if has_template(value):
            continue
        adapter = tool.field_adapter(key)
        try:
            if adapter is not None:
                adapter.validate_python(value)
        except ValidationError as exc:
            msg = "; ".join(e["msg"] for e in exc.errors(include_url=False)[:3])
            out.append((
                "invalid_args",
                f"{key}={safe_repr(value)} does not fit tool {tool.name!r}: {msg}",
                f"{field}.{key}",
            ))
    for name, info in fields.items():
        if info.is_required() and name not in args:
            out.append((
                "invalid_args",
                f"missing required arg {name!r} for tool {tool.name!r}",
                f"{field}.{name}",
            ))
    return out


def pool_findings(chain: ChainData, toolbox: ToolSource) -> list[tuple[Step, Finding]]:
    """Steps whose tool draws more units from a pool than the chain's options give it: they
    could never run."""
    out: list[tuple[Step, Finding]] = []
    pools = chain.options.pools
    for step in chain.steps:
        if step.tool not in toolbox:
            continue
        for pool, units in toolbox.get(step.tool).resources.items():
            if pool in pools and units > pools[pool]:
                out.append((step, (
                    "invalid_field",
                    f"tool {step.tool!r} needs {safe_repr(units)} units of pool "
                    f"{pool!r} whose capacity is {safe_repr(pools[pool])}; it could never "
                    "run",
                    "options.pools",
                )))
    return out
