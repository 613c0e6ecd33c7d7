"""chainlab as one more peer in ../shared/bench/peers.py (LangGraph, Dask, Prefect, Hamilton).

    python ../shared/bench/peers.py run --plugin benchmarks/peers_adapter.py \\
        --peers chainlab,chainlab-sqlite,asyncio,anyio,seq --csv /tmp/peers.csv --md /tmp/peers.md

``chainlab``: Runtime(MemoryStore) with an event subscriber attached (the full event stream).
``chainlab-sqlite``: Runtime(SQLiteStore) in the case's scratch dir; W4 uses side-effecting,
NON-idempotent steps so that every step waits for its write-ahead commit (one durable commit
per step, the peers' W4 rule; an idempotent step's start is group-committed since it is
re-run under the same key after a crash), W1-W3 use effect-free steps (group commit).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from peers import Adapter, register  # type: ignore[import-not-found]

sys.path.insert(0, str(Path(__file__).resolve().parent))


class _ChainlabBase(Adapter):
    workloads = ("W1", "W2", "W3", "W4")
    packages = ("chainlab", "anyio", "pydantic")
    imports = ("chainlab",)
    is_async = True
    async_backend = "asyncio"

    def _store(self, wl: Any) -> Any:
        raise NotImplementedError

    def build(self, wl: Any) -> Any:
        from workloads import node_toolbox

        from chainlab import Chain
        from chainlab.runtime import Runtime

        steps = [
            {
                "id": n,
                "tool": "node",
                "retry": {"max_attempts": 1},
                "args": {"xs": [f"{{{{ steps.{d}.output }}}}" for d in wl.deps[n]]},
            }
            for n in wl.order
        ]
        chain = Chain.from_dict(
            {
                "name": f"peers-{wl.id}",
                "steps": steps,
                "options": {"max_concurrency": wl.concurrency},
            }
        )
        runtime = Runtime(node_toolbox(wl.sleep_s, side_effects=wl.durable, idempotent=False),
                          self._store(wl))
        self._runtime = runtime
        sinks = wl.sinks
        seen = [0]

        def on_event(ev: Any) -> None:
            seen[0] += 1

        async def run() -> int:
            r = await runtime.start(chain)
            r.subscribe(on_event)
            result = await r.wait()
            return sum(result.outputs[s] for s in sinks)

        return run


@register("chainlab")
class ChainlabAdapter(_ChainlabBase):
    description = "chainlab Runtime, MemoryStore, event subscriber attached"
    base_peer = "chainlab"

    def mode(self, wl: Any) -> str:
        return f"max_concurrency={wl.concurrency}, memory store" + (
            " (W4: not durable)" if wl.durable else ""
        )

    def _store(self, wl: Any) -> Any:
        from chainlab.store import MemoryStore

        return MemoryStore()


@register("chainlab-sqlite")
class ChainlabSQLiteAdapter(_ChainlabBase):
    description = "chainlab Runtime, SQLiteStore (WAL, synchronous=FULL, group commit)"
    base_peer = "chainlab"

    def mode(self, wl: Any) -> str:
        return (
            "sqlite, side-effecting steps: write-ahead commit per step"
            if wl.durable
            else "sqlite, effect-free steps: group commit"
        )

    def _store(self, wl: Any) -> Any:
        from chainlab.store import SQLiteStore

        return SQLiteStore(os.path.join(wl.scratch or ".", "chainlab-bench.db"))
