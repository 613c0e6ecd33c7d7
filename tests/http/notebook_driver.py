"""A notebook-like process: drives a run of ``payout`` with its own Runtime on the store at
argv[1] (a SQLite file or a postgresql:// URL) and keeps driving it (the kernel stays up)
until it ends; prints the run id first, then the final status."""

from __future__ import annotations

import sys

import anyio
from served_tools import toolbox  # (on the PYTHONPATH, as the server's)

from chainlab import Runtime
from chainlab.events import RUN_TERMINAL
from chainlab.plan.schema import Chain
from chainlab.store import open_store
from tests.http.server import CHAINS


async def main(db: str) -> None:
    chain = Chain.from_yaml((CHAINS / "payout.yaml").read_text())
    async with Runtime(toolbox, open_store(db)) as runtime:
        run = await runtime.start(chain, {"base": 5, "to": "notebook"},
                                  meta={"source": "notebook"})
        print(run.run_id, flush=True)
        with anyio.fail_after(120):
            while run.status not in RUN_TERMINAL:
                await anyio.sleep(0.05)
        print(run.status, flush=True)


anyio.run(main, sys.argv[1])
