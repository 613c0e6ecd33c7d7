"""The support agent of notebook 14, written with Pydantic AI as anyone would write it, and the
same agent converted to a chainlab agent.

``agent`` is the Pydantic AI agent: instructions, a ``lookup_order`` that reads and a
``refund`` that needs approval (``requires_approval=True``), and a model. So that the
notebook runs anywhere without a model, the model is Pydantic AI's own ``FunctionModel``
playing a support model by turn: asked about a broken order, it first looks the order up and
refunds 15 in one turn, then answers. With a real model, write ``Agent("openai:gpt-4o-mini",
...)`` (or any provider Pydantic AI reaches) instead: nothing else changes.

``support`` is the chainlab agent: ``from_pydantic_ai(agent, tools=...)``, which says that
``lookup_order`` only reads (a tool nobody describes is taken as side-effecting and not
idempotent). ``chainlab agent --from bring_agent:support`` and ``%chain agent --from
bring_agent:support`` ask it; a run keeps ``bring_agent:support``, so another process (or
this kernel after a restart) imports it again.

``asked`` (the model turns this process asked for) and ``ledger`` (the refunds this process
made) let the notebook show what happened where.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from chainlab.integrations.pydantic_ai import from_pydantic_ai

__all__ = ["agent", "asked", "ledger", "support"]

asked: list[int] = []  # the model turns asked in this process
ledger: list[str] = []  # the refunds made in this process


def support_model(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """A stand-in for a model: the same answer for the same turn, however often asked."""
    turn = 1 + sum(1 for m in messages if m.kind == "response")
    asked.append(turn)
    if turn == 1:
        return ModelResponse(parts=[
            ToolCallPart("lookup_order", {"order_id": 7}, tool_call_id="call_lookup"),
            ToolCallPart("refund", {"order_id": 7, "amount": 15}, tool_call_id="call_refund")])
    return ModelResponse(parts=[TextPart("Order 7 arrived damaged; I refunded 15 of its 40.")])


agent: Agent[None, Any] = Agent(
    FunctionModel(support_model), name="support",
    instructions="You help customers with their orders. Look an order up before you refund.",
    output_type=[str, DeferredToolRequests])  # (how Pydantic AI itself waits for approval)


@agent.tool_plain
def lookup_order(order_id: int) -> dict[str, Any]:
    """Find an order: its status and its total."""
    return {"order_id": order_id, "status": "delivered, damaged", "total": 40}


@agent.tool_plain(requires_approval=True)
def refund(order_id: int, amount: int) -> dict[str, Any]:
    """Refund part of an order (a person approves each refund)."""
    ledger.append(f"refunded {amount} on order {order_id}")
    return {"order_id": order_id, "refunded": amount}


support = from_pydantic_ai(agent, tools={"lookup_order": {"side_effects": False}})
