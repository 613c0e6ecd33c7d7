"""What tracing costs the kernel per step (DESIGN §24, issue 48 item 2): W1 and W2 (1,000
no-op steps on a MemoryStore, as bench_kernel_rules) untraced, and traced through the SDK
with a batch span processor, in ONE process, rows interleaved run by run.

    .venv/bin/python benchmarks/bench_tracing.py [--reps 15] [--store memory|sqlite]

Rows:
  no provider          Runtime() with no provider configured: no span is made, no module
                       of OpenTelemetry is imported by chainlab (tests/tracing/
                       test_no_cost.py counts the calls: none per step)
  batch, in memory     tracer_provider=an SDK provider, BatchSpanProcessor into the SDK's
                       InMemorySpanExporter (the spans' making and queueing, no I/O)
  batch, OTLP/HTTP     the same into the OTLP/HTTP protobuf exporter, to a local receiver
                       (chainlab.testing.otlp_receiver): encoding and sending in the batch
                       thread, as `--otlp` does
  batch, contents      as "batch, in memory" with capture_content=True (args and outputs
                       as JSON on each span)
The target: at most +25% per step with the batch processor. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from workloads import Workload, as_chain, chain_workload, fanout_workload, node_toolbox

from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.testing.otlp_receiver import OtlpReceiver
from chainlab.tracing.otlp import traces_url

ROWS = ("no provider", "batch, in memory", "batch, OTLP/HTTP", "batch, contents")


def provider_for(row: str, receiver: OtlpReceiver) -> tuple[Any, bool]:
    """(tracer_provider, capture_content) of ``row``."""
    if row == "no provider":
        return None, False
    exporter: Any = OTLPSpanExporter(traces_url(receiver.url), timeout=5) \
        if row == "batch, OTLP/HTTP" else InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    return provider, row == "batch, contents"


async def per_step(wl: Workload, reps: int, receiver: OtlpReceiver, store: str,
                   folder: Path) -> dict[str, float]:
    """Median us per step of each row."""
    chain = as_chain(wl, 8)
    runtimes = {}
    for row in ROWS:
        provider, capture = provider_for(row, receiver)
        where = MemoryStore() if store == "memory" else SQLiteStore(
            folder / f"{wl.id}-{ROWS.index(row)}.db")
        runtime = Runtime(node_toolbox(0.0), where, tracer_provider=provider,
                          capture_content=capture)
        assert (runtime.host.tracing is None) == (row == "no provider")
        await (await runtime.start(chain)).wait()  # compiled, durations learned
        runtimes[row] = (runtime, provider)
    times: dict[str, list[float]] = {row: [] for row in ROWS}
    for _ in range(reps):
        for row in ROWS:
            runtime, provider = runtimes[row]
            gc.collect()
            t0 = time.perf_counter()
            result = await (await runtime.start(chain)).wait()
            times[row].append(time.perf_counter() - t0)
            assert result.ok
            if provider is not None:  # what the batch thread still holds goes now (untimed)
                provider.force_flush()
    for runtime, provider in runtimes.values():
        await runtime.aclose()
        if provider is not None:
            provider.shutdown()
    return {row: statistics.median(ts) / wl.nodes * 1e6 for row, ts in times.items()}


async def main(reps: int, store: str) -> None:
    print(f"tracing per step, 1,000 steps, {store} store, median of {reps} (python "
          f"{sys.version.split()[0]})")
    print(f"{'row':<20}{'W1 us':>8}{'+%':>7}{'W2 us':>8}{'+%':>7}")
    with OtlpReceiver() as receiver, tempfile.TemporaryDirectory() as folder:
        cells = {row: "" for row in ROWS}
        for wl in (chain_workload(1_000), fanout_workload(1_000)):
            found = await per_step(wl, reps, receiver, store, Path(folder))
            base = found["no provider"]
            for row in ROWS:
                cells[row] += f"{found[row]:>8.1f}{(found[row] / base - 1) * 100:>+7.1f}"
        for row in ROWS:
            print(f"{row:<20}{cells[row]}")
        print(f"(the receiver decoded {len(receiver.received()):,} spans)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.store))
