"""The tools of the agent crash test (``tests.durability.agentdriver:toolbox`` in the driver
process; :func:`make` in the test): an agent whose first turn is ONE batch of an unsafe
``charge``, a sub-chain ``ship``, a sub-agent ``helper`` and a remote job ``audit`` of the
test job server, plus an effect-free ``lookup``. Every call is written to a ledger file
(fsync'ed: it survives the SIGKILL a moment later); the slow ones leave a wide window in
which the parent kills the driver mid-batch.

Configured by the environment: ``CHAINLAB_AGENT_LEDGER`` (the ledger file),
``CHAINLAB_AGENT_JOBS`` (the job server's URL), ``OPENAI_BASE_URL`` (the scripted model)."""

from __future__ import annotations

import os
import time
from typing import Any

from chainlab import Agent, CallContext, Chain, Toolbox
from chainlab.testing.job_server import register_http_job
from tests.durability.chainlib import Ledger

SLOW_S = 3.0
SHIP = Chain.from_dict({"name": "ship", "description": "Pack and ship an order.",
                        "inputs": {"order": {"type": "integer"}},
                        "steps": [{"id": "pack", "tool": "pack",
                                   "args": {"order": "{{ context.order }}"}}]})


def make(ledger_path: str, jobs_url: str, model_url: str) -> Toolbox:
    ledger = Ledger(ledger_path)
    tb = Toolbox("agent_crash")

    def record(ctx: CallContext, tool: str, effect: bool, out: Any = None) -> None:
        ledger.write(step=ctx.step_id, tool=tool, key=ctx.idempotency_key, effect=effect,
                     epoch=ctx.epoch, attempt=ctx.attempt, pid=os.getpid(), out=out,
                     kind=ctx.kind)

    @tb.tool(side_effects=True)
    def charge(account: str, amount: int, ctx: CallContext) -> dict[str, Any]:
        """Charge an account (not idempotent)."""
        out = {"account": account, "charged": amount}
        record(ctx, "charge", True, out)
        time.sleep(SLOW_S)  # the effect happened; the step is not recorded yet
        return out

    @tb.tool(side_effects=True, idempotent=True)
    def pack(order: int, ctx: CallContext) -> str:
        """Pack an order (idempotent: a repeat under the same key changes nothing)."""
        time.sleep(SLOW_S)
        first = ledger.effect_for(ctx.idempotency_key) is None
        record(ctx, "pack", first, f"packed {order}")
        return f"packed {order}"

    @tb.tool
    def lookup(order: int, ctx: CallContext) -> dict[str, Any]:
        """Find an order."""
        record(ctx, "lookup", False)
        return {"order": order, "status": "paid"}

    @tb.tool
    def slowlook(order: int, ctx: CallContext) -> str:
        """Ask the warehouse (slow)."""
        time.sleep(SLOW_S)
        record(ctx, "slowlook", False)
        return f"order {order} is in aisle 4"

    register_http_job(tb, jobs_url, name="audit", find=True, poll_every_s=0.05, timeout_s=60,
                      side_effects=True)
    tb.add_chain(SHIP)
    tb.add_agent(Agent("helper", "You are the warehouse helper.", ["slowlook"],
                       model="fake-model", base_url=model_url, api_key="test"))
    tb.add_agent(Agent("clerk", "You are the shop's clerk.",
                       ["charge", "chain:ship", "agent:helper", "audit", "lookup"],
                       model="fake-model", base_url=model_url, api_key="test"))
    return tb


CHAIN = Chain.from_dict({"name": "agent_crash", "steps": [
    {"id": "ag", "tool": "agent:clerk", "args": {"request": "order 7: charge, ship, check"}}]})

toolbox: Toolbox | None = None
if os.environ.get("CHAINLAB_AGENT_LEDGER"):  # the driver process
    toolbox = make(os.environ["CHAINLAB_AGENT_LEDGER"], os.environ["CHAINLAB_AGENT_JOBS"],
                   os.environ["OPENAI_BASE_URL"])
