"""The toolbox the fleet tests' worker processes load (``--tools
tests.workers.fleet_tools:toolbox``), and the chain they drain.

Every call appends to a *ledger* file (``CHAINLAB_LEDGER``; ``os.write`` + ``fsync``, so a
line survives a SIGKILL right after): a ``begin`` line when the call starts (run, step,
epoch, pid, time) and an ``effect`` line when a side-effecting tool changes the world. The
ledger is the outside world: which calls really started and took effect, however the
worker ended. ``CHAINLAB_DELAY`` (seconds) widens the window of each call.

``price``  effect-free (async)
``charge`` side-effecting, NOT idempotent (sync): interrupted -> in_doubt, never repeated
``ship``   side-effecting, idempotent (async); needs confirmation for big orders
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import anyio

from chainlab import CallContext, Chain, Toolbox

__all__ = ["ORDER", "Ledger", "toolbox"]

ORDER = Chain.from_dict({
    "name": "order",
    "options": {"concurrency_key": "customer:{{ context.customer }}"},
    "steps": [
        {"id": "price", "tool": "price", "args": {"n": "{{ context.n }}"}},
        {"id": "charge", "tool": "charge",
         "args": {"customer": "{{ context.customer }}", "amount": "{{ steps.price.output }}"}},
        {"id": "ship", "tool": "ship",
         "args": {"order": "{{ context.n }}", "amount": "{{ steps.price.output }}"}},
    ]})


class Ledger:
    """An append-only JSON-lines file, each line fsync'ed before the call goes on."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)

    def write(self, **entry: Any) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path) as fh:
                return [json.loads(line) for line in fh if line.strip()]
        except FileNotFoundError:
            return []


def _make() -> Toolbox:
    ledger = Ledger(os.environ.get("CHAINLAB_LEDGER", os.devnull))
    delay = float(os.environ.get("CHAINLAB_DELAY", "0"))
    tb = Toolbox("fleet")

    def line(ctx: CallContext, what: str, tool: str, **extra: Any) -> None:
        ledger.write(what=what, tool=tool, run=ctx.run_id, step=ctx.step_id,
                     epoch=ctx.epoch, attempt=ctx.attempt, key=ctx.idempotency_key,
                     pid=os.getpid(), t=time.time(), **extra)

    @tb.tool
    async def price(n: int, ctx: CallContext) -> int:
        """Effect-free."""
        line(ctx, "begin", "price")
        await anyio.sleep(delay)
        return 10 + n

    @tb.tool(side_effects=True)
    def charge(customer: str, amount: int, ctx: CallContext) -> dict[str, Any]:
        """Not idempotent: a second call charges twice."""
        line(ctx, "begin", "charge")
        time.sleep(delay)
        out = {"customer": customer, "charged": amount}
        line(ctx, "effect", "charge", out=out)
        time.sleep(delay)
        return out

    @tb.tool(side_effects=True, idempotent=True,
             requires_confirmation=lambda args: args.get("amount", 0) >= 30)
    async def ship(order: int, amount: int, ctx: CallContext) -> str:
        """Idempotent; orders of 30 or more wait for a person first."""
        line(ctx, "begin", "ship")
        await anyio.sleep(delay)
        line(ctx, "effect", "ship", out=f"shipped {order}")
        return f"shipped {order}"

    return tb


toolbox = _make()
