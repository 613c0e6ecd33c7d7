"""Views: Graphviz layout vs live recolouring, and timeline frames, on synthetic chains.

    .venv/bin/python benchmarks/bench_render.py [--reps 5] [--quick]

Rows, for seeded layered chains of 200 and 1,000 steps (plain / side-effecting /
confirmation tools, explicit and data edges):
  dot text        chain_dot (pure Python)
  first render    to_svg, Graphviz cache cleared: system dot (subprocess) and WebAssembly
                  (wasm "cold" = the first call in the process, which compiles the module)
  live layout     LiveDag(...): one layout + template split
  patch / update  LiveDag.patched_svg (static SVG) and LiveDag.css (<style> block) for a new
                  set of statuses; sizes of the SVG and of one CSS update
and the timeline frames for a run with 10,000 attempts (2,500 steps x 4 attempts, built
into a MemoryStore event by event), plus the Gantt chart of a 200-step run to PNG.
Each cell is the median of --reps runs after one warm-up.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.events.status import StepStatus
from chainlab.render import LiveDag, available_backends, chain_dot, to_svg
from chainlab.render import svg as svg_module
from chainlab.render.style import TIMES
from chainlab.store import Event, MemoryStore, RunRecord


def toolbox() -> Toolbox:
    tb = Toolbox("bench")
    tb.tool(lambda x: x, name="plain")
    tb.tool(lambda x: x, name="effect", side_effects=True)
    tb.tool(lambda x: x, name="approve", side_effects=True, requires_confirmation=True)
    return tb


def layered_chain(n: int, seed: int = 7, width: int = 10) -> Chain:
    """n steps in layers of ~width; each step depends on 1-3 steps of the previous layer,
    half of them through a data reference."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    prev: list[str] = []
    layer: list[str] = []
    for i in range(n):
        sid = f"s{i:04d}"
        tool = rng.choices(["plain", "effect", "approve"], [8, 3, 1])[0]
        deps = rng.sample(prev, k=min(len(prev), rng.randint(1, 3))) if prev else []
        explicit = [d for j, d in enumerate(deps) if j % 2 == 0]
        data = [d for j, d in enumerate(deps) if j % 2 == 1]
        args = {"x": f"{{{{ steps.{data[0]}.output }}}}"} if data else {"x": i}
        steps.append({"id": sid, "tool": tool, "depends_on": explicit, "args": args})
        layer.append(sid)
        if len(layer) >= width:
            prev, layer = layer, []
    return Chain.from_dict({"name": f"layered-{n}", "steps": steps})


def median_ms(fn: Callable[[], Any], reps: int, warm: bool = True) -> float:
    if warm:
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def uncached(dot: str, backend: str) -> Callable[[], str]:
    def run() -> str:
        svg_module._cache.clear()
        return to_svg(dot, backend=backend)  # type: ignore[arg-type]

    return run


def statuses_cycle(ids: list[str], k: int) -> dict[str, str]:
    values = list(StepStatus)
    return {sid: values[(i + k) % len(values)] for i, sid in enumerate(ids)}


_COLD: list[bool] = []  # the first wasm render in this process compiles the module


