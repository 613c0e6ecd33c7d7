"""Tools the HTTP tests serve (``--tools served_tools:toolbox``, this directory on the
server's PYTHONPATH). Every side effect is a line in ``effects.jsonl`` in the server's
working directory, so a test counts effects across processes and restarts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from chainlab import CallContext, Toolbox

toolbox = Toolbox("http-tests")
EFFECTS = "effects.jsonl"


def effect(kind: str, ctx: CallContext, **fields: Any) -> None:
    with Path(EFFECTS).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"kind": kind, "run_id": ctx.run_id, "step_id": ctx.step_id,
                             **fields}) + "\n")


@toolbox.tool
def add(a: int, b: int) -> int:
    return a + b


@toolbox.tool
def tick(n: int) -> int:
    """Effect-free and instant (the benchmark's many-step chain)."""
    return n


def _pay_preview(args: dict[str, Any]) -> str:
    return f"pay {args['amount']} to {args['to']}"


@toolbox.tool(side_effects=True, requires_confirmation=True, preview=_pay_preview)
def pay(to: str, amount: int, ctx: CallContext) -> dict[str, Any]:
    """Not idempotent: it runs once per approval, and a test counts that it did."""
    effect("pay", ctx, to=to, amount=amount)
    return {"paid": amount, "to": to}


@toolbox.tool(side_effects=True)
def record(label: str, ctx: CallContext) -> str:
    """A side effect that is not idempotent: counted in effects.jsonl."""
    effect("record", ctx, label=label)
    return label


@toolbox.tool
def hold(path: str) -> str:
    """Effect-free: blocks while ``path`` exists (a test kills the server meanwhile);
    ``PATH.holding`` says it is holding."""
    Path(path + ".holding").write_text("1")
    deadline = time.monotonic() + 120
    while Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"


@toolbox.tool(side_effects=True)
def charge(amount: int) -> dict[str, Any]:
    """Not idempotent, and the connection drops mid-call: the step goes in doubt."""
    raise ConnectionResetError(f"connection reset while charging {amount}")


@toolbox.tool(side_effects=True, idempotent=True,
              compensate=("unbook", {"booking": "{{ output.booking }}"}))
def book(room: str, ctx: CallContext) -> dict[str, Any]:
    effect("book", ctx, room=room)
    return {"booking": f"b-{room}"}


@toolbox.tool(side_effects=True, idempotent=True)
def unbook(booking: str, ctx: CallContext) -> dict[str, Any]:
    effect("unbook", ctx, booking=booking)
    return {"cancelled": booking}


if os.environ.get("SERVED_MODEL_URL"):  # (tests/http/test_agent_http.py: a scripted model)
    from chainlab import Agent

    toolbox.add_agent(Agent("support", "You pay people what they are owed.",
                            tools=["add", "pay"], model="fake-model",
                            base_url=os.environ["SERVED_MODEL_URL"], api_key="test"))
    toolbox.add_agent(Agent("writer", "You write.", tools=[], model="fake-model", stream=True,
                            base_url=os.environ["SERVED_MODEL_URL"], api_key="test"))
