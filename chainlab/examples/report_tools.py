"""The example toolbox of ``chainlab demo``: deterministic demo data, no network.

``publish_report`` is the interesting one: it has side effects (writes a JSON file into the
outbox folder), needs a person's confirmation (the preview shows what would be published),
is idempotent (the file is named by the call's idempotency key, so a repeat rewrites the
same file) and is compensated by ``unpublish_report`` when the run is rolled back.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from chainlab.errors import PermanentError, TransientError
from chainlab.tools import CallContext, Toolbox

__all__ = ["toolbox"]

toolbox = Toolbox("report")

SALES_USD = {"eu": 1200.0, "us": 1850.5, "apac": 990.25}
RATES = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.4}


@toolbox.tool
def fetch_sales(region: str, delay_s: float = 0.3) -> dict[str, Any]:
    """Total sales of one region in USD (demo data; waits ``delay_s`` like a slow API)."""
    time.sleep(delay_s)
    if region not in SALES_USD:
        raise PermanentError(f"unknown region {region!r}; known: {', '.join(SALES_USD)}")
    return {"region": region, "total": SALES_USD[region], "currency": "USD"}


@toolbox.tool(retry={"max_attempts": 3, "delay_s": 0.2})
def fetch_rate(currency: str, ctx: CallContext) -> dict[str, Any]:
    """The USD -> ``currency`` exchange rate. Its first attempt fails (a busy service), so
    the demo shows a retry in the timeline."""
    if ctx.attempt == 1:
        raise TransientError("rate service busy (the demo always fails the first attempt)")
    if currency not in RATES:
        raise PermanentError(f"unknown currency {currency!r}; known: {', '.join(RATES)}")
    return {"currency": currency, "rate": RATES[currency]}


@toolbox.tool
def summarize(sales: list[dict[str, Any]], rate: dict[str, Any]) -> dict[str, Any]:
    """The report: per-region and total sales converted with ``rate``."""
    by_region = {s["region"]: round(s["total"] * rate["rate"], 2) for s in sales}
    return {"title": f"Sales report, {len(sales)} regions", "currency": rate["currency"],
            "total": round(sum(by_region.values()), 2), "by_region": by_region}


def _preview(args: dict[str, Any]) -> dict[str, Any]:
    summary = args.get("summary") or {}
    return {"publish": summary.get("title"), "total": summary.get("total"),
            "currency": summary.get("currency"), "into": args.get("outbox")}


@toolbox.tool(side_effects=True, idempotent=True, requires_confirmation=True,
              preview=_preview,
              compensate=("unpublish_report", {"path": "{{ output.path }}"}))
def publish_report(summary: dict[str, Any], outbox: str, ctx: CallContext) -> dict[str, Any]:
    """Write the report into the ``outbox`` folder (the side effect a person approves)."""
    folder = Path(outbox)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"report-{ctx.idempotency_key[:12]}.json"
    path.write_text(json.dumps({"run_id": ctx.run_id, **summary}, indent=2), encoding="utf-8")
    return {"path": str(path), "total": summary.get("total")}


@toolbox.tool(side_effects=True, idempotent=True)
def unpublish_report(path: str) -> dict[str, Any]:
    """Remove a published report (the compensation of ``publish_report``)."""
    existed = Path(path).exists()
    Path(path).unlink(missing_ok=True)
    return {"removed": path, "existed": existed}
