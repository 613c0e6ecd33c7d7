"""What the command line prints of who did what in a run: the attempt timeline (table and
CSV, with who or what decided each call) and the run's grants (DESIGN §21). Read from the
run state (the fold of the stored events), never from a live scheduler."""

from __future__ import annotations

import csv
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from chainlab.cli.views import Col, clip, fitted, seconds, status_text
from chainlab.events.fold import RunState
from chainlab.events.fold_decisions import decided_by

__all__ = ["TIMELINE_COLUMNS", "attempt_rows", "grants_table", "timeline_table", "write_csv"]


# --------------------------------------------------------------------------- timeline
TIMELINE_COLUMNS = ("run_id", "step_id", "kind", "attempt", "epoch", "tool", "status",
                    "started_at", "ended_at", "offset_s", "duration_s", "error_kind", "error",
                    "retry_delay_s", "idempotency_key", "input_tokens", "output_tokens",
                    "cost", "decided_by")


def attempt_rows(run_id: str, state: RunState) -> list[dict[str, Any]]:
    """Every attempt and compensation of the run, in start order (the timeline)."""
    origin = state.started_at or min((a.started_at for a in state.attempts), default=0.0)
    rows = []
    for a in sorted(state.attempts, key=lambda a: a.started_at):
        rows.append({
            "run_id": run_id, "step_id": a.step_id, "kind": a.kind, "attempt": a.attempt,
            "epoch": a.epoch, "tool": a.tool, "status": str(a.status),
            "started_at": a.started_at, "ended_at": a.ended_at,
            "offset_s": round(a.started_at - origin, 6),
            "duration_s": None if a.duration_s is None else round(a.duration_s, 6),
            "error_kind": a.error_kind, "error": a.error, "retry_delay_s": a.retry_delay_s,
            "idempotency_key": a.idempotency_key,
            "input_tokens": (a.usage or {}).get("input_tokens"),
            "output_tokens": (a.usage or {}).get("output_tokens"),
            "cost": (a.usage or {}).get("cost"),
            "decided_by": decided_by(state, a.step_id) if a.kind == "call" else None})
    return rows


def timeline_table(rows: Sequence[Mapping[str, Any]], title: str | None = None,
                   width: int | None = None) -> Table:
    """Attempts in start order, fitted to ``width`` (the step id is never cut)."""
    cols = [Col("start", drop=1, justify="right"), Col("step", key=True), Col("kind", drop=4),
            Col("#", drop=3, justify="right"), Col("epoch", drop=5, justify="right"),
            Col("tool", drop=6), Col("status", keep=True),
            Col("duration", drop=2, justify="right"), Col("error", flex=True, drop=7)]
    with_decided = any(r["decided_by"] for r in rows)
    if with_decided:
        cols.insert(8, Col("decided_by", drop=8))
    cells: list[list[str | Text]] = []
    for r in rows:
        error = f"{r['error_kind']}: {r['error']}" if r["error_kind"] else (r["error"] or "")
        if r["retry_delay_s"] is not None:
            error += f" (retry in {seconds(r['retry_delay_s'])})"
        cells.append([f"+{r['offset_s']:.3f} s", r["step_id"], r["kind"], str(r["attempt"]),
                      str(r["epoch"]), r["tool"] or "", status_text(r["status"]),
                      seconds(r["duration_s"]),
                      *([clip(r["decided_by"] or "", 40)] if with_decided else []),
                      clip(error, 100)])
    return fitted(cols, cells, width, title=title)


def grants_table(rows: Sequence[Mapping[str, Any]], width: int | None = None) -> Table:
    """A run's grants: id, condition, scope, who gave it, until when, status, and the calls
    it decided."""
    cols = [Col("grant", key=True), Col("when", flex=True), Col("scope", drop=3),
            Col("by", drop=2), Col("until", drop=4), Col("status", keep=True),
            Col("decided", flex=True, drop=1)]
    cells: list[list[str | Text]] = [
        [g["id"], g["when"], f"{g['scope']} ({g['parent']})" if g["scope"] == "step"
         else g["scope"], str(g["by"] or ""),
         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(g["expires_at"])), g["status"],
         clip(", ".join(g["decided"]) or "-", 80)] for g in rows]
    return fitted(cols, cells, width, title=f"{len(rows)} grants")


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The timeline as CSV (one row per attempt; empty cells for missing values)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=TIMELINE_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row[k] is None else row[k] for k in TIMELINE_COLUMNS})


