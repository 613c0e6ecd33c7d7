"""The driving process of the remote-widget tests: starts runs in a store and stays alive
(heartbeating, answering the decisions other processes send through the store) until every
run has ended.

    python -m tests.jupyter.remote_driver STORE [--leave] CHAIN:RUN_ID [CHAIN:RUN_ID ...]

CHAIN is ``payment`` (a quote, then a payment that waits for approval) or ``mail`` (a send
whose connection drops: in doubt); each also has a ``hold`` step that runs until the file
``hold`` is deleted (so a decision never ends a run at once). Prints ``ready`` once every run
waits for a person, then one ``RUN_ID STATUS`` line per run at the end. Side effects go to
``ledger.jsonl`` in the current directory. With ``--leave`` it stops driving once the runs
wait (prints ``left``): nobody drives them then.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from chainlab import Chain, Toolbox
from chainlab.events import RUN_TERMINAL, RunStatus
from chainlab.runtime import Runtime
from chainlab.store import open_store


def ledger(entry: str, **fields: Any) -> None:
    with Path("ledger.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"entry": entry, **fields}) + "\n")


def toolbox() -> Toolbox:
    tb = Toolbox("remote")

    @tb.tool
    def quote(amount: int) -> int:
        return amount

    @tb.tool(side_effects=True, requires_confirmation=True,
             preview=lambda a: f"pay {a['amount']} EUR to {a['to']}")
    def pay(amount: int, to: str) -> dict[str, Any]:
        ledger("pay", amount=amount, to=to)
        return {"paid": amount, "to": to}

    @tb.tool
    async def hold() -> str:
        while Path("hold").exists():
            await anyio.sleep(0.02)
        return "released"

    @tb.tool(side_effects=True)  # not idempotent: a dropped connection leaves it in doubt
    def send(text: str) -> str:
        ledger("send", text=text)
        raise ConnectionResetError(f"connection reset while sending {text!r}")

    return tb


CHAINS = {
    "payment": Chain.from_dict({"name": "payment", "steps": [
        {"id": "hold", "tool": "hold"},
        {"id": "quote", "tool": "quote", "args": {"amount": 30}},
        {"id": "pay", "tool": "pay",
         "args": {"amount": "{{ steps.quote.output }}", "to": "ACME"}}]}),
    "mail": Chain.from_dict({"name": "mail", "steps": [
        {"id": "hold", "tool": "hold"},
        {"id": "send", "tool": "send", "args": {"text": "hello"}}]}),
}


async def main(store_url: str, specs: list[str]) -> int:
    leave = "--leave" in specs
    specs = [s for s in specs if s != "--leave"]
    store = open_store(store_url)
    Path("hold").write_text("the runs hold on until this file is deleted")
    try:
        async with Runtime(toolbox(), store, heartbeat_s=0.5, stale_after_s=30.0,
                           mailbox_poll_s=0.05) as runtime:
            runs = []
            for spec in specs:
                chain_name, _, run_id = spec.partition(":")
                runs.append(await runtime.start(CHAINS[chain_name], {}, run_id=run_id))
            while not all(run.waiting() for run in runs):  # each waits for a person
                await anyio.sleep(0.02)
            print("ready", flush=True)
            if leave:  # the runtime closes: the runs stay in the store, driven by nobody
                print("left", flush=True)
                return 0
            while any(run.status not in RUN_TERMINAL for run in runs):
                await anyio.sleep(0.05)  # still driving: heartbeats, decisions applied
            for run in runs:
                print(run.run_id, run.status, flush=True)
            return 0 if all(run.status != RunStatus.RUNNING for run in runs) else 1
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1], sys.argv[2:]))
