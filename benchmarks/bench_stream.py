"""How soon a piece of a streamed model answer reaches a ``deltas=True`` subscriber
(issue 48 item 1; target: 5 ms median).

    .venv/bin/python benchmarks/bench_stream.py [--pieces 200] [--gap-ms 5] [--runs 3]

The scripted OpenAI-compatible server (a thread of this process, so both clocks are one)
streams an answer of ``--pieces`` pieces, ``--gap-ms`` apart, to an agent with
``stream=True`` through the real ``openai`` client; the server notes when it wrote each
piece to the socket (``server.pieces``), the subscriber when it got it. Printed: the
latency's median, 95th percentile and maximum over every piece of ``--runs`` runs, on a
MemoryStore and on SQLite (the store is not on the piece's path: a piece is never stored).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Agent, Chain, Toolbox
from chainlab.events import MODEL_DELTA
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing.openai_script import Reply
from chainlab.testing.openai_server import FakeOpenAI

CHAIN = Chain.from_dict({"name": "write", "steps": [
    {"id": "w", "tool": "agent:writer", "args": {"request": "write"}}]})


async def one_run(server: FakeOpenAI, store: Any, pieces: int, gap_s: float) -> list[float]:
    text = "".join(f"p{n:06d}" for n in range(pieces))  # 7 characters: one piece each
    server.pieces.clear()
    server.add(Reply(text, gap_s=gap_s))
    tb = Toolbox("bench")
    tb.add_agent(Agent("writer", "You write.", [], model="m", base_url=server.base_url,
                       api_key="x", stream=True))
    got: list[float] = []
    async with Runtime(tb, store) as runtime:
        run = await runtime.start(CHAIN, paused=True)
        run.subscribe(lambda x: got.append(time.perf_counter()) if x.kind == MODEL_DELTA
                      else None, deltas=True)
        await run.unpause()
        assert (await run.wait()).ok
    sent = [t for t, _ in server.pieces]
    assert len(sent) == len(got) == pieces, (len(sent), len(got))
    return [(g - s) * 1e3 for s, g in zip(sent, got, strict=True)]


async def main(pieces: int, gap_s: float, runs: int) -> None:
    print(f"a piece from the scripted server to a deltas=True subscriber: {pieces} pieces "
          f"{gap_s * 1e3:g} ms apart, {runs} runs (target: median <= 5 ms)")
    print(f"{'store':>7} {'pieces':>7} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    with FakeOpenAI(keep_alive=True) as server, tempfile.TemporaryDirectory() as folder:
        for name in ("memory", "sqlite"):
            lat: list[float] = []
            for n in range(runs):
                store = MemoryStore() if name == "memory" else \
                    SQLiteStore(Path(folder) / f"r{n}.db")
                lat += await one_run(server, store, pieces, gap_s)
                if name == "sqlite":
                    store.close()
            lat.sort()
            print(f"{name:>7} {len(lat):>7} {statistics.median(lat):>10.2f} "
                  f"{lat[int(len(lat) * 0.95)]:>8.2f} {lat[-1]:>8.2f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pieces", type=int, default=200)
    p.add_argument("--gap-ms", type=float, default=5.0)
    p.add_argument("--runs", type=int, default=3)
    ns = p.parse_args()
    anyio.run(main, ns.pieces, ns.gap_ms / 1e3, ns.runs)
