"""Properties of issue 25, over random inputs.

1. A run's final state (every step's status and output, the memory) is the same under any
   completion order of its parallel branches and any release policy: each step writes only
   its own output and its own ``save_as`` key, so the order cannot matter (docs: concepts,
   scheduling).
2. Random sequences of start / approve / reject / fork / rollback / resume / takeover across
   two runtimes of one store: the ledger of effects never shows an effect without an
   approval of THAT run for THOSE args, never two effects for one approval, never an effect
   after a rejection, and every compensation undoes an effect of the same run (once).
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainlab import Chain, Toolbox
from chainlab._json import args_hash
from chainlab.errors import ChainlabError
from chainlab.events import EventKind
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore, Store
from chainlab.tools import CallContext

# ============================================================================ 1. order
DAGS = st.integers(min_value=3, max_value=9).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n),
    st.lists(st.integers(0, 3), min_size=n, max_size=n),  # sleep units per step
    st.lists(st.booleans(), min_size=n, max_size=n),  # a `when` on the step
))


def _dag_chain(n: int, deps: list[list[int]], gated: list[bool], options: dict[str, Any]
               ) -> Chain:
    steps = []
    gated = list(gated)
    for i in range(n):
        parents = sorted({d for d in deps[i] if d < i})
        args = {"me": i, "inputs": [f"{{{{ steps.s{d}.output }}}}" for d in parents]}
        step: dict[str, Any] = {"id": f"s{i}", "tool": "work", "args": args,
                                "save_as": f"k{i}"}
        if gated[i] and parents and not gated[parents[0]]:  # (None > 3 is an error, not false)
            step["when"] = f"{{{{ steps.s{parents[0]}.output }}}} > 3"
        else:
            gated[i] = False
        steps.append(step)
    return Chain.from_dict({"name": "order", "steps": steps, "options": options})


def _order_tools(delays: list[int], rng: random.Random) -> Toolbox:
    tb = Toolbox("order")

    @tb.tool
    async def work(me: int, inputs: list[int | None]) -> int:
        await anyio.sleep(delays[me] * 0.0005 * rng.random())  # a different order each run
        return (me * 7 + sum(i or 0 for i in inputs)) % 11  # (None: a skipped input)

    return tb


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DAGS, st.integers(0, 10**6))
def test_the_final_state_does_not_depend_on_completion_order_or_release_policy(
        dag: tuple[int, list[list[int]], list[int], list[bool]], seed: int) -> None:
    n, deps, delays, gated = dag
    rng = random.Random(seed)

    async def main() -> list[Any]:
        finals = []
        for options in ({"priority": "declaration", "max_concurrency": 1},
                        {"priority": "declaration", "max_concurrency": 4},
                        {"priority": "critical_path", "max_concurrency": 3},
                        {"priority": "critical_path", "max_concurrency": 8},
                        {"mode": "sequential"}):
            rt = Runtime(_order_tools(delays, rng), MemoryStore())
            run = await rt.start(_dag_chain(n, deps, gated, options))
            result = await run.wait()
            finals.append((result.status, result.steps, result.outputs, run.memory))
            await rt.aclose()
        return finals

    finals = anyio.run(main)
    assert all(f == finals[0] for f in finals[1:]), finals


# ============================================================================ 2. ledger
class World:
    """Effects as the world saw them: (kind, run_id, step_id, args, charge id)."""

    def __init__(self) -> None:
        self.effects: list[dict[str, Any]] = []

    def tools(self) -> Toolbox:
        tb = Toolbox("ledger")
        world = self

        @tb.tool
        def fetch(n: int) -> int:
            return n + 1

        @tb.tool(side_effects=True, requires_confirmation=True,
                 compensate=("refund", {"charge_id": "{{ output.id }}"}))
        def charge(amount: int, ctx: CallContext) -> dict[str, Any]:
            cid = f"{ctx.run_id}/{ctx.step_id}/{len(world.effects)}"
            world.effects.append({"kind": "charge", "run": ctx.run_id, "step": ctx.step_id,
                                  "args": {"amount": amount}, "id": cid})
            return {"id": cid, "amount": amount}

        @tb.tool(side_effects=True,
                 compensate=("refund", {"charge_id": "{{ output.id }}"}))
        def charge_now(amount: int, ctx: CallContext) -> dict[str, Any]:
            cid = f"{ctx.run_id}/{ctx.step_id}/{len(world.effects)}"
            world.effects.append({"kind": "charge_now", "run": ctx.run_id,
                                  "step": ctx.step_id, "args": {"amount": amount}, "id": cid})
            return {"id": cid, "amount": amount}

        @tb.tool(side_effects=True, idempotent=True)
        def refund(charge_id: str, ctx: CallContext) -> str:
            world.effects.append({"kind": "refund", "run": ctx.run_id, "step": ctx.step_id,
                                  "args": {"charge_id": charge_id}})
            return charge_id

        return tb


FLOW = Chain.from_dict({"name": "ledger", "steps": [
    {"id": "a", "tool": "fetch", "args": {"n": "{{ context.n }}"}},
    {"id": "pay", "tool": "charge", "args": {"amount": "{{ steps.a.output }}"}},
    {"id": "b", "tool": "fetch", "args": {"n": 1}},
    {"id": "tip", "tool": "charge_now", "args": {"amount": "{{ context.n }}"},
     "depends_on": ["b"]},
]})

OPS = st.lists(st.tuples(
    st.sampled_from(["start", "approve", "approve", "approve", "approve_edit", "approve",
                     "reject", "fork", "fork_ctx", "rollback", "resume", "takeover"]),
    st.integers(0, 1),  # which runtime
    st.integers(0, 9),  # which run
    st.sampled_from(["pay", "pay", "tip"]),
), min_size=3, max_size=16)


async def _settle(runtimes: list[Runtime]) -> None:
    for rt in runtimes:
        for run_id in [r.run_id for r in rt.runs()]:
            run = rt.driven(run_id)
            if run is not None:
                with anyio.fail_after(20), contextlib.suppress(ChainlabError):
                    await run.wait()  # (fenced: another runtime took it over)


async def _play(world: World, ops: list[tuple[str, int, int, str]], stores: list[Store],
                counts: Counter[str]) -> None:
    runtimes = [Runtime(world.tools(), s, heartbeat_s=0.05, stale_after_s=3.0,
                        mailbox_poll_s=0.01) for s in stores]
    ids: list[str] = []
    for op, who, pick, step in ops:
        rt = runtimes[who]
        run_id = ids[pick % len(ids)] if ids else None
        counts[op] += 1
        try:
            if op == "start" or run_id is None:
                run = await rt.start(FLOW, {"n": pick})
                ids.append(run.run_id)
            elif op in ("approve", "reject"):
                await rt.decide(run_id, step, op, timeout=10,
                                **({"reason": "no"} if op == "reject" else {}))
            elif op == "approve_edit":  # what runs is what was approved: these args
                await rt.decide(run_id, step, "approve", args={"amount": 100 + pick},
                                timeout=10)
            elif op in ("fork", "fork_ctx"):
                edits = {"context": {"n": pick + 1}} if op == "fork_ctx" else {}
                fork = await rt.fork(run_id, **edits)
                ids.append(fork.run_id)
            elif op == "rollback":
                live = rt.driven(run_id) or await rt.resume(run_id)
                await live.wait()
                await live.rollback()
            elif op == "resume":
                await rt.resume(run_id)
            elif op == "takeover":
                await rt.resume(run_id, force=True)
        except ChainlabError as exc:  # refused: a run that is not in that state, a driver
            counts[f"refused {type(exc).__name__}"] += 1  # that is alive, a lost race
        await _settle(runtimes)
    for rt in runtimes:
        await rt.aclose()


def _check(world: World, store: Store) -> int:
    """The ledger against every run's log; returns the number of effects checked."""
    approvals: dict[tuple[str, str], list[str]] = {}  # (run, step) -> approved args hashes
    rejected: set[tuple[str, str]] = set()
    confirm_first: set[tuple[str, str]] = set()  # a fork's steps that need a person
    for record in store.list_runs():
        waiting: dict[str, str | None] = {}
        for ev in store.load_events(record.run_id):
            key = (record.run_id, ev.step_id or "")
            if ev.kind == EventKind.RUN_FORKED:
                confirm_first |= {(record.run_id, s) for s in ev.payload.get("confirm_first", {})}
            elif ev.kind == EventKind.STEP_WAITING_CONFIRMATION:
                waiting[ev.step_id or ""] = ev.payload.get("args_hash")
            elif ev.kind == EventKind.STEP_APPROVED:
                approvals.setdefault(key, []).append(
                    ev.payload.get("args_hash") or waiting.get(ev.step_id or "") or "")
            elif ev.kind == EventKind.STEP_REJECTED:
                rejected.add(key)
    charges = [e for e in world.effects if e["kind"] == "charge"
               or (e["kind"] == "charge_now" and (e["run"], e["step"]) in confirm_first)]
    per_key = Counter((e["run"], e["step"]) for e in charges)
    for e in charges:
        key = (e["run"], e["step"])
        got = approvals.get(key, [])
        assert args_hash(e["args"]) in got, f"an effect without this run's approval: {e}"
        assert key not in rejected, f"an effect after a rejection: {e}"
    for key, n in per_key.items():
        assert n <= len(approvals.get(key, [])), f"{n} effects for one approval: {key}"
    made = {e["id"]: e["run"] for e in world.effects if "id" in e}
    unconfirmed = Counter((e["run"], e["step"]) for e in world.effects
                          if e["kind"] == "charge_now")
    assert all(n == 1 for n in unconfirmed.values()), f"an effect made twice: {unconfirmed}"
    refunds = [e for e in world.effects if e["kind"] == "refund"]
    for e in refunds:
        cid = e["args"]["charge_id"]
        assert cid in made, f"a compensation of nothing: {e}"
        assert made[cid] == e["run"], f"a run compensated another run's effect: {e}"
    assert max(Counter(e["args"]["charge_id"] for e in refunds).values(), default=0) <= 1
    return len(world.effects)


TOTALS: Counter[str] = Counter()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_random_decisions_forks_rollbacks_and_takeovers_keep_the_ledger_honest(
        ops: list[tuple[str, int, int, str]]) -> None:
    world = World()
    store = MemoryStore()
    anyio.run(_play, world, ops, [store, store], TOTALS)
    TOTALS["effects checked"] += _check(world, store)
    TOTALS["sequences"] += 1


@pytest.mark.parametrize("seed", range(6))
def test_the_same_on_sqlite_with_two_store_objects(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    kinds = ["start", "approve", "approve", "approve", "approve_edit", "reject", "fork",
             "fork_ctx", "rollback", "resume", "takeover"]
    ops = [(rng.choice(kinds), rng.randint(0, 1), rng.randint(0, 9), rng.choice(["pay", "tip"]))
           for _ in range(14)]
    ops[0] = ("start", 0, 0, "pay")
    world = World()
    a, b = SQLiteStore(tmp_path / "p.db"), SQLiteStore(tmp_path / "p.db")
    anyio.run(_play, world, ops, [a, b], TOTALS)
    TOTALS["effects checked"] += _check(world, a)
    a.close()
    b.close()
    print("\nledger property so far:", dict(sorted(TOTALS.items())))  # (pytest -s)
