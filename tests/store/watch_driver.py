"""Process A of the watch test: drives one run of a small chain in the store at a URL.

    python -m tests.store.watch_driver STORE_URL RUN_ID
"""

from __future__ import annotations

import sys

import anyio

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import open_store

STEPS = 8


def toolbox() -> Toolbox:
    tb = Toolbox("watch")

    @tb.tool
    async def slow(x: int) -> int:
        """Effect-free; sleeps a little so the watcher sees the run in progress."""
        await anyio.sleep(0.02)
        return x + 1

    return tb


def chain() -> Chain:
    steps = [{"id": "s0", "tool": "slow", "args": {"x": 0}}]
    steps += [{"id": f"s{i}", "tool": "slow", "args": {"x": f"{{{{ steps.s{i - 1}.output }}}}"}}
              for i in range(1, STEPS)]
    return Chain.from_dict({"name": "watched", "steps": steps})


async def main(url: str, run_id: str) -> int:
    store = open_store(url)
    try:
        async with Runtime(toolbox(), store) as runtime:
            run = await runtime.start(chain(), {}, run_id=run_id)
            result = await run.wait()
            print(result.status, flush=True)
            return 0 if result.ok else 1
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1], sys.argv[2]))
