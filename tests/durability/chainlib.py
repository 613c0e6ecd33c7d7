"""The chains, tools and ledger shared by the durability tests and their worker process.

Every tool appends one line to a *ledger* file (``os.write`` + ``fsync``, so the line
survives a SIGKILL of the process a moment later) naming the step, the idempotency key the
runtime handed it, its epoch, its pid and whether the call changed the world (``effect``).
The ledger is the outside world: it tells which calls really happened, however the process
ended.

Tool kinds (the mix the issue asks for):

``compute``   effect-free (async): may be re-run freely
``upsert``    side-effecting but idempotent (sync, in a worker thread)
``charge``    side-effecting, NOT idempotent, no reconcile (sync): interrupted -> in_doubt
``send``      side-effecting, not idempotent, with ``reconcile`` reading the ledger (async)
``transfer``  side-effecting, not idempotent, needs confirmation when amount >= 10 (async)
``check``     effect-free audit at the end of the chain; ``fail=True`` fails it permanently,
              so under ``fail_fast`` the run stops and rolls back (the saga trials)
``refund``    compensation of ``charge``; idempotent as a real API is: the first call under
              a key changes the world, a repeat with the same key is answered from the record
              (``effect=False, repeat=True``)
``unset``     compensation of step ``c`` (an upsert); idempotent the same way

Every ledger line also names the call's ``kind`` (``call`` or ``compensation``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from chainlab import CallContext, Chain, PermanentError, Reconciliation, Toolbox
from chainlab.runtime import Run, RunResult

UNSAFE_TOOLS = frozenset({"charge", "send", "transfer"})  # side effects, not idempotent
SAFE_TOOLS = frozenset({"compute", "upsert", "check", "refund", "unset"})  # or effect-free
SEED = 3
# the crash chain's non-idempotent steps (each must take effect exactly once) and the steps
# that have a compensation (undone exactly once, in reverse completion order, on rollback)
CRASH_UNSAFE_STEPS = {"d": "charge", "e": "send", "g": "transfer", "h": "charge"}
CRASH_COMPENSABLE_STEPS = ("c", "d", "h")


class Ledger:
    """An append-only JSON-lines file; each write is fsync'ed before the call goes on
    (``fsync=False``: in-process simulations, where no process dies, skip that cost)."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()

    def write(self, **entry: Any) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        # a torn last line cannot happen (one write() per line), but be strict anyway
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def effect_for(self, key: str) -> dict[str, Any] | None:
        """The effect line written under idempotency key ``key``, if the call happened."""
        for entry in self.read():
            if entry["effect"] and entry["key"] == key:
                return entry
        return None


def started_in(db: str | os.PathLike[str]) -> Callable[[CallContext], bool]:
    """A check for the write-ahead rule: is this call's ``step_started`` (a compensation's
    ``compensation_started``) already committed to the SQLite file ``db`` (or the
    ``postgresql://`` database)? (Read through a connection of its own, as an auditor
    would.)"""
    if str(db).startswith("postgresql:"):
        return _started_in_postgres(str(db))

    def check(ctx: CallContext) -> bool:
        kind = "compensation_started" if ctx.kind == "compensation" else "step_started"
        conn = sqlite3.connect(db, timeout=30)
        try:
            row = conn.execute(
                "SELECT 1 FROM events WHERE run_id = ? AND step_id = ? AND attempt = ? "
                "AND kind = ? AND json_extract(payload, '$.idempotency_key') = ?",
                (ctx.run_id, ctx.step_id, ctx.attempt, kind, ctx.idempotency_key)).fetchone()
        finally:
            conn.close()
        return row is not None

    return check


def _started_in_postgres(url: str) -> Callable[[CallContext], bool]:
    import psycopg

    def check(ctx: CallContext) -> bool:
        kind = "compensation_started" if ctx.kind == "compensation" else "step_started"
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT 1 FROM events WHERE run_id = %s AND step_id = %s AND attempt = %s "
                "AND kind = %s AND payload::json ->> 'idempotency_key' = %s",
                (ctx.run_id, ctx.step_id, ctx.attempt, kind, ctx.idempotency_key)).fetchone()
        return row is not None

    return check


