"""Work that grows as the chain grows and no faster (issue 38): counts, never clocks.

Starting a chain of N steps validates it (references, their types against the tools'
schemas, the graph) and compiles it. Each of these is computed once per tool or once per
chain: the JSON schemas of a tool are generated once however many steps call it, and the
steps are looked up through an index, never by scanning ``chain.steps`` for each reference
(issue 38 measured 6 s at 10,000 steps when they were). The counts compare a chain of 100
steps with one of 10,000: linear work multiplies by 100, quadratic work by 10,000.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic.json_schema import GenerateJsonSchema

from chainlab import Chain, Toolbox
from chainlab.plan.parts import Step
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

SMALL, BIG = 100, 10_000


def toolbox() -> Toolbox:
    tb = Toolbox("complexity")

    @tb.tool
    async def node(x: int = 0) -> int:
        return x + 1

    @tb.tool
    async def pair(a: int = 0, b: int = 0) -> dict[str, int]:
        return {"sum": a + b}

    return tb


def whole_refs(n: int) -> Chain:
    """The usual form: each step takes one whole reference to the previous step's output,
    every other one through a field of a dict output."""
    steps: list[dict[str, Any]] = [{"id": "s0", "tool": "pair", "args": {}}]
    for i in range(1, n):
        if i % 2:
            steps.append({"id": f"s{i}", "tool": "node",
                          "args": {"x": f"{{{{ steps.s{i - 1}.output.sum }}}}"}})
        else:
            steps.append({"id": f"s{i}", "tool": "pair",
                          "args": {"a": f"{{{{ steps.s{i - 1}.output }}}}", "b": 1}})
    return Chain.from_dict({"name": f"whole-{n}", "steps": steps})


def fan_out(n: int) -> Chain:
    steps: list[dict[str, Any]] = [{"id": "root", "tool": "node", "args": {}, "save_as": "r"}]
    steps += [{"id": f"c{i}", "tool": "pair", "args": {"a": "{{ r }}", "b": i}}
              for i in range(n - 2)]
    steps.append({"id": "join", "tool": "node", "depends_on": [f"c{i}" for i in range(n - 2)]})
    return Chain.from_dict({"name": f"fan-{n}", "steps": steps})


SHAPES = {"whole references": whole_refs, "fan-out": fan_out}


class CountingSteps(list[Step]):
    """``chain.steps`` that counts every step a Python loop visits (a scan of the steps
    for each reference is N visits per reference)."""

    visits = 0

    def __iter__(self) -> Iterator[Step]:
        for step in super().__iter__():
            CountingSteps.visits += 1
            yield step

    def __getitem__(self, index: Any) -> Any:
        CountingSteps.visits += 1
        return super().__getitem__(index)


class Counts:
    def __init__(self, generations: int, visits: int, calls: int):
        self.generations, self.visits, self.calls = generations, visits, calls

    def __repr__(self) -> str:
        return f"Counts(generations={self.generations}, visits={self.visits}, " \
               f"calls={self.calls})"


def count(chain: Chain, work: Callable[[Chain], None], monkeypatch: pytest.MonkeyPatch
          ) -> Counts:
    """The JSON schema generations, the step visits and the Python function calls that
    ``work(chain)`` makes."""
    generations = 0
    generate = GenerateJsonSchema.generate

    def counted(self: GenerateJsonSchema, *args: Any, **kwargs: Any) -> Any:
        nonlocal generations
        generations += 1
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(GenerateJsonSchema, "generate", counted)
    chain.__dict__["steps"] = CountingSteps(chain.steps)
    CountingSteps.visits = 0
    profile = cProfile.Profile()
    profile.enable()
    try:
        work(chain)
    finally:
        profile.disable()
        monkeypatch.undo()
    calls = sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
    return Counts(generations, CountingSteps.visits, calls)


def validate(chain: Chain) -> None:
    chain.validate(toolbox())


def start(chain: Chain) -> None:
    async def main() -> None:
        runtime = Runtime(toolbox(), MemoryStore())
        run = await runtime.start(chain, paused=True)  # validate, compile, store, first event
        await run.cancel()
        await runtime.aclose()

    anyio.run(main)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("work", [validate, start], ids=["validate", "start"])
def test_starting_a_chain_is_linear_in_its_steps(
        shape: str, work: Callable[[Chain], None], monkeypatch: pytest.MonkeyPatch) -> None:
    small = count(SHAPES[shape](SMALL), work, monkeypatch)
    big = count(SHAPES[shape](BIG), work, monkeypatch)
    # the schemas: generated once per tool (input and output of the two tools), whatever N
    assert small.generations == big.generations <= 4, (small, big)
    # the steps: a constant number of visits per step, never a scan per reference
    assert big.visits <= BIG / SMALL * small.visits, (small, big)
    assert big.visits <= 20 * BIG, (small, big)
    # and every Python function call: 100 times the steps is at most 100 times the calls
    assert big.calls <= BIG / SMALL * small.calls, (small, big)


def test_the_counters_see_quadratic_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above would catch: one scan of the steps per step (the lookup issue
    38 found) and one schema per step."""
    def scan_per_step(chain: Chain) -> None:
        tool = toolbox().get("node")
        for step in chain.steps:
            next(s for s in chain.steps if s.id == step.id)
            tool.input_schema()

    small = count(fan_out(SMALL), scan_per_step, monkeypatch)
    big = count(fan_out(BIG // 10), scan_per_step, monkeypatch)
    assert big.visits > BIG // 10 / SMALL * small.visits * 5
    assert big.generations == BIG // 10 and small.generations == SMALL
    assert big.calls > BIG // 10 / SMALL * small.calls


# ---------------------------------------------------------------------------- a run
def run_chain(n: int, shape: str) -> Chain:
    """A chain (each step reads the previous one's output) or a fan-out (every step reads
    the root's), every step a no-op."""
    prev = (lambda i: f"s{i - 1}") if shape == "chain" else (lambda i: "s0")
    steps = [{"id": f"s{i}", "tool": "node",
              "args": {"x": f"{{{{ steps.{prev(i)}.output }}}}"} if i else {}}
             for i in range(n)]
    return Chain.from_dict({"name": f"{shape}-{n}", "steps": steps})


def run_counts(n: int, shape: str) -> tuple[int, int]:
    """(Python function calls of one run, start to end; GC-tracked objects the finished
    run keeps), the chain compiled by an earlier run of it (issue 38's kernel figures are
    per step of a warm run)."""
    import gc

    async def main() -> tuple[int, int]:
        runtime = Runtime(toolbox(), MemoryStore())
        chain = run_chain(n, shape)
        assert (await (await runtime.start(chain)).wait()).ok
        gc.collect()
        objects = len(gc.get_objects())
        profile = cProfile.Profile()
        profile.enable()
        run = await runtime.start(chain)
        assert (await run.wait()).ok
        profile.disable()
        gc.collect()
        kept = len(gc.get_objects()) - objects
        await runtime.aclose()
        calls = sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
        return calls, kept

    return anyio.run(main)


def isolated_run_counts(n: int, shape: str) -> tuple[int, int]:
    """:func:`run_counts` in a new interpreter: gc.get_objects() counts the whole process,
    and in a pytest worker that has run other tests a thread they left (a server, a
    heartbeat) allocates while the 10,000-step run goes, which is no work of this run."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from tests.test_complexity import run_counts; "
            f"print(json.dumps(run_counts({n}, {shape!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    calls, kept = json.loads(out.strip().splitlines()[-1])
    return int(calls), int(kept)


# function calls per step of a warm run at 10,000 steps, where issue 38's kernel work left
# them (chain 85, fan-out 98; 115 and 147 before it), with a margin for library versions
CALLS_PER_STEP = {"chain": 92, "fan-out": 105}


@pytest.mark.parametrize("shape", ["chain", "fan-out"])
def test_a_run_does_the_same_work_per_step_at_100_and_10000_steps(shape: str) -> None:
    """The kernel's work and what a finished run keeps grow with the steps and no faster:
    function calls and kept objects per step at 10,000 steps are at most those at 100
    (where the run's fixed costs weigh more), and the calls per step stay where they are."""
    small_calls, small_kept = isolated_run_counts(SMALL, shape)
    big_calls, big_kept = isolated_run_counts(BIG, shape)
    assert big_calls / BIG <= small_calls / SMALL, (small_calls, big_calls)
    assert big_calls / BIG <= CALLS_PER_STEP[shape], (big_calls / BIG, CALLS_PER_STEP[shape])
    assert big_kept / BIG <= small_kept / SMALL * 1.05, (small_kept, big_kept)
    assert big_kept / BIG < 10  # a step's events, state, attempt and args, no more
