"""The process a SIGKILL test kills mid-experiment (tests/runtime/test_experiment_crash.py):
``python experiment_worker.py DB DIR record N`` records N support runs (each refund appended
to DIR/ledger); ``... experiment`` replays them under a changed share while ``lookup`` holds
every replay (DIR/hold exists), so the parent can kill it with replays under way."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore


def toolbox(folder: Path) -> Toolbox:
    tb = Toolbox("support")

    @tb.tool
    def lookup(order: str) -> dict[str, object]:
        while (folder / "hold").exists():
            time.sleep(0.02)
        return {"order": order, "paid": 40}

    @tb.tool
    def price(paid: int, share: float) -> int:
        return int(paid * share)

    @tb.tool(side_effects=True)
    def refund(order: str, amount: int) -> str:
        with open(folder / "ledger", "a") as ledger:
            ledger.write(f"{os.getpid()} refund {order} {amount}\n")
        return f"refunded {amount} on {order}"

    return tb


CHAIN = Chain.from_dict({"name": "support", "steps": [
    {"id": "look", "tool": "lookup", "args": {"order": "{{ context.order }}"}},
    {"id": "amount", "tool": "price",
     "args": {"paid": "{{ steps.look.output.paid }}", "share": "{{ context.share }}"}},
    {"id": "pay", "tool": "refund",
     "args": {"order": "{{ context.order }}", "amount": "{{ steps.amount.output }}"}}]})


async def main(db: str, folder: Path, what: str, n: int) -> None:
    async with Runtime(toolbox(folder), SQLiteStore(db)) as runtime:
        if what == "record":
            for i in range(n):
                run = await runtime.start(CHAIN, {"order": f"o{i}", "share": 0.5})
                await run.wait()
            return
        # a chain whose share is fixed at 0.5: every refund keeps its recorded args
        same = Chain.from_dict({**CHAIN.to_dict(), "steps": [
            s if s["id"] != "amount" else {**s, "args": {**s["args"], "share": 0.5}}
            for s in CHAIN.to_dict()["steps"]]})
        await runtime.experiment([r.run_id for r in runtime.runs()], chain=same,
                                 concurrency=2, name="crash")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
