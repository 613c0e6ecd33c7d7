"""Shared parts of the safety regressions (issue 25): a toolbox whose every effect lands in
a ledger, and stores of one database for two runtimes in one process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chainlab import Chain, Toolbox
from chainlab.store import MemoryStore, SQLiteStore, Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Ledger(list[tuple[str, Any]]):
    """What the world saw: ``(tool, args)`` per effect."""

    def of(self, tool: str) -> list[Any]:
        return [args for name, args in self if name == tool]


def make_tools(ledger: Ledger) -> Toolbox:
    tb = Toolbox("safety")

    @tb.tool
    def fetch(n: int) -> int:
        return n * 2

    @tb.tool
    def check(v: int, limit: int = 100) -> bool:
        return v <= limit

    @tb.tool(side_effects=True, compensate=("refund", {"charge_id": "{{ output.id }}"}))
    def charge(amount: int) -> dict[str, Any]:
        ledger.append(("charge", {"amount": amount}))
        return {"id": f"ch{len(ledger.of('charge'))}", "amount": amount}

    @tb.tool(side_effects=True, idempotent=True)
    def refund(charge_id: str) -> str:
        ledger.append(("refund", {"charge_id": charge_id}))
        return charge_id

    @tb.tool(side_effects=True, idempotent=True, requires_confirmation=True)
    def notify(to: str) -> str:
        ledger.append(("notify", {"to": to}))
        return to

    @tb.tool(requires_confirmation=True)
    def gate(x: int) -> int:
        return x

    return tb


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def tools(ledger: Ledger) -> Toolbox:
    return make_tools(ledger)


@pytest.fixture(params=["memory", "sqlite"])
def store_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two store objects of ONE database (memory: the same object)."""
    if request.param == "memory":
        m = MemoryStore()
        yield m, m
        return
    a, b = SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")
    yield a, b
    a.close()
    b.close()


def chain(*steps: dict[str, Any], name: str = "safety", **options: Any) -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps), "options": options})
