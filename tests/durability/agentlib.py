"""An agent step over the durability tests' tools: a model (a scripted OpenAI-compatible
server, answering by turn whatever how often it is asked) whose turns call every kind of
tool of :mod:`tests.durability.chainlib`, one batch per turn.

Turn 1 asks, in one batch, for a non-idempotent ``charge`` (compensated by ``refund``), a
reconcilable ``send``, an idempotent ``upsert`` and an effect-free ``compute``; turn 2 for a
``transfer`` a person approves (amount >= 10) beside another ``compute``; turn 3 answers.
"""

from __future__ import annotations

import json
from typing import Any

from chainlab import Agent, Chain, Toolbox
from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.durability.chainlib import Ledger, make_toolbox

AGENT_TOOL = "agent:clerk"
# the agent's non-idempotent calls (each must take effect exactly once) and its call with
# a compensation (undone exactly once on rollback)
AGENT_UNSAFE_STEPS = {"ag/1.1": "charge", "ag/1.2": "send", "ag/2.1": "transfer"}
AGENT_COMPENSABLE_STEPS = ("ag/1.1",)


def turn_of(request: RecordedRequest) -> int:
    """Which turn a request asks for: 1 + the model's answers it carries."""
    return 1 + sum(1 for m in request.messages if m.get("role") == "assistant")


def clerk(request: RecordedRequest) -> Any:
    """The model: the same answer for the same turn, every time it is asked."""
    turn = turn_of(request)
    if turn == 1:
        return tool_calls(Call("charge", {"account": "acct-1", "amount": 5}, "t1-charge"),
                          Call("send", {"to": "ops", "body": "charged acct-1"}, "t1-send"),
                          Call("upsert", {"name": "k1", "value": 1}, "t1-upsert"),
                          Call("compute", {"x": 3}, "t1-compute"))
    if turn == 2:
        computed = json.loads(request.messages[-1]["content"])  # compute's result
        return tool_calls(Call("transfer", {"to": "acct-2", "amount": 10}, "t2-transfer"),
                          Call("compute", {"x": computed}, "t2-compute"))
    return f"done after {turn - 1} turns"


def serve_clerk() -> FakeOpenAI:
    return FakeOpenAI([clerk] * 100_000)


def agent_toolbox(ledger: Ledger, base_url: str, delay: float = 0.0,
                  started: Any = None) -> Toolbox:
    tb = make_toolbox(ledger, delay, started)
    tb.add_agent(Agent("clerk", "You run the books.",
                       ["charge", "send", "upsert", "compute", "transfer"],
                       model="fake-model", base_url=base_url, api_key="test"))
    return tb


def agent_chain(fail: bool = False) -> Chain:
    """A step before the agent, the agent step, and an audit after it that (with ``fail``)
    fails so the run rolls back: the agent's charge refunded once."""
    return Chain.from_dict({"name": "agentic", "options": {"max_concurrency": 3}, "steps": [
        {"id": "a", "tool": "compute", "args": {"x": "{{ context.seed }}"}},
        {"id": "ag", "tool": AGENT_TOOL,
         "args": {"request": "book order {{ steps.a.output }}"},
         "retry": {"max_attempts": 3, "delay_s": 0}},
        {"id": "z", "tool": "check", "args": {"x": "{{ steps.a.output }}", "fail": fail},
         "depends_on": ["ag"]},
    ]})
