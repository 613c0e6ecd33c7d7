"""An agent that brings its tools (``Agent(own_tools=...)``: what a converted agent is), and
``--from MODULE:OBJ`` (:func:`chainlab.agent.adhoc.agent_request` with ``source``): the run
keeps the reference, and :func:`run_toolbox` finds the agent again from it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainlab import Agent, Tool, Toolbox, ToolDefinitionError
from chainlab.agent.adhoc import agent_request, run_toolbox
from chainlab.errors import UsageError
from chainlab.runtime.preparing import adhoc_meta
from chainlab.store.base import FROM_META


def _tools(prefix: str) -> list[Tool]:
    def look(order: int) -> str:
        """Look."""
        return "x"

    def pay(order: int) -> str:
        """Pay."""
        return "paid"
    return [Tool(look, name=f"{prefix}.look"), Tool(pay, name=f"{prefix}.pay",
                                                    side_effects=True)]


def _agent(name: str = "clerk", **kw: object) -> Agent:
    return Agent(name, "You help.", model="m", base_url="http://127.0.0.1:9/v1",
                 own_tools=_tools(name), **kw)  # type: ignore[arg-type]


def test_an_agent_brings_its_tools_and_offers_them_by_their_own_names() -> None:
    agent = _agent()
    assert agent.tools == ["clerk.look", "clerk.pay"]
    toolbox = Toolbox("t")
    toolbox.add_agent(agent)
    assert toolbox.names() == ["clerk.look", "clerk.pay", "agent:clerk"]
    offers = agent.offers(toolbox, {})
    assert {f: o.tool for f, o in offers.items()} == {"look": "clerk.look", "pay": "clerk.pay"}
    assert agent.problems(toolbox, {}) == []


def test_registering_again_replaces_its_tools_but_never_anothers() -> None:
    toolbox = Toolbox("t")
    toolbox.add_agent(_agent())
    again = _agent()  # a notebook cell run again
    toolbox.add_agent(again)
    assert toolbox.get("clerk.pay") is again.own_tools[1]
    other = Toolbox("o")
    other.add(_tools("clerk")[0])  # a tool of that name from elsewhere
    with pytest.raises(ToolDefinitionError, match=r"brings tools \['clerk.look'\]"):
        other.add_agent(_agent())
    assert "agent:clerk" not in other  # nothing registered


def test_a_sub_agent_it_brings_is_registered_with_it() -> None:
    helper = _agent("helper")
    boss = Agent("boss", "You lead.", model="m", base_url="http://127.0.0.1:9/v1",
                 own_tools=[*_tools("boss"), helper])
    assert boss.tools == ["boss.look", "boss.pay", "agent:helper"]
    toolbox = Toolbox("t")
    toolbox.add_agent(boss)
    assert {"agent:helper", "helper.look", "helper.pay", "agent:boss"} <= set(toolbox.names())
    assert list(boss.offers(toolbox, {})) == ["look", "pay", "agent__helper"]


def test_own_tools_takes_tools_and_agents_only() -> None:
    with pytest.raises(ToolDefinitionError, match="own_tools takes Tool and Agent objects"):
        Agent("x", "I.", model="m", own_tools=["look"])  # type: ignore[list-item]


def test_an_adhoc_agent_is_not_offered_another_agents_own_tools() -> None:
    toolbox = Toolbox("t")

    @toolbox.tool
    def plain(x: int) -> int:
        """A plain tool."""
        return x

    toolbox.add_agent(_agent())
    ask = agent_request(toolbox, None, "hi", model="m", base_url="http://127.0.0.1:9/v1")
    assert ask.toolbox.get("agent:assistant").agent.tools == ["plain"]


MODULE = '''
from chainlab import Agent, Tool

def look(order: int) -> str:
    """Look."""
    return "x"

clerk = Agent("clerk", "You help.", model="m", base_url="http://127.0.0.1:9/v1",
              own_tools=[Tool(look, name="clerk.look")])
number = 3
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"from_agents_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_from_keeps_the_reference_and_finds_the_agent_again(module: str) -> None:
    toolbox = Toolbox("empty")
    ask = agent_request(toolbox, None, "find order 7", source=f"{module}:clerk")
    assert ask.meta == {FROM_META: f"{module}:clerk"} and ask.agent == "clerk"
    assert ask.chain.steps[0].tool == "agent:clerk"
    assert "clerk.look" in ask.toolbox and "clerk.look" not in toolbox  # an overlay
    # another process would find it again from the run's meta, the same overlay here
    assert run_toolbox(toolbox, ask.meta) is ask.toolbox
    assert adhoc_meta({**ask.meta, "tools": ""}) == ask.meta  # what a fork keeps


@pytest.mark.parametrize("source,given,says", [
    ("{m}:nothing", {}, "has no 'nothing'"),
    ("{m}", {}, "is not MODULE:OBJ"),
    ("no_such_module_xyz:a", {}, "cannot import 'no_such_module_xyz'"),
    ("{m}:number", {}, "it is not an agent chainlab can run"),
    ("{m}:clerk", {"name": "clerk"}, "NAME and --from do not go together"),
    ("{m}:clerk", {"model": "m"}, "--model and --from do not go together"),
])
def test_a_bad_from_is_a_usage_error(module: str, source: str, given: dict[str, str],
                                     says: str) -> None:
    name = given.pop("name", None)
    with pytest.raises(UsageError, match=says):
        agent_request(Toolbox("t"), name, "hi", source=source.format(m=module), **given)


def test_a_run_that_keeps_a_bad_source_says_so() -> None:
    with pytest.raises(UsageError, match="cannot read"):
        run_toolbox(Toolbox("t"), {FROM_META: 42}, "run-1")
