"""Tools of the semantics gallery (notebook 08): small, deterministic, and honest about their
effects. Every body that runs appends one line to a LEDGER file (a stand-in for the outside
world, shared by the notebook and any driver subprocess), so the gallery can prove what ran,
how often, and in which process.

The ledger file is ``$CHAINLAB_GALLERY_LEDGER`` (default ``.chainlab/gallery-ledger.jsonl``).
``hold`` waits on a gate the notebook opens (:func:`open_gate`), so "a step is in progress"
is a state the notebook controls, not a race; ``book`` finishes only after the booking it
names in ``after``, so the completion order is fixed whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from chainlab.errors import PermanentError
from chainlab.tools import CallContext, Reconciliation, Toolbox

__all__ = ["clear_ledger", "counts", "entries", "ledger_path", "open_gate", "toolbox"]

toolbox = Toolbox("gallery")
_GATES: dict[str, threading.Event] = {}
_LOCK = threading.Lock()
_DEDUP = threading.Lock()


def ledger_path() -> Path:
    return Path(os.environ.get("CHAINLAB_GALLERY_LEDGER", ".chainlab/gallery-ledger.jsonl"))


def _record(tool: str, tag: str, key: str | None = None, **extra: Any) -> None:
    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"tool": tool, "tag": tag, "key": key, "pid": os.getpid(), **extra})
    with _LOCK, path.open("a") as f:  # one short append per effect (O_APPEND: atomic)
        f.write(line + "\n")


def entries() -> list[dict[str, Any]]:
    """Every effect recorded so far, in order."""
    path = ledger_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counts() -> dict[str, int]:
    """How many times each tag's body ran."""
    return dict(Counter(e["tag"] for e in entries()))


def clear_ledger() -> None:
    ledger_path().unlink(missing_ok=True)
    _GATES.clear()


def _gate(tag: str) -> threading.Event:
    with _LOCK:
        return _GATES.setdefault(tag, threading.Event())


def open_gate(tag: str) -> None:
    """Let every ``hold(tag)`` call through (now and later)."""
    _gate(tag).set()


def _pause(ms: int) -> None:
    if ms:
        time.sleep(ms / 1000)


@toolbox.tool
def work(tag: str, ms: int = 40) -> str:
    """Effect-free work that takes ``ms`` milliseconds."""
    _pause(ms)
    _record("work", tag)
    return tag


@toolbox.tool(serial_key="table:{table}")
def write_table(table: str, tag: str, ms: int = 120) -> str:
    """Writes to one table: two writes to the same table never overlap (serial key)."""
    _pause(ms)
    _record("write_table", tag, table=table)
    return tag


@toolbox.tool(resources={"llm": 1})
def ask_llm(tag: str, ms: int = 120) -> str:
    """Takes one unit of the ``llm`` pool while it runs."""
    _pause(ms)
    _record("ask_llm", tag)
    return tag


@toolbox.tool(retry={"max_attempts": 3, "backoff": "exponential", "delay_s": 0.05})
def fetch(tag: str, ms: int = 40) -> str:
    """Effect-free, retried with exponential back-off."""
    _pause(ms)
    _record("fetch", tag)
    return tag


@toolbox.tool(side_effects=True, idempotent=False)
def charge(tag: str, amount: int, ctx: CallContext) -> dict[str, Any]:
    """Charges a card: not idempotent, no way to ask whether it happened (in doubt when
    interrupted)."""
    _record("charge", tag, ctx.idempotency_key, amount=amount)
    return {"charged": amount}


def _loaded(args: dict[str, Any], key: str) -> Reconciliation:
    done = [e for e in entries() if e["tool"] == "load" and e["key"] == key]
    return Reconciliation.took_effect({"rows": args["rows"]}) if done \
        else Reconciliation.no_effect()


@toolbox.tool(side_effects=True, idempotent=False, reconcile=_loaded)
def load(tag: str, rows: int, ctx: CallContext, ms: int = 40) -> dict[str, Any]:
    """Loads rows into a warehouse: not idempotent, but the warehouse can be asked (by the
    call's idempotency key) whether an interrupted load happened (reconcile)."""
    _pause(ms)
    _record("load", tag, ctx.idempotency_key, rows=rows)
    return {"rows": rows}


@toolbox.tool(side_effects=True, idempotent=True, requires_confirmation=True,
              preview=lambda args: f"pay {args['amount']} to {args['to']}")
def pay(tag: str, to: str, amount: int, ctx: CallContext) -> dict[str, Any]:
    """Pays someone: a person approves it first."""
    _record("pay", tag, ctx.idempotency_key, to=to, amount=amount)
    return {"paid": amount, "to": to}


@toolbox.tool(side_effects=True, idempotent=True)
def hold(tag: str, ctx: CallContext) -> str:
    """Waits until the notebook opens the gate ``tag`` (at most 60 s), then records its
    effect once per idempotency key (a repeat with the same key changes nothing)."""
    _gate(tag).wait(60)
    with _DEDUP:  # check-and-record as one step, like an API that deduplicates by key
        if not any(e["key"] == ctx.idempotency_key for e in entries()):
            _record("hold", tag, ctx.idempotency_key)
    return tag


@toolbox.tool(side_effects=True, idempotent=True,
              compensate=("cancel_booking", {"name": "{{ input.name }}",
                                             "fail": "{{ input.fail_cancel }}"}))
def book(name: str, after: str = "", fail_cancel: bool = False) -> str:
    """Books ``name``, finishing only after the booking ``after`` is recorded (a fixed
    completion order); its compensation is ``cancel_booking``."""
    deadline = time.monotonic() + 30
    while after and time.monotonic() < deadline and not any(
            e["tool"] == "book" and e["tag"] == after for e in entries()):
        time.sleep(0.005)
    _record("book", name)
    return name


@toolbox.tool(side_effects=True, idempotent=True, retry={"max_attempts": 1})
def cancel_booking(name: str, fail: bool = False) -> str:
    """Cancels a booking (fails for one marked ``fail_cancel``: a saga with a bad undo)."""
    if fail:
        raise PermanentError(f"booking {name!r} cannot be cancelled any more")
    _record("cancel_booking", name)
    return name