def make_toolbox(ledger: Ledger, delay: float = 0.0,
                 started: Callable[[CallContext], bool] | None = None) -> Toolbox:
    """The tools, writing to ``ledger``; ``delay`` seconds of work before and after each
    effect widen the windows in which a kill lands mid-call. With ``started``, every effect
    line also records whether the call's ``step_started`` was durable when the call began
    (``durable``), which the tests require of every side-effecting call."""
    tb = Toolbox("durability")

    def record(ctx: CallContext, tool: str, effect: bool, out: Any = None,
               **extra: Any) -> None:
        durable = started(ctx) if started is not None and effect else None
        ledger.write(step=ctx.step_id, tool=tool, key=ctx.idempotency_key, effect=effect,
                     epoch=ctx.epoch, attempt=ctx.attempt, pid=os.getpid(), out=out,
                     durable=durable, kind=ctx.kind, **extra)

    def once(ctx: CallContext, tool: str, out: Any) -> None:
        """An idempotent API's effect: only the first call under a key changes the world."""
        first = ledger.effect_for(ctx.idempotency_key) is None
        record(ctx, tool, first, out, repeat=not first)

    @tb.tool
    async def compute(x: int, ctx: CallContext) -> int:
        """Effect-free arithmetic (counted in the ledger, effect=False)."""
        record(ctx, "compute", False)
        await anyio.sleep(delay)
        return x * 2 + 1

    @tb.tool(side_effects=True, idempotent=True)
    def upsert(name: str, value: int, ctx: CallContext) -> dict[str, Any]:
        """Idempotent write: doing it twice leaves the same state."""
        time.sleep(delay)
        out = {"name": name, "value": value}
        record(ctx, "upsert", True, out)
        time.sleep(delay)
        return out

    @tb.tool(side_effects=True, compensate=(
        "refund", {"account": "{{ input.account }}", "amount": "{{ output.charged }}"}))
    def charge(account: str, amount: int, ctx: CallContext) -> dict[str, Any]:
        """Non-idempotent: a second call would charge twice."""
        time.sleep(delay)
        out = {"account": account, "charged": amount}
        record(ctx, "charge", True, out)
        time.sleep(delay)
        return out

    def reconcile_send(args: dict[str, Any], key: str) -> Reconciliation:
        entry = ledger.effect_for(key)
        if entry is None:
            return Reconciliation.no_effect()
        return Reconciliation.took_effect(entry["out"])

    @tb.tool(side_effects=True, reconcile=reconcile_send)
    async def send(to: str, body: str, ctx: CallContext) -> dict[str, Any]:
        """Non-idempotent, but the ledger can tell whether it happened (reconcile)."""
        await anyio.sleep(delay)
        out = {"to": to, "body": body}
        record(ctx, "send", True, out)
        await anyio.sleep(delay)
        return out

    @tb.tool(side_effects=True, requires_confirmation=lambda args: args.get("amount", 0) >= 10,
             preview=lambda args: f"transfer {args['amount']} to {args['to']}")
    async def transfer(to: str, amount: int, ctx: CallContext) -> dict[str, Any]:
        """Non-idempotent; a person approves amounts of 10 or more first."""
        await anyio.sleep(delay)
        out = {"to": to, "amount": amount}
        record(ctx, "transfer", True, out)
        await anyio.sleep(delay)
        return out

    @tb.tool(side_effects=True, idempotent=True)
    def refund(account: str, amount: int, ctx: CallContext) -> dict[str, Any]:
        """Undo a charge (the compensation of ``charge``)."""
        time.sleep(delay)
        out = {"account": account, "refunded": amount}
        once(ctx, "refund", out)
        time.sleep(delay)
        return out

    @tb.tool(side_effects=True, idempotent=True)
    async def unset(name: str, ctx: CallContext) -> None:
        """Undo an upsert (the compensation of step ``c``)."""
        await anyio.sleep(delay)
        once(ctx, "unset", None)
        await anyio.sleep(delay)

    @tb.tool
    async def batch(n: int, ctx: CallContext) -> list[int]:
        """Effect-free: the list a for_each step fans out over."""
        record(ctx, "batch", False)
        await anyio.sleep(delay)
        return list(range(n))

    @tb.tool
    async def check(x: int, fail: bool, ctx: CallContext) -> int:
        """Effect-free audit; ``fail`` makes it fail permanently (never retried)."""
        record(ctx, "check", False)
        await anyio.sleep(delay)
        if fail:
            raise PermanentError(f"the audit rejects total {x}")
        return x

    return tb


def crash_chain(fail: bool = False) -> Chain:
    """Ten steps, three branches, one confirmation, three compensable steps; every tool kind
    appears. The last step ``z`` depends (transitively) on every other one, so with ``fail``
    it fails after all of them completed and the run rolls back deterministically: c, d and
    h are compensated in reverse completion order and the run ends ``rolled_back``."""
    return Chain.from_dict({"name": "durable", "options": {"max_concurrency": 3}, "steps": [
        {"id": "a", "tool": "compute", "args": {"x": "{{ context.seed }}"}},
        {"id": "b", "tool": "compute", "args": {"x": "{{ steps.a.output }}"}},
        {"id": "c", "tool": "upsert", "args": {"name": "k1", "value": "{{ steps.a.output }}"},
         "rollback": {"tool": "unset", "args": {"name": "{{ input.name }}"}}},
        {"id": "d", "tool": "charge",
         "args": {"account": "acct-1", "amount": "{{ steps.b.output }}"}},
        {"id": "e", "tool": "send",
         "args": {"to": "ops", "body": "charged {{ steps.d.output.charged }}"}},
        {"id": "f", "tool": "compute", "args": {"x": "{{ steps.c.output.value }}"}},
        {"id": "g", "tool": "transfer", "args": {"to": "acct-2", "amount": "{{ steps.f.output }}"}},
        {"id": "h", "tool": "charge", "depends_on": ["g"],
         "args": {"account": "fees", "amount": 1}},
        {"id": "i", "tool": "compute", "depends_on": ["e"],
         "args": {"x": "{{ steps.h.output.charged }}"}},
        {"id": "z", "tool": "check", "args": {"x": "{{ steps.i.output }}", "fail": fail}},
    ]})


