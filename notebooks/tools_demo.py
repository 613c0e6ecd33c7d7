"""Example tools shared by the tutorial notebooks: a tiny shop.

Its side effects are written to ``ledger`` (a stand-in for the outside world: a payment
provider, a warehouse), so a notebook can print what really happened, and in which order.

Run as a script, it plays "the first kernel" of notebook 04: it starts a checkout in a
fresh Python process, lets it run until it waits for a person, and exits:

    python tools_demo.py start-checkout .chainlab/restart.db
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from chainlab import Chain, PermanentError, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore

__all__ = ["CHECKOUT", "ORDER", "fresh_db", "ledger", "shop"]

shop = Toolbox("shop")
ledger: list[str] = []


@shop.tool(side_effects=True, idempotent=True,
           compensate=("release_stock", {"sku": "{{ input.sku }}", "qty": "{{ input.qty }}"}))
def reserve_stock(sku: str, qty: int = 1) -> dict:
    """Put items aside in the warehouse (safe to repeat: keyed by the order)."""
    ledger.append(f"reserved {qty} x {sku}")
    return {"sku": sku, "qty": qty}


@shop.tool(side_effects=True, idempotent=True)
def release_stock(sku: str, qty: int = 1) -> str:
    """Undo reserve_stock."""
    ledger.append(f"released {qty} x {sku}")
    return "released"


@shop.tool(side_effects=True, requires_confirmation=True,
           preview=lambda a: f"Charge {a['amount']:.2f} EUR to the card ending {a['card'][-4:]}",
           compensate=("refund", {"charge_id": "{{ output.charge_id }}",
                                  "amount": "{{ input.amount }}"}))
def charge_card(amount: float, card: str) -> dict:
    """Take the money (a person approves every charge first)."""
    ledger.append(f"charged {amount:.2f} EUR")
    return {"charge_id": f"ch-{card[-4:]}", "amount": amount}


@shop.tool(side_effects=True, idempotent=True)
def refund(charge_id: str, amount: float) -> str:
    """Undo charge_card."""
    ledger.append(f"refunded {amount:.2f} EUR ({charge_id})")
    return "refunded"


@shop.tool(side_effects=True)
def ship_order(sku: str, address: str) -> str:
    """Hand the parcel to a courier (fails for addresses no courier serves)."""
    if address == "nowhere":
        raise PermanentError(f"no courier delivers to {address!r}")
    ledger.append(f"shipped {sku} to {address}")
    return f"parcel for {address}"


CHECKOUT = """
name: checkout
description: Reserve, charge (after approval), ship.
options: {compensate_on_failure: false}
steps:
  - id: reserve
    tool: reserve_stock
    args: {sku: "{{ context.sku }}", qty: 1}
  - id: charge
    tool: charge_card
    args: {amount: "{{ context.amount }}", card: "{{ context.card }}"}
    depends_on: [reserve]
  - id: ship
    tool: ship_order
    args: {sku: "{{ context.sku }}", address: "{{ context.address }}"}
    depends_on: [charge]
"""

ORDER = {"sku": "teapot", "amount": 42.0, "card": "4000-0000-0000-4242",
         "address": "1 Main St"}


def fresh_db(name: str) -> str:
    """``.chainlab/<name>.db`` with any earlier copy removed, so every run of a tutorial
    starts from an empty store."""
    path = Path(".chainlab") / f"{name}.db"
    path.parent.mkdir(exist_ok=True)
    for old in path.parent.glob(f"{name}.db*"):  # the db and its -wal / -shm files
        old.unlink()
    return str(path)


async def start_checkout(db: str) -> None:
    """Start a checkout, run it until it waits for a person, then stop (this process
    exits; the run stays in the SQLite file)."""
    store = SQLiteStore(db)
    runtime = Runtime(shop, store)
    run = await runtime.start(Chain.from_yaml(CHECKOUT), ORDER)
    result = await run.wait()
    await runtime.aclose()
    store.close()
    waiting = ", ".join(f"{step} ({why})" for step, why in result.waiting.items())
    print(f"run {run.run_id} is {result.status}; waiting: {waiting}")
    print(f"ledger of this process: {ledger}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "start-checkout":
        sys.exit("usage: python tools_demo.py start-checkout DB")
    anyio.run(start_checkout, sys.argv[2])
