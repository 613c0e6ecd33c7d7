"""A disposable driver process for the SIGKILL test: runs ``refunds`` on the SQLite store
``DB`` with a deployment rule approving small refunds; ``refund`` appends to ``LEDGER`` and
then blocks until it is killed. Usage: python killdriver.py DB LEDGER IDEMPOTENT(0|1)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

RULES = [{"id": "small", "tool": "refund", "when": "args.amount <= 100", "decision": "approve"}]
CHAIN = {"name": "refunds", "steps": [{"id": "pay", "tool": "refund",
                                       "args": {"amount": 40}}]}


def toolbox(ledger: Path, idempotent: bool, block: bool) -> Toolbox:
    tb = Toolbox("kill")

    @tb.tool(side_effects=True, idempotent=idempotent, requires_confirmation=True)
    def refund(amount: float) -> dict[str, Any]:
        """Record the refund, then (in the driver to kill) block."""
        with ledger.open("a") as fh:
            fh.write(f"{amount}\n")
        while block:
            time.sleep(0.05)
        return {"refunded": amount}

    return tb


async def main(db: str, ledger: str, idempotent: bool) -> None:
    rt = Runtime(toolbox(Path(ledger), idempotent, True), SQLiteStore(db), policies=RULES,
                 id_factory=lambda: "run")
    run = await rt.start(Chain.from_dict(CHAIN))
    await run.wait()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] == "1")