FANOUT_UNSAFE_STEPS = {**{f"pay[{i}]": "charge" for i in range(3)},
                       **{f"note[{i}]": "send" for i in range(3)}, "g": "transfer"}
FANOUT_COMPENSABLE_STEPS = (*(f"pay[{i}]" for i in range(3)), *(f"up[{i}]" for i in range(3)))


def fanout_chain(fail: bool = False) -> Chain:
    """The crash chain's rules on a graph that grows (DESIGN §17): three for_each steps over
    a list known only at run time (non-idempotent charges, reconcilable sends over the
    charges' outputs, idempotent upserts with a rollback), a confirmation after them, and a
    last step that depends on all; with ``fail`` it fails and the run rolls back: every
    charge refunded and every upsert unset once, in reverse completion order."""
    return Chain.from_dict({"name": "fanout", "options": {"max_concurrency": 3}, "steps": [
        {"id": "a", "tool": "compute", "args": {"x": "{{ context.seed }}"}},
        {"id": "list", "tool": "batch", "args": {"n": 3}},
        {"id": "pay", "tool": "charge", "for_each": "{{ steps.list.output }}",
         "args": {"account": "acct-{{ item }}", "amount": "{{ steps.a.output }}"}},
        {"id": "note", "tool": "send", "for_each": "{{ steps.pay.output }}",
         "as": "charge", "args": {"to": "ops", "body": "charged {{ charge.account }}"}},
        {"id": "up", "tool": "upsert", "for_each": "{{ steps.list.output }}",
         "args": {"name": "k{{ index }}", "value": "{{ item }}"},
         "rollback": {"tool": "unset", "args": {"name": "{{ input.name }}"}}},
        {"id": "g", "tool": "transfer", "depends_on": ["note"],
         "args": {"to": "acct-2", "amount": 10}},
        {"id": "z", "tool": "check", "depends_on": ["g", "up"],
         "args": {"x": "{{ steps.a.output }}", "fail": fail}},
    ]})


def approval_chain() -> Chain:
    """Three steps waiting for confirmation at once (two by the tool's rule on their args,
    one by the step's ``confirm``) next to a branch that needs nobody."""
    return Chain.from_dict({"name": "approvals", "options": {"on_failure": "continue"},
                            "steps": [
        {"id": "a", "tool": "compute", "args": {"x": "{{ context.seed }}"}},
        {"id": "b", "tool": "compute", "args": {"x": "{{ steps.a.output }}"}},
        {"id": "p1", "tool": "transfer", "args": {"to": "alice", "amount": "{{ steps.b.output }}"}},
        {"id": "p2", "tool": "transfer", "args": {"to": "bob", "amount": 20}},
        {"id": "q", "tool": "compute", "args": {"x": 5}},
        {"id": "r", "tool": "charge", "args": {"account": "after-p1", "amount": 1},
         "depends_on": ["p1"]},
        {"id": "s", "tool": "charge", "args": {"account": "after-p2", "amount": 2},
         "depends_on": ["p2"]},
        {"id": "t", "tool": "charge", "args": {"account": "audit", "amount": 3},
         "confirm": True},  # the step asks for confirmation although its tool does not
    ]})


CHAINS: dict[str, Callable[[], Chain]] = {
    "crash": crash_chain, "crash-fail": lambda: crash_chain(fail=True),
    "approval": approval_chain}


async def decide(run: Run, ledger: Ledger, *, approve: bool, resolve: bool) -> bool:
    """Act on what waits for a person, as a careful operator would: approve confirmations;
    for an in-doubt step, look its idempotency key up in the ledger (the outside world):
    it happened -> ``resolve(output=...)``, it did not -> ``resolve(retry=True)``.
    Returns True when something was done."""
    acted = False
    for step_id, why in sorted(run.waiting().items()):
        if why == "waiting_confirmation" and approve:
            await run.approve(step_id, note="approved by the durability worker")
            acted = True
        elif why == "in_doubt" and resolve:
            entry = ledger.effect_for(run.steps[step_id].idempotency_key or "")
            if entry is None:
                await run.resolve(step_id, retry=True, note="not in the ledger")
            else:
                await run.resolve(step_id, output=entry["out"], note="found in the ledger")
            acted = True
    return acted


async def settle(run: Run, ledger: Ledger, *, approve: bool = True,
                 resolve: bool = True) -> RunResult:
    """Wait for the run, acting on whatever waits for a person, until it ends (or waits for
    something this operator may not decide)."""
    result = await run.wait()
    while result.suspended and await decide(run, ledger, approve=approve, resolve=resolve):
        result = await run.wait()
    return result
