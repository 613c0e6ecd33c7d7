"""A fork plan as data: one :class:`ForkRow` per step (reuse, override, rerun or confirm,
with the reason and what the parent did), the :class:`ForkPlan` that holds them and prints as
a table, and the helpers that compare and show values. No decision is made here: the
decision table is :mod:`.fork_rules`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chainlab.errors import (
    UnknownStepError,
)
from chainlab.events import (
    EventKind,
    StepStatus,
)
from chainlab.plan.schema import Chain, RunOptions

if TYPE_CHECKING:
    pass

S = StepStatus
K = EventKind

__all__ = ["ForkDecision", "ForkPlan", "ForkRow", "args_diff", "same", "text_table"]


class ForkDecision(StrEnum):
    REUSE = "reuse"  # recorded output copied; the tool is not called
    OVERRIDE = "override"  # output given by a person
    RERUN = "rerun"  # runs normally (effect-free, or safe to repeat)
    CONFIRM = "confirm"  # side-effecting: runs only after a person approves it in the fork
    # a remote job still waiting in the parent: the fork waits on the SAME job (its handle);
    # naming it in rerun= submits a new job instead, under a new key, after approval
    ATTACH = "attach"


@dataclass(frozen=True, slots=True)
class ForkRow:
    """One step's fate in a fork. ``args`` are the fork's resolved args when known before
    anything runs (None when an upstream step must run first)."""

    step_id: str
    tool: str
    decision: ForkDecision
    reason: str
    parent_status: str | None
    args: dict[str, Any] | None = None
    output: Any = None  # reuse: the copied output; override: the given one
    source_run: str | None = None  # reuse: the run whose attempt produced the output
    source_attempt: int | None = None
    code: str | None = None  # reuse: fingerprint of the code that produced it
    origin: str | None = None  # reuse: "call" (a tool made it) or "override" (a person)
    parent_args: dict[str, Any] | None = None
    parent_output: Any = None
    parent_error: str | None = None
    parent_source: str | None = None  # the run where the parent's output was really made
    job: dict[str, Any] | None = None  # attach: the parent's job (handle, key, submitted_at)

    def card(self, parent_run: str) -> str:
        """What an approver reads: what the parent already did with this step."""
        args = _short(self.parent_args)
        if self.parent_source and self.parent_source != parent_run:
            parent_run = f"{self.parent_source} (reused by run {parent_run})"
        status = self.parent_status
        if status is None or status in (S.PENDING, S.READY):
            return f"never ran in run {parent_run}"
        if status in (S.SUCCEEDED, S.COMPENSATED, S.COMPENSATING, S.COMPENSATION_FAILED):
            undone = "" if status == S.SUCCEEDED else f" (then {status})"
            return (f"ran in run {parent_run} with args {args}, output "
                    f"{_short(self.parent_output)}{undone}")
        if status == S.SKIPPED:
            return f"skipped in run {parent_run}"
        error = f", error {self.parent_error}" if self.parent_error else ""
        return f"{status} in run {parent_run} with args {args}{error}"


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """What a fork of ``parent_run_id`` (as of event ``parent_seq``) would do, step by step."""

    parent_run_id: str
    parent_seq: int
    chain: Chain
    context: dict[str, Any]
    options: RunOptions
    chains: dict[str, dict[str, Any]]
    rows: list[ForkRow] = field(default_factory=list)
    # a for_each step -> what each instance of it did in the parent (the fork's run reuses
    # an instance by its args as the step grows)
    instances: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def row(self, step_id: str) -> ForkRow:
        for row in self.rows:
            if row.step_id == step_id:
                return row
        raise UnknownStepError(step_id, [r.step_id for r in self.rows])

    @property
    def decisions(self) -> dict[str, str]:
        """``{step_id: decision}`` in plan order."""
        return {row.step_id: str(row.decision) for row in self.rows}

    def table(self) -> list[dict[str, Any]]:
        """Rows as plain dicts (step, tool, parent status, decision, reason); as a pandas
        DataFrame: ``chainlab.timeline.fork_plan_frame(plan)``."""
        return [
            {"step": r.step_id, "tool": r.tool, "parent": r.parent_status or "-",
             "decision": str(r.decision), "reason": r.reason}
            for r in self.rows
        ]

    def __str__(self) -> str:
        return text_table(self.table(), ["step", "tool", "parent", "decision", "reason"])


def text_table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    """``rows`` as aligned plain text under a header of ``cols`` (a plan printed)."""
    cells = [[str(r[c]) for c in cols] for r in rows]
    width = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()
              for r in cells]
    return "\n".join(lines)


def same(a: Any, b: Any) -> bool:
    return _canonical(a) == _canonical(b)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def args_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if not same(old.get(k), new.get(k)))
    return ", ".join(f"{k}: {_short(old.get(k), 24)} -> {_short(new.get(k), 24)}" for k in keys)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


