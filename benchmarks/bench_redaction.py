"""What redaction costs the kernel (DESIGN §24): W1 and W2 (1,000 no-op steps on a
MemoryStore), without a redactor, and with ``Runtime(redact=mask_pattern(...))`` (every
event's values walked, a second fold for what is shown), in ONE process.

    .venv/bin/python benchmarks/bench_redaction.py [--reps 15]

Run it with ``PYTHONPATH=<a checkout of main>`` too: the "no redactor" row is then main's
kernel (the row with a redactor is skipped there), so the two runs compare the cost of the
redaction hooks when no redactor is set. Each cell is the median of --reps runs. Printed,
never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import Workload, as_chain, chain_workload, fanout_workload, node_toolbox

import chainlab
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore


async def per_step(wl: Workload, redact: bool, reps: int) -> float:
    """Median us per step of a run of ``wl``."""
    chain = as_chain(wl, 8)
    kw = {}
    if redact:  # (main has no chainlab.redaction: imported only for this row)
        from chainlab.redaction import mask_pattern

        kw["redact"] = mask_pattern(r"sk-live-\w+")
    runtime = Runtime(node_toolbox(0.0), MemoryStore(), **kw)
    await (await runtime.start(chain)).wait()  # compiled, durations learned
    times = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        result = await (await runtime.start(chain)).wait()
        times.append(time.perf_counter() - t0)
        assert result.ok
    await runtime.aclose()
    return statistics.median(times) / wl.nodes * 1e6


async def main(reps: int) -> None:
    has = "redact" in inspect.signature(Runtime.__init__).parameters
    print(f"kernel per step, 1,000 steps, MemoryStore, median of {reps} (chainlab from "
          f"{Path(chainlab.__file__).parent.parent})")
    print(f"{'redactor':<22}{'W1 us':>8}{'W2 us':>8}")
    for redact in (False, True) if has else (False,):
        cells = [await per_step(wl, redact, reps)
                 for wl in (chain_workload(1_000), fanout_workload(1_000))]
        print(f"{'mask_pattern' if redact else 'none':<22}"
              + "".join(f"{c:>8.1f}" for c in cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    asyncio.run(main(parser.parse_args().reps))
