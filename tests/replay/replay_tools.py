"""The tools of the replay tests (importable by name, so an exported test can load them in a
subprocess: ``replay_tools:toolbox``). Every real call is counted in ``CALLS`` (and, for
side effects, appended to ``effects.jsonl`` in the current directory), so a test can prove a
replay called nothing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from chainlab import CallContext, Chain, PermanentError, Toolbox, TransientError
from chainlab.tools.job import JobStatus

toolbox = Toolbox("replay-tests")
CALLS: Counter[str] = Counter()


def effect(entry: str, **fields: Any) -> None:
    with Path("effects.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"entry": entry, **fields}) + "\n")


@toolbox.tool(retry={"max_attempts": 3, "delay_s": 1.0})
def fetch(query: str) -> dict[str, Any]:
    """Flaky: fails on its first call of each process, then answers."""
    CALLS["fetch"] += 1
    if CALLS["fetch"] == 1:
        raise TransientError("503 from upstream")
    return {"query": query, "rows": [3, 1, 2]}


@toolbox.tool
def summarize(rows: list[int], ctx: CallContext) -> str:
    CALLS["summarize"] += 1
    ctx.report_usage(input_tokens=120, output_tokens=30, cost=0.0045, model="tiny-model")
    return f"{len(rows)} rows, largest {max(rows)}"


@toolbox.tool(side_effects=True, idempotent=True, requires_confirmation=True,
              compensate=("refund", {"charge_id": "{{ output.charge_id }}"}))
def charge(amount: int, ctx: CallContext) -> dict[str, Any]:
    CALLS["charge"] += 1
    effect("charge", amount=amount)
    return {"charge_id": f"ch-{amount}", "amount": amount}


@toolbox.tool(side_effects=True, idempotent=True)
def refund(charge_id: str) -> dict[str, Any]:
    CALLS["refund"] += 1
    effect("refund", charge_id=charge_id)
    return {"refunded": charge_id}


@toolbox.tool(side_effects=True)
def notify(to: str, text: str) -> str:
    """Not idempotent: a connection reset after sending leaves it in doubt."""
    CALLS["notify"] += 1
    effect("notify", to=to)
    raise ConnectionError("connection reset after sending")


@toolbox.tool
def verify(summary: str) -> bool:
    CALLS["verify"] += 1
    raise PermanentError(f"summary {summary!r} is not signed off")


#: retries (fetch), usage (summarize), an approval (charge), an in_doubt resolution
#: (notify), a failure (verify) and so a compensation (refund of charge)
CHAIN = Chain.from_dict({"name": "everything", "steps": [
    {"id": "fetch", "tool": "fetch", "args": {"query": "{{ context.query }}"}},
    {"id": "summarize", "tool": "summarize", "args": {"rows": "{{ steps.fetch.output.rows }}"}},
    {"id": "charge", "tool": "charge", "args": {"amount": 5}, "depends_on": ["summarize"]},
    {"id": "notify", "tool": "notify",
     "args": {"to": "ops", "text": "{{ steps.summarize.output }}"}, "depends_on": ["charge"]},
    {"id": "verify", "tool": "verify", "args": {"summary": "{{ steps.summarize.output }}"},
     "depends_on": ["notify"]},
]})

#: a small chain whose test the notebook and the subprocess test export
SMALL = Chain.from_dict({"name": "small", "steps": [
    {"id": "fetch", "tool": "fetch", "args": {"query": "{{ context.query }}"}},
    {"id": "summarize", "tool": "summarize", "args": {"rows": "{{ steps.fetch.output.rows }}"}},
    {"id": "charge", "tool": "charge", "args": {"amount": 5}, "depends_on": ["summarize"]},
]})


#: what ``count`` returns: a test changes it to see an exported test notice
COUNT_ANSWER: list[Any] = [1]


@toolbox.tool
def count(items: list[int]) -> Any:
    CALLS["count"] += 1
    return COUNT_ANSWER[0]


@toolbox.job(side_effects=True, poll_every_s=5.0)
class Train:
    """A remote job: submitted once, then polled (``CALLS`` counts both)."""

    def submit(self, epochs: int, ctx: CallContext) -> dict[str, Any]:
        CALLS["train.submit"] += 1
        return {"job": f"j-{epochs}", "key": ctx.idempotency_key}

    def poll(self, handle: dict[str, Any]) -> JobStatus:
        CALLS["train.poll"] += 1
        if CALLS["train.poll"] < 3:
            return JobStatus.running(progress=CALLS["train.poll"] / 3)
        return JobStatus.succeeded({"model": handle["job"], "loss": 0.25})

    def cancel(self, handle: dict[str, Any]) -> None:
        CALLS["train.cancel"] += 1


@toolbox.tool
def paid(n: int, ctx: CallContext) -> int:
    ctx.report_usage(cost=0.01)
    return n
