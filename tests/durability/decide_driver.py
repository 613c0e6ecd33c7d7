"""Process A of the decision tests: drives one run of a three-step chain whose middle step
``pay`` is side-effecting, NOT idempotent and needs confirmation, in the store at a URL.

    python -m tests.durability.decide_driver STORE_URL RUN_ID LEDGER
        [--heartbeat S] [--stale S] [--self-approve-when FILE] [--hold S] [--anonymous]

Prints ``suspended`` once the run waits for the approval and its heartbeat is recorded,
then the run's final status. ``--self-approve-when FILE``: A approves ``pay`` itself once
FILE exists (to show that a fenced driver commits nothing). ``--hold S``: ``pay`` sleeps S
seconds after its effect (a SIGKILL then lands mid-call). ``--anonymous``: the run does not
name its toolbox (as a notebook's run: only its driver has the tools). Exit 0: succeeded,
3: this driver was taken over (StaleEpochError), 1: anything else.

``TOOLBOX`` is also what the CLI loads (``--tools tests.durability.decide_driver:TOOLBOX``;
the ledger path then comes from ``CHAINLAB_TEST_LEDGER``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import anyio

from chainlab import CallContext, Chain, Toolbox
from chainlab.errors import StaleEpochError
from chainlab.events import RunStatus
from chainlab.runtime import Runtime
from chainlab.store import open_store

HOLD = {"s": 0.0}


def ledger_path() -> Path:
    # the tests set CHAINLAB_TEST_LEDGER; without it, never a stray file in the checkout
    return Path(os.environ.get("CHAINLAB_TEST_LEDGER")
                or Path(tempfile.gettempdir()) / "chainlab-test-ledger.jsonl")


def read_ledger(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def make_toolbox() -> Toolbox:
    tb = Toolbox("decide")

    @tb.tool
    async def prep(x: int) -> int:
        """Effect-free."""
        return x + 1

    @tb.tool(side_effects=True, idempotent=False, requires_confirmation=True)
    async def pay(amount: int, ctx: CallContext) -> dict[str, int]:
        """Writes one ledger line per call (the outside world), fsync'ed at once."""
        line = json.dumps({"tool": "pay", "key": ctx.idempotency_key, "pid": os.getpid(),
                           "amount": amount}) + "\n"
        fd = os.open(ledger_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if HOLD["s"]:
            await anyio.sleep(HOLD["s"])
        return {"paid": amount}

    @tb.tool
    async def after(receipt: dict[str, int]) -> int:
        """Effect-free."""
        return receipt["paid"] * 2

    return tb


TOOLBOX = make_toolbox()


def chain() -> Chain:
    return Chain.from_dict({"name": "pay-once", "steps": [
        {"id": "prep", "tool": "prep", "args": {"x": 1}},
        {"id": "pay", "tool": "pay", "args": {"amount": "{{ steps.prep.output }}"}},
        {"id": "after", "tool": "after", "args": {"receipt": "{{ steps.pay.output }}"}},
    ]})


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("run_id")
    parser.add_argument("ledger")
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--stale", type=float, default=10.0)
    parser.add_argument("--self-approve-when", default=None)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--anonymous", action="store_true")
    opts = parser.parse_args(argv)
    os.environ["CHAINLAB_TEST_LEDGER"] = opts.ledger
    HOLD["s"] = opts.hold
    store = open_store(opts.url)
    try:
        async with Runtime(TOOLBOX, store, heartbeat_s=opts.heartbeat,
                           stale_after_s=opts.stale) as runtime:
            meta = {} if opts.anonymous else {"tools": "tests.durability.decide_driver:TOOLBOX"}
            run = await runtime.start(chain(), {}, run_id=opts.run_id, meta=meta)
            while run.status != RunStatus.SUSPENDED or \
                    await runtime.run_io(store.driver_of, opts.run_id) is None:
                await anyio.sleep(0.02)
            print("suspended", flush=True)
            try:
                if opts.self_approve_when is not None:
                    while not Path(opts.self_approve_when).exists():
                        await anyio.sleep(0.02)
                    await run.approve("pay", note="self")
                result = await run.wait()
                while result.suspended:  # wait() returns at a suspension: drive on until
                    await anyio.sleep(0.02)  # someone decides (through the store)
                    result = await run.wait()
            except StaleEpochError as exc:
                print(f"fenced: {exc}", flush=True)
                return 3
            print(result.status, flush=True)
            return 0 if result.ok else 1
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