def bench_dag(n: int, reps: int, rows: list[tuple[str, str, str]]) -> None:
    chain, tb = layered_chain(n), toolbox()
    dot = chain_dot(chain, tb)
    rows.append((f"{n} steps", "dot text (chain_dot)",
                 f"{median_ms(lambda: chain_dot(chain, tb), reps):.1f} ms"))
    backends = available_backends()
    for backend in ("dot", "wasm"):
        if backend not in backends:
            rows.append((f"{n} steps", f"first render, {backend}", "not installed"))
            continue
        if backend == "wasm" and not _COLD:
            _COLD.append(True)
            t = time.perf_counter()
            uncached(dot, "wasm")()
            rows.append((f"{n} steps", "first render, wasm cold (compiles module)",
                         f"{(time.perf_counter() - t) * 1000:.0f} ms"))
        ms = median_ms(uncached(dot, backend), reps)
        rows.append((f"{n} steps", f"first render, {backend}", f"{ms:.1f} ms"))
    if not backends:
        return

    def fresh_live() -> LiveDag:
        svg_module._cache.clear()
        return LiveDag(chain, tb)

    live_ms = median_ms(fresh_live, reps)
    rows.append((f"{n} steps", f"live layout (LiveDag, {backends[0]})", f"{live_ms:.1f} ms"))
    live = LiveDag(chain, tb)
    states = [statuses_cycle(live.step_ids, k) for k in range(14)]
    badges = {sid: f"{TIMES}2" for sid in live.step_ids[::7]}
    it = iter(range(10**9))
    patch = median_ms(lambda: live.patched_svg(states[next(it) % 14], badges), reps * 20)
    css = median_ms(lambda: live.css(states[next(it) % 14], badges), reps * 20)
    rows.append((f"{n} steps", "patch per update (patched_svg)", f"{patch:.2f} ms"))
    rows.append((f"{n} steps", "css per update (LiveDag.css)", f"{css:.2f} ms"))
    rows.append((f"{n} steps", "size: live SVG / static SVG / CSS update",
                 f"{len(live.svg.encode()) / 1024:.0f} KB / "
                 f"{len(live.patched_svg(states[0]).encode()) / 1024:.0f} KB / "
                 f"{len(live.css(states[3], badges).encode()) / 1024:.1f} KB"))


def attempts_store(n_steps: int, attempts: int) -> tuple[MemoryStore, str]:
    """A finished run whose every step failed attempts-1 times before succeeding."""
    store = MemoryStore()
    run_id = "bench"
    chain = {"name": "big", "steps": [{"id": f"s{i}", "tool": "plain"}
                                      for i in range(n_steps)]}
    store.create_run(RunRecord(run_id, "big", "running", 1, 0.0, 0.0, chain))
    events: list[Event] = []
    seq = 0
    t = 1_800_000_000.0

    def add(kind: str, step: str | None = None, attempt: int | None = None,
            **payload: Any) -> None:
        nonlocal seq, t
        seq += 1
        t += 0.01
        events.append(Event(run_id, seq, t, 1, kind, step, attempt, payload))

    add("run_started")
    for i in range(n_steps):
        sid = f"s{i}"
        for a in range(1, attempts + 1):
            add("step_ready", sid)
            add("step_started", sid, a, tool="plain", args={})
            if a < attempts:
                add("step_retry_scheduled", sid, a, error_kind="transient", error="503",
                    delay_s=0.5, due_at=t + 0.5)
            else:
                add("step_succeeded", sid, a, output=a)
    add("run_succeeded")
    store.append(run_id, 1, events, run_status="succeeded")
    return store, run_id


def bench_timeline(reps: int, rows: list[tuple[str, str, str]]) -> None:
    from chainlab.timeline import attempts_frame, events_frame, plot_timeline, waits_frame

    store, run_id = attempts_store(2500, 4)
    n_events = len(store.load_events(run_id))
    frame = attempts_frame(store, run_id)
    assert len(frame) == 10_000, len(frame)
    label = f"10,000 attempts ({n_events:,} events)"
    rows.append((label, "attempts_frame",
                 f"{median_ms(lambda: attempts_frame(store, run_id), reps):.0f} ms"))
    rows.append((label, "waits_frame",
                 f"{median_ms(lambda: waits_frame(store, run_id), reps):.0f} ms"))
    rows.append((label, "events_frame",
                 f"{median_ms(lambda: events_frame(store, run_id), reps):.0f} ms"))
    small, small_id = attempts_store(200, 2)

    def png() -> None:
        plot_timeline(small, small_id).savefig(io.BytesIO(), format="png")

    rows.append(("200 steps x 2 attempts", "plot_timeline to PNG",
                 f"{median_ms(png, max(1, reps // 2)):.0f} ms"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 steps only, 3 reps")
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps
    rows: list[tuple[str, str, str]] = []
    for n in (200,) if args.quick else (200, 1000):
        bench_dag(n, reps, rows)
    bench_timeline(reps, rows)
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    print(f"{'case':<{w1}}  {'measure':<{w2}}  median")
    print(f"{'-' * w1}  {'-' * w2}  {'-' * 12}")
    for case, what, value in rows:
        print(f"{case:<{w1}}  {what:<{w2}}  {value}")


if __name__ == "__main__":
    main()
