"""Tools for the command-line tests. Side effects go to ``ledger.jsonl`` in the current
directory (each test runs the CLI in its own tmp dir), so other processes can check them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from chainlab import CallContext, PermanentError, Toolbox

toolbox = Toolbox("cli-tests")
other = Toolbox("other")  # a second toolbox: `--tools example_tools` is then ambiguous


def ledger(entry: str, **fields: Any) -> None:
    with Path("ledger.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"entry": entry, **fields}) + "\n")


@toolbox.tool
def add(a: int, b: int) -> int:
    return a + b


@toolbox.tool
def fail(message: str) -> None:
    raise PermanentError(message)


@toolbox.tool(side_effects=True, idempotent=True,
              compensate=("refund", {"charge_id": "{{ output.charge_id }}"}))
def charge(amount: int, ctx: CallContext) -> dict[str, Any]:
    charge_id = f"ch-{ctx.idempotency_key[:8]}"
    ledger("charge", amount=amount, charge_id=charge_id)
    return {"charge_id": charge_id, "amount": amount}


@toolbox.tool(side_effects=True, idempotent=True)
def refund(charge_id: str) -> dict[str, Any]:
    ledger("refund", charge_id=charge_id)
    return {"refunded": charge_id}


def _transfer_preview(args: dict[str, Any]) -> str:
    return f"send {args['amount']} to {args['to']}"


@toolbox.tool(side_effects=True, idempotent=True, requires_confirmation=True,
              preview=_transfer_preview)
def transfer(to: str, amount: int) -> dict[str, Any]:
    ledger("transfer", to=to, amount=amount)
    return {"to": to, "amount": amount}


@toolbox.tool(side_effects=True)  # not idempotent: an unknown outcome is in doubt
def pay(amount: int) -> dict[str, Any]:
    raise ConnectionResetError(f"connection reset while paying {amount}")


@toolbox.tool
def wait_while_file(path: str) -> str:
    """Block while ``path`` exists (the crash test kills the process meanwhile)."""
    Path("started.flag").write_text("1")
    deadline = time.monotonic() + 60
    while Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "went on"


@toolbox.tool
def where() -> dict[str, Any]:
    """Which thread (and Dask worker, if any) ran the body."""
    try:
        import distributed

        worker = distributed.get_worker().address
    except (ImportError, ValueError):
        worker = None
    return {"thread": threading.current_thread().name, "worker": worker}


@other.tool
def nothing() -> None:
    return None


@toolbox.tool(side_effects=True, requires_confirmation=True)  # not idempotent
def payout(amount: int) -> dict[str, Any]:
    """Takes a moment, so two racing approvals overlap with the call."""
    time.sleep(0.3)
    ledger("payout", amount=amount)
    return {"paid": amount}
