"""Tools for the attempt protocol's crash test (tests/runtime/test_attempt_protocol.py), in a
module of their own so that a driver subprocess imports the same ones. The ledger (the
outside world) and the job server are named by environment variables."""

from __future__ import annotations

import os
import time
from typing import Any

from chainlab import CallContext, Chain, Toolbox
from chainlab.testing.job_server import register_http_job, request_json
from tests.durability.chainlib import Ledger

LEDGER = Ledger(os.environ.get("PROTOCOL_LEDGER", os.devnull), fsync=True)
JOBS = os.environ.get("PROTOCOL_JOBS", "http://127.0.0.1:9")

toolbox = Toolbox("protocol")
register_http_job(toolbox, JOBS, name="remote", poll_every_s=0.05, duration_s=0.6)


def _write(ctx: CallContext, tool: str, out: Any) -> None:
    LEDGER.write(step=ctx.step_id, tool=tool, key=ctx.idempotency_key, effect=True,
                 epoch=ctx.epoch, attempt=ctx.attempt, pid=os.getpid(), out=out, kind=ctx.kind)


@toolbox.tool(side_effects=True)
def pay(amount: int, ctx: CallContext) -> dict[str, Any]:
    """Non-idempotent. It takes effect once the rest of the batch is under way (the job
    submitted, the sub-chain's first step done), so a kill right after it lands mid-batch."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        submitted = request_json("GET", f"{JOBS}/stats")["submissions"]
        if submitted and any(e["step"] == "sub/x" for e in LEDGER.read()):
            break
        time.sleep(0.01)
    out = {"paid": amount}
    _write(ctx, "pay", out)
    return out


@toolbox.tool(side_effects=True, idempotent=True)
def note(tag: str, ctx: CallContext) -> str:
    _write(ctx, "note", tag)
    return tag.upper()


@toolbox.tool
def join(paid: Any, sub: Any, job: Any) -> list[Any]:
    return [paid, sub, job]


toolbox.add_chain(Chain.from_dict({"name": "sub", "steps": [
    {"id": "x", "tool": "note", "args": {"tag": "sub-x"}},
    {"id": "y", "tool": "note", "args": {"tag": "{{ steps.x.output }}-y"}},
], "output": "{{ steps.y.output }}"}))

BATCH = Chain.from_dict({"name": "batch", "steps": [
    {"id": "pay", "tool": "pay", "args": {"amount": 5}},
    {"id": "sub", "tool": "chain:sub"},
    {"id": "job", "tool": "remote", "args": {"payload": {"n": 7}}},
    {"id": "join", "tool": "join", "args": {"paid": "{{ steps.pay.output }}",
                                            "sub": "{{ steps.sub.output }}",
                                            "job": "{{ steps.job.output }}"}},
]})
