"""Deciding calls by rule and by grant (DESIGN §21), in ONE process on a MemoryStore.

    .venv/bin/python benchmarks/bench_policies.py [--reps 3] [--n 2000] [--grant-n 10000]

1. What a rule's decision adds per call. A ``for_each`` step makes ``--n`` calls of a no-op
   async tool, three ways:

   * ``plain``: the tool needs no confirmation and no rule is in force (the baseline);
   * ``rules, none apply``: the tool needs none, a deployment rule and a run rule are in
     force for other tools (every call is looked at by the gate, nothing is decided);
   * ``decided by rule``: the tool requires confirmation and a run rule approves every call
     (``args.x >= 0``): each call is recorded as waiting and approved ``by=policy:all``
     before it starts.

   Per way: microseconds per call (start to end of the run, divided by ``--n``) and the
   difference to ``plain``. The issue's target: deciding by rule adds at most 20 us a call.

2. One grant deciding ``--grant-n`` waiting ``for_each`` instances: every instance waits for
   a person, then ``run.approve(each[0], grant={"when": "args.x >= 0", "scope": "step"})``
   decides all of them (each its own approval, bound to its own args). Reported: the
   approve call alone (the sweep), and approve-to-end (the calls run too). Target: under 1 s.

Each figure is the fastest of ``--reps`` rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_for_each import toolbox as for_each_toolbox

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore


def toolbox() -> Toolbox:
    """bench_for_each's ``split`` and ``work``, and ``asked``: ``work`` that asks a person."""
    tb = for_each_toolbox()

    @tb.tool(requires_confirmation=True)
    async def asked(x: int) -> int:
        return x

    return tb


def chain(n: int, tool: str, policies: list[dict[str, Any]] | None = None) -> Chain:
    return Chain.from_dict({
        "name": f"{tool}-{n}", "options": {"max_concurrency": 8, "policies": policies or []},
        "steps": [{"id": "split", "tool": "split", "args": {"n": n}},
                  {"id": "each", "tool": tool, "for_each": "{{ steps.split.output }}",
                   "args": {"x": "{{ item }}"}}]})


OTHER = [{"id": "elsewhere", "tool": "split", "when": "args.n < 0", "decision": "reject"}]
ALL = [{"id": "all", "tool": "asked", "when": "args.x >= 0", "decision": "approve"}]


async def per_call(n: int, reps: int) -> dict[str, float]:
    ways = {
        "plain": (Runtime(toolbox(), MemoryStore()), chain(n, "work")),
        "rules, none apply": (Runtime(toolbox(), MemoryStore(), policies=OTHER),
                              chain(n, "work", OTHER)),
        "decided by rule": (Runtime(toolbox(), MemoryStore()), chain(n, "asked", ALL)),
    }
    best = {name: float("inf") for name in ways}
    for _ in range(reps + 1):  # (the first round warms the compile cache)
        for name, (rt, ch) in ways.items():
            t0 = time.perf_counter()
            run = await rt.start(ch)
            result = await run.wait()
            took = time.perf_counter() - t0
            assert result.ok, (name, result.status, result.waiting)
            best[name] = min(best[name], took)
    return {name: secs / n * 1e6 for name, secs in best.items()}


async def granted(n: int, reps: int) -> tuple[float, float]:
    sweep = end = float("inf")
    for _ in range(reps):
        rt = Runtime(toolbox(), MemoryStore())
        run = await rt.start(chain(n, "asked"))
        result = await run.wait()
        assert len(result.waiting) == n
        t0 = time.perf_counter()
        await run.approve("each[0]", grant={"when": "args.x >= 0", "scope": "step"})
        t1 = time.perf_counter()
        result = await run.wait()
        t2 = time.perf_counter()
        assert result.ok, result.status
        decided = sum(1 for st in run.state.steps.values()
                      if (st.decided or {}).get("by") == "grant:g1")
        assert decided == n - 1, decided
        sweep, end = min(sweep, t1 - t0), min(end, t2 - t0)
    return sweep, end


async def main(args: argparse.Namespace) -> None:
    us = await per_call(args.n, args.reps)
    print(f"\ndeciding a call by rule: {args.n} calls of a for_each step, us per call "
          f"(fastest of {args.reps})")
    print(f"{'way':<22}{'us/call':>10}{'vs plain':>11}")
    for name, value in us.items():
        print(f"{name:<22}{value:>10.1f}{value - us['plain']:>+11.1f}")
    added = us["decided by rule"] - us["plain"]
    print(f"target: a rule's decision adds <= 20 us a call: {added:.1f} us "
          f"({'met' if added <= 20 else 'NOT met'})")
    sweep, end = await granted(args.grant_n, args.reps)
    print(f"\none grant deciding {args.grant_n:,} waiting for_each instances "
          f"(fastest of {args.reps})")
    print(f"{'what':<34}{'seconds':>10}")
    print(f"{'approve with grant (the sweep)':<34}{sweep:>10.3f}")
    print(f"{'approve to the run end':<34}{end:>10.3f}")
    print(f"target: under 1 s: sweep {'met' if sweep < 1 else 'NOT met'}, "
          f"to the end {'met' if end < 1 else 'NOT met'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--grant-n", type=int, default=10_000)
    anyio.run(main, parser.parse_args())
