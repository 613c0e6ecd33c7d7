"""The shared benchmark workloads (identical to ../shared/bench/peers.py: same shapes, same
seed), as chainlab chains and as plain dependency maps for the stdlib baselines.

Every node computes ``1 + sum(values of its dependencies)`` (roots: 1), after a sleep in W3.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from chainlab import Chain, Toolbox
from chainlab.events import Event, EventKind
from chainlab.store.base import RunRecord


@dataclass
class Workload:
    id: str
    order: list[str]
    deps: dict[str, tuple[str, ...]]
    sleep_s: float = 0.0
    sinks: list[str] = field(default_factory=list)
    expected: int = 0

    def __post_init__(self) -> None:
        has_succ = {d for n in self.order for d in self.deps[n]}
        self.sinks = [n for n in self.order if n not in has_succ]
        vals: dict[str, int] = {}
        for n in self.order:
            vals[n] = 1 + sum(vals[d] for d in self.deps[n])
        self.expected = sum(vals[s] for s in self.sinks)

    @property
    def nodes(self) -> int:
        return len(self.order)

    def lower_bound_s(self, concurrency: int) -> float:
        """max(critical path, total work / concurrency) for unit-duration nodes."""
        depth: dict[str, int] = {}
        for n in self.order:
            depth[n] = 1 + max((depth[d] for d in self.deps[n]), default=0)
        return max(max(depth.values()), len(self.order) / concurrency) * self.sleep_s


def chain_workload(n: int) -> Workload:
    order = [f"n{i}" for i in range(n)]
    return Workload("W1", order, {o: ((order[i - 1],) if i else ()) for i, o in enumerate(order)})


def fanout_workload(n: int) -> Workload:
    children = [f"c{i}" for i in range(n)]
    deps: dict[str, tuple[str, ...]] = {"root": ()}
    deps.update({c: ("root",) for c in children})
    deps["join"] = tuple(children)
    return Workload("W2", ["root", *children, "join"], deps)


def layered_workload(
    n: int = 200, layers: int = 10, seed: int = 42, max_deps: int = 3, sleep_s: float = 0.02
) -> Workload:
    rng = random.Random(seed)
    per = [n // layers + (1 if i < n % layers else 0) for i in range(layers)]
    lay: list[list[str]] = []
    k = 0
    for size in per:
        lay.append([f"n{k + j}" for j in range(size)])
        k += size
    deps: dict[str, tuple[str, ...]] = {}
    for li, layer in enumerate(lay):
        for node in layer:
            if li == 0:
                deps[node] = ()
            else:
                prev = lay[li - 1]
                kk = rng.randint(1, min(max_deps, len(prev)))
                deps[node] = tuple(sorted(rng.sample(prev, kk), key=lambda s: int(s[1:])))
    return Workload("W3", [x for layer in lay for x in layer], deps, sleep_s=sleep_s)


def node_toolbox(sleep_s: float, *, side_effects: bool = False,
                 idempotent: bool = True) -> Toolbox:
    """A toolbox with one async tool ``node(xs: list[int]) -> int``."""
    toolbox = Toolbox("bench")
    if sleep_s > 0:

        async def node(xs: list[int]) -> int:
            await asyncio.sleep(sleep_s)
            return 1 + sum(xs)
    else:

        async def node(xs: list[int]) -> int:
            return 1 + sum(xs)

    toolbox.tool(node, side_effects=side_effects,
                 idempotent=idempotent if side_effects else None)
    return toolbox


def as_chain(wl: Workload, concurrency: int) -> Chain:
    steps: list[dict[str, Any]] = [
        {
            "id": n,
            "tool": "node",
            "args": {"xs": [f"{{{{ steps.{d}.output }}}}" for d in wl.deps[n]]},
            "retry": {"max_attempts": 1},
        }
        for n in wl.order
    ]
    return Chain.from_dict(
        {"name": f"bench-{wl.id}", "steps": steps, "options": {"max_concurrency": concurrency}}
    )


class CommitCounter:
    """Counts a SQL store writer's transactions (group commits) while in the block."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.commits = 0

    def _batches(self) -> int:
        writer = self.store._writer
        return 0 if writer is None else int(writer.batches)

    def __enter__(self) -> CommitCounter:
        self._start = self._batches()
        return self

    def __exit__(self, *exc: object) -> None:
        self.commits = self._batches() - self._start


def store_only(store: Any, n: int) -> Callable[[], Awaitable[float]]:
    """The unsafe row's store traffic without the kernel: per step, the same three events
    (ready, started, succeeded) appended and one ``await flush`` before the call, as the
    write-ahead path does (so one commit per step, plus the loop -> writer -> loop hand-off)."""
    runs = iter(range(1_000_000))
    tag = f"{time.time_ns():x}"  # run ids unique across benchmark invocations

    async def go() -> float:
        run_id = f"store-only-{tag}-{next(runs)}"
        store.create_run(RunRecord(run_id, "w1", "running", 1, 0.0, 0.0, {}))
        seq = 0
        t0 = time.perf_counter()
        for i in range(n):
            step_id = f"n{i}"
            args = {"xs": [i] if i else []}
            started = {"args": args, "tool": "node", "code": "0" * 16,
                       "idempotency_key": f"{run_id}:{step_id}:{i:064x}"}
            for kind, payload in ((EventKind.STEP_READY, {}),
                                  (EventKind.STEP_STARTED, started)):
                seq += 1
                store.append(run_id, 1, (Event(run_id, seq, time.time(), 1, kind, step_id, 1,
                                               payload),))
            await store.flush(run_id, 1)  # the write-ahead barrier before an unsafe call
            seq += 1
            store.append(run_id, 1, (Event(run_id, seq, time.time(), 1,
                                           EventKind.STEP_SUCCEEDED, step_id, 1,
                                           {"output": i + 1}),))
        await store.flush(run_id, 1)
        return time.perf_counter() - t0

    return go


async def retained(runtime: Any, chain: Chain) -> tuple[int, int]:
    """(bytes a finished run of ``chain`` keeps after gc, bytes at its peak), by
    tracemalloc's count from just before ``runtime.start`` to the end of the run."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    run = await runtime.start(chain)
    result = await run.wait()
    assert result.ok, result.errors
    del result  # (a copy of the outputs: not what the run keeps)
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return after - before, peak - before
