"""What a large plan costs before it runs: loading YAML, validating, compiling, in ONE process.

    .venv/bin/python benchmarks/bench_plan.py [--sizes 1000,10000,50000] [--reps 3] [--quick]

Shapes (every step calls one tool ``node(xs: list[int]) -> int``):
  linear   s0 -> s1 -> ... -> sN-1, each step reading the previous one's output
  fan-out  r -> c0..cN-3 (each reading r's output) -> join (depends_on all of them)
Columns, per shape and size N (steps):
  from_yaml   Chain.from_yaml(text) of the chain's own to_yaml() (parse, check, build)
  validate    chain.validate(toolbox) (ids, graph, references, tools, args)
  compile     chainlab.runtime.engine.compile.compile_chain (scheduler nodes, parsed templates)
Each cell is the median of --reps runs after one warm-up (gc runs between runs); ms and
ms per step. A last table compares PyYAML's pure-Python loader with the libyaml (C) loader
that chainlab uses when PyYAML has it, on from_yaml at 10,000 steps (the pure loader is
too slow to run at 50,000). Timings are for comparison on one machine, not claims.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Chain, Toolbox
from chainlab.plan import yamltext


def linear(n: int) -> Chain:
    steps = [
        {"id": f"s{i}", "tool": "node",
         "args": {"xs": [f"{{{{ steps.s{i - 1}.output }}}}"] if i else []}}
        for i in range(n)
    ]
    return Chain.from_dict({"name": "linear", "steps": steps})


def fan_out(n: int) -> Chain:
    children = [f"c{i}" for i in range(n - 2)]
    steps: list[dict[str, Any]] = [{"id": "r", "tool": "node", "args": {"xs": []}}]
    steps += [
        {"id": c, "tool": "node", "args": {"xs": ["{{ steps.r.output }}"]}} for c in children
    ]
    steps.append({"id": "join", "tool": "node", "depends_on": children, "args": {"xs": []}})
    return Chain.from_dict({"name": "fan-out", "steps": steps})


SHAPES: dict[str, Callable[[int], Chain]] = {"linear": linear, "fan-out": fan_out}


def toolbox() -> Toolbox:
    tb = Toolbox("bench")

    @tb.tool
    async def node(xs: list[int]) -> int:
        return 1 + sum(xs)

    return tb


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def compiler() -> Callable[[Chain, Toolbox], Any] | None:
    try:
        from chainlab.runtime.engine.compile import compile_chain
    except ImportError:  # the runtime moved: the table says n/a rather than failing
        return None
    return lambda chain, tb: compile_chain(chain, tb, {}, chain.options)


def stages(sizes: list[int], reps: int) -> None:
    tb = toolbox()
    compile_chain = compiler()
    loader = "libyaml (C)" if yamltext.LOADER is yamltext.C_LOADER else "pure-Python"
    print(f"plan stages, median of {reps} runs, YAML loader: {loader}")
    head = f"{'shape':<9}{'steps':>8}{'KB':>7}"
    for col in ("from_yaml", "validate", "compile"):
        head += f"{col + ' ms':>15}{'ms/step':>9}"
    print(head)
    for name, build in SHAPES.items():
        for n in sizes:
            chain = build(n)
            text = chain.to_yaml()
            loaded = Chain.from_yaml(text)
            assert loaded == chain
            cells = [
                median_ms(partial(Chain.from_yaml, text), reps),
                median_ms(partial(loaded.validate, tb), reps),
                median_ms(partial(compile_chain, loaded, tb), reps) if compile_chain else None,
            ]
            row = f"{name:<9}{n:>8}{len(text) // 1024:>7}"
            for ms in cells:
                row += f"{'n/a':>15}{'':>9}" if ms is None else f"{ms:>15.1f}{ms / n:>9.4f}"
            print(row, flush=True)


def loaders(n: int, reps: int) -> None:
    if yamltext.C_LOADER is None:
        print(f"\nPyYAML has no libyaml here (yaml.__with_libyaml__ = {yaml.__with_libyaml__}):"
              " only the pure-Python loader is available")
        return
    print(f"\nfrom_yaml at {n} steps, pure-Python loader vs libyaml (C) loader, median of "
          f"{reps} runs")
    print(f"{'shape':<9}{'pure ms':>10}{'C ms':>10}{'pure / C':>10}")
    for name, build in SHAPES.items():
        text = build(n).to_yaml()
        timed = {}
        for label, chosen in (("pure", yamltext.PURE_LOADER), ("c", yamltext.C_LOADER)):
            yamltext.LOADER = chosen
            try:
                timed[label] = median_ms(partial(Chain.from_yaml, text), reps)
            finally:
                yamltext.LOADER = yamltext.C_LOADER
        print(f"{name:<9}{timed['pure']:>10.1f}{timed['c']:>10.1f}"
              f"{timed['pure'] / timed['c']:>10.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000",
                        help="comma-separated step counts")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="sizes 1000,10000, one run each, loaders at 1000 steps")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    reps = args.reps
    loader_n = 10_000
    if args.quick:
        sizes, reps, loader_n = [1000, 10_000], 1, 1000
    stages(sizes, reps)
    loaders(loader_n, reps)


if __name__ == "__main__":
    main()
