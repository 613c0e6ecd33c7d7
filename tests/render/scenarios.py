"""Runs with retries, confirmation waits, in-doubt steps and compensations, on a ManualClock,
so that their timelines are exact. Shared by tests/render and tests/test_timeline.py; and
the large chain the layout tests open (:func:`history_chain`)."""

from __future__ import annotations

from typing import Any

from chainlab import CallContext, Chain, PermanentError, Toolbox, TransientError
from chainlab.runtime import Runtime
from chainlab.runtime.runtime import Run
from chainlab.store import MemoryStore, Store
from chainlab.testing import ManualClock

T0 = 1_800_000_000.0


def chain_of(*steps: dict[str, Any], name: str = "t", **options: Any) -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps), "options": options})


def history_chain(n: int, **options: Any) -> Chain:
    """benchmarks/bench_history.py's shape: ``n`` steps of the tool ``noop`` (argument ``i``)
    in a chain, every tenth also depending on the step ten back."""
    steps = []
    for i in range(n):
        deps = [f"s{i - 1}"] if i else []
        if i >= 10 and i % 10 == 0:
            deps.append(f"s{i - 10}")
        steps.append({"id": f"s{i}", "tool": "noop", "args": {"i": i}, "depends_on": deps})
    return chain_of(*steps, name="history", **options)


class Lab:
    """A toolbox whose tools take time on a ManualClock, an in-memory store and a runtime."""

    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.store: Store = MemoryStore()
        self.toolbox = Toolbox("lab")
        self.runtime = Runtime(self.toolbox, self.store, clock=self.clock,
                               id_factory=self._ids)
        self._n = 0
        self.failures: dict[str, int] = {}
        tb, clock, failures = self.toolbox, self.clock, self.failures

        @tb.tool
        async def work(seconds: float = 1.0, tag: str = "") -> dict[str, Any]:
            """Takes `seconds` on the clock."""
            await clock.sleep(seconds)
            return {"tag": tag, "rows": [1, 2, 3]}

        @tb.tool
        async def flaky(seconds: float = 1.0, fails: int = 1, tag: str = "") -> str:
            """Fails (transient) `fails` times per tag, each after `seconds`."""
            await clock.sleep(seconds)
            failures[tag] = failures.get(tag, 0) + 1
            if failures[tag] <= fails:
                raise TransientError(f"503 from upstream ({failures[tag]})")
            return "ok"

        @tb.tool(side_effects=True, compensate=("refund", {"charge_id": "{{ output.id }}"}))
        async def charge(amount: float, seconds: float = 0.5) -> dict[str, Any]:
            await clock.sleep(seconds)
            return {"id": f"ch-{amount:g}"}

        @tb.tool(side_effects=True, requires_confirmation=True,
                 compensate=("refund", {"charge_id": "{{ output.id }}"}))
        async def pay(amount: float, seconds: float = 0.5) -> dict[str, Any]:
            await clock.sleep(seconds)
            return {"id": f"pay-{amount:g}"}

        @tb.tool(side_effects=True, idempotent=True)
        async def refund(charge_id: str, ctx: CallContext) -> str:
            await clock.sleep(0.25)
            return f"refunded {charge_id}"

        @tb.tool(side_effects=True)
        async def ship(seconds: float = 1.0, fail: str = "") -> str:
            """A non-idempotent effect; `fail='unsure'` fails in a way that leaves it in
            doubt, `fail='no'` fails permanently."""
            await clock.sleep(seconds)
            if fail == "unsure":
                raise ConnectionError("connection reset after sending")
            if fail == "no":
                raise PermanentError("address rejected")
            return "shipped"

    def _ids(self) -> str:
        self._n += 1
        return f"run-{self._n}"

    async def start(self, chain: Chain, **kw: Any) -> Run:
        return await self.runtime.start(chain, **kw)


def retry_chain() -> Chain:
    """fetch fails twice then succeeds (back-off 2 s, then 4 s), parse runs after it."""
    return chain_of(
        {"id": "fetch", "tool": "flaky", "args": {"seconds": 1, "fails": 2, "tag": "fetch"},
         "retry": {"max_attempts": 3, "delay_s": 2, "backoff": "exponential"}},
        {"id": "parse", "tool": "work", "args": {"seconds": 0.5,
                                                  "tag": "{{ steps.fetch.output }}"}},
        name="retries")


def saga_chain() -> Chain:
    """charge (compensable) -> pay (needs approval, compensable) -> ship (in doubt)."""
    return chain_of(
        {"id": "charge", "tool": "charge", "args": {"amount": 10}},
        {"id": "pay", "tool": "pay", "depends_on": ["charge"], "args": {"amount": 5}},
        {"id": "ship", "tool": "ship", "depends_on": ["pay"],
         "args": {"seconds": 1.5, "fail": "unsure"}},
        name="saga")


async def run_saga(lab: Lab) -> Run:
    """charge succeeds, pay waits 3 s for approval then succeeds, ship ends in doubt; after
    2 s a person says it failed, so the run rolls back: pay then charge are refunded."""
    run = await lab.start(saga_chain())
    await run.wait()  # suspended on pay
    lab.clock.advance(3.0)
    await run.approve("pay", note="ok")
    await run.wait()  # suspended: ship in doubt
    lab.clock.advance(2.0)
    await run.resolve("ship", fail=True)
    await run.wait()
    return run
