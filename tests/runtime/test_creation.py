"""Creating a run is all or nothing (issue 36 item 2): a start, a fork, an enqueue and a keyed
start store the run's record, its driver, the head of its log and its idempotency key in
ONE transaction; a refused write leaves no run behind; a run with no event is never driven
from scratch; a key names one request.

The held-out reproductions: (a) a fork whose edit the store refuses (a lone surrogate in
``outputs``) left a ``running`` fork with 0 events, and resuming it ran the chain from
scratch, charging the parent's non-idempotent step a second time, unapproved; (b) a keyed
start with a ``run_id`` ignored the key (tests/http/test_endpoints.py has the HTTP side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import (
    ChainlabError,
    IdempotencyKeyError,
    PlanError,
    RunExistsError,
    RunStateError,
)
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore, SQLiteStore
from chainlab.store.base import RunRecord
from chainlab.store.queue import Queue

pytestmark = pytest.mark.anyio

CHAIN = Chain.from_dict({"name": "bill", "steps": [
    {"id": "charge", "tool": "charge", "args": {"amount": "{{ context.amount }}"}},
    {"id": "note", "tool": "note", "args": {"text": "{{ steps.charge.output }}"}},
]})


def toolbox(ledger: list[str]) -> Toolbox:
    tb = Toolbox("bill")

    @tb.tool(side_effects=True)  # not idempotent: a second call charges twice
    def charge(amount: int) -> str:
        ledger.append(f"charge {amount}")
        return f"charged {amount}"

    @tb.tool
    def note(text: str) -> str:
        return text.upper()

    return tb


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    from tests.pg import Unavailable, shared_cluster

    try:
        return shared_cluster().dsn()
    except Unavailable as exc:
        pytest.skip(str(exc))


def open_at(url: str) -> Any:
    if url.endswith(".db"):
        return SQLiteStore(url)
    from chainlab.store.postgres import PostgresStore

    return PostgresStore(url)


async def test_a_refused_fork_leaves_no_run_and_charges_nothing_again(store_url: str
                                                                      ) -> None:
    ledger: list[str] = []
    store = open_at(store_url)
    async with Runtime(toolbox(ledger), store) as runtime:
        parent = await runtime.start(CHAIN, {"amount": 5}, run_id="parent")
        assert (await parent.wait()).ok
        with pytest.raises(ChainlabError):  # the store (or the value gate) refuses it
            await runtime.fork("parent", outputs={"note": "\ud800"})
        assert [r.run_id for r in runtime.runs()] == ["parent"]  # no half-made fork
        assert ledger == ["charge 5"]
    store.close()
    # a new process sees the same: nothing to resume, nothing charged again
    ledger2: list[str] = []
    store = open_at(store_url)
    async with Runtime(toolbox(ledger2), store) as runtime:
        assert [r.run_id for r in runtime.runs()] == ["parent"]
        fork = await runtime.fork("parent", outputs={"note": "fine"})
        assert (await fork.wait()).ok and ledger2 == []  # the charge is reused, not repeated
    store.close()


async def test_a_run_without_events_is_never_driven_from_scratch(tmp_path: Path) -> None:
    """What an older chainlab (or a bug) could leave: a record and no log. Resuming it
    would run every step as new; it is refused, and the store is left as it was."""
    ledger: list[str] = []
    store = SQLiteStore(tmp_path / "runs.db")
    store.create_run(RunRecord(run_id="half", chain_name="bill", status="running", epoch=1,
                               created_at=1.0, updated_at=1.0, chain=CHAIN.to_dict(),
                               context={"amount": 5}))
    async with Runtime(toolbox(ledger), store) as runtime:
        with pytest.raises(RunStateError, match="has no events: its creation did not "
                                                "complete"):
            await runtime.resume("half")
        with pytest.raises(RunStateError, match="has no events"):
            await runtime.resume("half", force=True)
    assert ledger == [] and store.load_events("half") == []
    assert store.get_run("half").epoch <= 2  # (a forced claim may have taken an epoch)
    store.close()


async def test_a_start_is_stored_with_the_head_of_its_log(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    async with Runtime(toolbox([]), store) as runtime:
        run = await runtime.start(CHAIN, {"amount": 1}, paused=True,
                                  planning=[("planning_started", {"by": "test"})])
        # durable before start() returned: one transaction with the record
        other = SQLiteStore(tmp_path / "runs.db")
        kinds = [str(e.kind) for e in other.load_events(run.run_id)]
        assert kinds == ["run_started", "planning_started", "run_paused"]
        assert other.get_run(run.run_id).status == "paused"
        other.close()
        await run.cancel()
    store.close()


async def test_a_start_refused_by_the_store_leaves_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    async with Runtime(toolbox([]), store) as runtime:
        with pytest.raises(ChainlabError):
            await runtime.start(CHAIN, {"amount": 1},
                                planning=[("planning_started", {"request": "\ud800"})])
        assert runtime.runs() == []
    store.close()


async def test_a_key_names_one_request() -> None:
    ledger: list[str] = []
    async with Runtime(toolbox(ledger), MemoryStore()) as runtime:
        first = await runtime.start(CHAIN, {"amount": 3}, run_id="r-1", idempotency_key="k")
        assert not first.replayed and (await first.wait()).ok
        again = await runtime.start(CHAIN, {"amount": 3}, run_id="r-1", idempotency_key="k")
        assert again.replayed and again.run_id == "r-1" and again.status == "succeeded"
        # the same key with another run id, another context or as an enqueue: refused
        for change in ({"run_id": "r-2"}, {"context": {"amount": 4}}):
            kw: dict[str, Any] = {"run_id": "r-1", "context": {"amount": 3}, **change}
            with pytest.raises(IdempotencyKeyError, match="'k' was used for another "
                                                          "request") as info:
                await runtime.start(CHAIN, kw.pop("context"), idempotency_key="k", **kw)
            assert info.value.run_id == "r-1"
        with pytest.raises(IdempotencyKeyError):
            await runtime.enqueue(CHAIN, {"amount": 3}, run_id="r-1", idempotency_key="k")
        assert [r.run_id for r in runtime.runs()] == ["r-1"] and ledger == ["charge 3"]
        with pytest.raises(RunExistsError, match="'r-1' already exists"):
            await runtime.start(CHAIN, {"amount": 3}, run_id="r-1")


async def test_an_enqueue_is_checked_first_and_stored_whole() -> None:
    store = MemoryStore()
    assert isinstance(store, Queue)
    async with Runtime(toolbox([]), store) as runtime:
        with pytest.raises(PlanError, match="simple identifier"):
            await runtime.enqueue(CHAIN, {"amount": 1}, queue="two words")
        with pytest.raises(PlanError, match="unknown tool"):
            await runtime.enqueue(Chain.from_dict({"name": "x", "steps": [
                {"id": "a", "tool": "nope"}]}))
        keyed = CHAIN.model_copy(update={"options": CHAIN.options.model_copy(
            update={"concurrency_key": "customer:{{ context.customer }}"})})
        with pytest.raises(PlanError, match=r"concurrency_key .* does not resolve"):
            await runtime.enqueue(keyed, {"amount": 1})
        assert runtime.runs() == []
        run_id = await runtime.enqueue(keyed, {"amount": 1, "customer": "ada"}, queue="bills",
                                       idempotency_key="order-1")
        assert await runtime.enqueue(keyed, {"amount": 1, "customer": "ada"}, queue="bills",
                                     idempotency_key="order-1") == run_id
        record = store.get_run(run_id)
        assert (record.status, record.queue, record.concurrency_key, record.epoch) == (
            "queued", "bills", "customer:ada", 1)
        assert store.load_events(run_id) == []  # a worker's claim starts it
        with pytest.raises(RunStateError, match="is queued in 'bills': a worker"):
            await runtime.resume(run_id)
