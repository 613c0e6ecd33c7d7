"""What the command line prints: step tables, run lists and the "what now" hints of a
suspended run (attempt timelines and grants: :mod:`chainlab.cli.audit`). Everything is read
from the run state (the fold of the stored events), never from a live scheduler. ``--json``
prints the run's JSON view, :mod:`chainlab.render.json` (the one an HTTP API hands out
too)."""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from chainlab.events.fold import BACKGROUND_NOTE, RunState, StepState
from chainlab.events.fold_decisions import decided_by
from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus
from chainlab.events.usage import usage_text
from chainlab.plan.schema import Chain
from chainlab.render.json import job_caption
from chainlab.store.base import RunRecord
from chainlab.store.queue import QueueDepth

__all__ = [
    "Col",
    "driver_text",
    "fitted",
    "next_steps",
    "queues_line",
    "runs_table",
    "status_text",
    "steps_table",
]

S = StepStatus
STATUS_STYLE: dict[str, str] = {
    "queued": "dim cyan", "pending": "dim", "ready": "cyan", "running": "bold cyan",
    "retry_wait": "yellow",
    "waiting_confirmation": "bold yellow", "succeeded": "green", "failed": "bold red",
    "skipped": "dim", "rejected": "red", "in_doubt": "bold magenta", "cancelled": "dim red",
    "compensating": "yellow", "compensated": "blue", "compensation_failed": "bold red",
    "paused": "yellow", "suspended": "bold yellow", "rolled_back": "blue",
    "rollback_failed": "bold red", "timed_out": "red", "interrupted": "magenta",
}
_ATTENTION = (S.RUNNING, S.RETRY_WAIT, S.WAITING_CONFIRMATION, S.IN_DOUBT, S.FAILED,
              S.COMPENSATING, S.COMPENSATION_FAILED, S.REJECTED)


@dataclass(frozen=True, slots=True)
class Col:
    """A column of a table that fits the terminal (:func:`fitted`): ``key`` (an id: never
    dropped, never cut, wrapped when even it does not fit), ``keep`` (never dropped, never
    cut: a status), ``drop`` (an optional column's rank: the highest goes first when the
    table is too wide) and ``flex`` (a note that shrinks with an ellipsis instead)."""

    name: str
    key: bool = False
    drop: int = 0
    flex: bool = False
    justify: str = "left"
    keep: bool = False  # never dropped (a status): whole, beside the ids


_GAP = 3  # " │ " between two columns (no edge, no edge padding)


def fitted(cols: Sequence[Col], rows: Sequence[Sequence[str | Text]], width: int | None, *,
           title: str | None = None, expand: bool = False) -> Table:
    """A table of ``rows`` that fits ``width`` columns (the terminal's; None: any width):
    optional columns are dropped first (highest ``drop`` first), notes shrink, and a run id
    or a step id is never cut (issue 40: at 80 columns ``chainlab runs`` printed
    "20261205-014601-a…", the one value a person must copy)."""
    def natural(i: int) -> int:
        return max([cell_len(cols[i].name)] + [cell_len(_plain(r[i])) for r in rows])

    shown = list(range(len(cols)))
    need = {i: (min(natural(i), 12) if cols[i].flex else natural(i)) for i in shown}
    while width is not None and sum(need[i] for i in shown) + _GAP * (len(shown) - 1) > width:
        optional = [i for i in shown if cols[i].drop > 0 and not cols[i].keep]
        if not optional:
            break
        shown.remove(max(optional, key=lambda i: cols[i].drop))
    keys = [i for i in shown if cols[i].key]
    room = {i: natural(i) for i in keys}
    if width is not None:  # the keys share what the other columns leave (never below 4)
        left = width - sum(need[i] for i in shown if not cols[i].key) - _GAP * (len(shown) - 1)
        total = sum(room.values())
        if total > left:
            room = {i: max(4, room[i] * left // max(total, 1) - 1) for i in keys}
    table = Table(title=title, title_justify="left", expand=expand, show_edge=False,
                  pad_edge=False)
    for i in shown:
        col = cols[i]
        if col.key:  # whole when it fits; wrapped (folded), never cut, when it cannot
            table.add_column(col.name, min_width=room[i], overflow="fold",
                             justify=col.justify)  # type: ignore[arg-type]
        elif col.flex:
            table.add_column(col.name, no_wrap=True, overflow="ellipsis", ratio=1,
                             justify=col.justify)  # type: ignore[arg-type]
        else:
            table.add_column(col.name, no_wrap=True, overflow="ellipsis",
                             justify=col.justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def status_text(status: object) -> Text:
    value = str(status)
    return Text(value, style=STATUS_STYLE.get(value, ""))


def clip(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str,
                                                           ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def step_note(st: StepState) -> str:
    """One short line about a step: why it failed/waits/was skipped, or its output."""
    if st.background:
        return clip(f"{BACKGROUND_NOTE}; {st.error_kind}: {st.error}", 80)
    caption = job_caption(st) if st.job is not None else None
    if caption is not None:  # a remote job: what it waits on and how often it asked
        job = st.job or {}
        return clip(f"{caption} · {job.get('polls') or 0} polls · handle "
                    f"{json.dumps(job.get('handle'))}", 80)
    if st.status in (S.FAILED, S.IN_DOUBT, S.RETRY_WAIT, S.COMPENSATION_FAILED) and st.error:
        return clip(f"{st.error_kind}: {st.error}" if st.error_kind else st.error, 80)
    if st.status == S.WAITING_CONFIRMATION:
        return "waits for approval: " + clip(st.preview, 60)
    if st.status in (S.SKIPPED, S.REJECTED, S.CANCELLED) and st.reason:
        return clip(str(st.reason), 80)
    if st.status in (S.SUCCEEDED, S.COMPENSATED) and st.output is not None:
        return clip(st.output, 60)
    return ""


def step_tools(chain: Chain | None, state: RunState) -> dict[str, str]:
    tools = {s.id: s.tool for s in chain.steps} if chain is not None else {}
    for rec in state.attempts:
        if rec.kind == "call" and rec.tool:
            tools.setdefault(rec.step_id, rec.tool)
    if state.growth:  # an agent's call, also not started yet (a run that grew nothing: none)
        from chainlab.agent.turns import call_tools

        for step_id, tool in call_tools(state).items():
            tools.setdefault(step_id, tool)
    return tools


def steps_table(state: RunState, chain: Chain | None, *, limit: int | None = None,
                title: str | None = None, now: float | None = None,
                width: int | None = None) -> Table:
    """Steps with status, attempts, duration and a note (fitted to ``width``: the step id
    is never cut). With ``limit``, the steps that need attention come first and the rest
    is counted in the caption."""
    tools = step_tools(chain, state)
    cols = [Col("step", key=True), Col("tool", drop=4), Col("status", keep=True),
            Col("#", drop=3, justify="right"), Col("time", drop=2, justify="right"),
            Col("note", flex=True, drop=1)]
    steps = list(state.steps.values())
    # who or what decided each call (DESIGN §21), for a run where anything was decided
    with_decided = any(st.decided for st in steps)
    if with_decided:
        cols.insert(5, Col("decided by", drop=5))
    with_usage = bool(state.usage)  # the usage columns only for a run that reported any
    if with_usage:
        cols += [Col("tokens", drop=6, justify="right"), Col("cost", drop=5, justify="right")]
    shown, folded = _fold_grown(steps)
    caption = None
    if limit is not None and len(shown) > limit:
        shown = [st for st in steps if st.status in _ATTENTION][:limit]
        kept = {id(st) for st in shown}
        caption = f"{len(steps) - len(shown)} more steps: " + counts_line(
            [st for st in steps if id(st) not in kept])
    rows: list[list[str | Text]] = []
    for st in shown:
        if isinstance(st, str):  # the grown steps of a parent not shown one by one
            rows.append([Text(st, style="dim"), "", "", "", "", *([""] if with_decided
                                                                    else []), folded[st]])
            continue
        end = st.ended_at if st.ended_at is not None else (
            (now or time.time()) if st.status == S.RUNNING else None)
        took = end - st.started_at if end is not None and st.started_at is not None else None
        cells: list[str | Text] = [st.step_id, tools.get(st.step_id, ""), status_text(st.status),
                                   str(st.attempts or ""), seconds(took), step_note(st)]
        if with_decided:
            cells.insert(5, clip(decided_by(state, st.step_id) or "", 40))
        if with_usage:
            usage = st.usage or {}
            cells += [f"{usage['tokens']:,}" if "tokens" in usage else "",
                      f"{usage['cost']:.4g}" if "cost" in usage else ""]
        rows.append(cells)
    table = fitted(cols, rows, width, title=title, expand=True)
    table.caption = caption
    return table


GROWN_SHOWN = 5  # rows per step that grew steps; the rest are counted in one row


def _fold_grown(steps: list[StepState]) -> tuple[list[Any], dict[str, str]]:
    """The rows of a steps table: a step's grown steps (a for_each step's instances) after
    it, those that need attention first, at most :data:`GROWN_SHOWN`, the rest counted in
    one row (``… 9,995 more of pay``: its key, with the counts in ``folded``)."""
    if not any(st.parent is not None for st in steps):
        return steps, {}
    grown: dict[str, list[StepState]] = {}
    for st in steps:
        if st.parent is not None:
            grown.setdefault(st.parent, []).append(st)
    shown: list[Any] = []
    folded: dict[str, str] = {}
    for st in steps:
        if st.parent is not None and st.parent in grown:
            continue  # (listed under their parent)
        shown.append(st)
        kids = grown.get(st.step_id)
        if not kids:
            continue
        first = sorted(kids, key=lambda k: k.status not in _ATTENTION)[:GROWN_SHOWN]
        picked = {id(k) for k in first}
        shown += [k for k in kids if id(k) in picked]
        rest = [k for k in kids if id(k) not in picked]
        if rest:
            key = f"… {len(rest):,} more of {st.step_id}"
            folded[key] = counts_line(rest)
            shown.append(key)
    return shown, folded


def counts_line(steps: Iterable[StepState]) -> str:
    counts = Counter(str(st.status) for st in steps)
    return " · ".join(f"{n} {status}" for status, n in counts.most_common())


def run_line(run_id: str, chain_name: str, state: RunState) -> Text:
    status = state.status or RunStatus.RUNNING
    line = Text(f"run {run_id} ({chain_name}) ")
    line.append_text(status_text(status))
    if state.started_at is not None:
        line.append(f" after {seconds(_until(state, status) - state.started_at)}")
    line.append(f" · {counts_line(state.steps.values())}", style="dim")
    if state.usage:
        line.append(f" · {usage_text(state.usage)}")
    return line


def _until(state: RunState, status: RunStatus) -> float:
    """When the run stopped moving: its end; for a run that waits for a person (suspended,
    paused) its last step's activity, not now (issue 40: ``show`` said "suspended after 7.84
    s", the time until it was shown, where ``run`` had said 333 ms); now for a run that
    runs."""
    if status in RUN_TERMINAL and state.ended_at:
        return state.ended_at
    if status in (RunStatus.SUSPENDED, RunStatus.PAUSED):
        times = [t for st in state.steps.values()
                 for t in (st.started_at, st.ended_at, st.waiting_since) if t is not None]
        times += [a.ended_at or a.started_at for a in state.attempts]
        return max(times, default=state.started_at or time.time())
    return time.time()


def next_steps(run_id: str, state: RunState, db_flag: str = "") -> Group | None:
    """What a person can do now: approve/reject waiting steps, resolve in-doubt ones."""
    q = shlex.quote
    lines: list[Text] = []
    for st in state.steps.values():
        step_id = q(st.step_id)
        if st.status == S.WAITING_CONFIRMATION:
            lines.append(Text.assemble(("  " + st.step_id, "bold"),
                                       " waits for confirmation; preview: ",
                                       clip(st.preview, 200)))
            lines.append(Text(f"    approve: chainlab approve {run_id} {step_id}{db_flag}"))
            args = json.dumps(st.args or {}, ensure_ascii=False)
            args = q(args) if len(args) <= 120 else "@args.json"
            lines.append(Text(f"    edit:    chainlab approve {run_id} {step_id} --args "
                              f"{args}{db_flag}", style="dim"))
            lines.append(Text(f"    reject:  chainlab reject {run_id} {step_id} --reason "
                              f"'why'{db_flag}"))
        elif st.status == S.IN_DOUBT:
            lines.append(Text.assemble(("  " + st.step_id, "bold"), " is in doubt: ",
                                       clip(st.error or st.reason or "", 200)))
            lines.append(Text(f"    resolve: chainlab resolve {run_id} {step_id} "
                              f"(--output JSON | --retry | --fail){db_flag}"))
    if not lines:
        return None
    head = Text("The run waits for a person:", style="bold yellow")
    return Group(head, *lines)


# --------------------------------------------------------------------------- runs
def runs_table(records: Sequence[RunRecord], width: int | None = None) -> Table:
    """The runs, newest first, fitted to ``width``: the run id is never cut (the columns
    ``updated``, ``created``, ``steps``, ``forked from`` and ``chain`` go first)."""
    forks = any(r.lineage for r in records)  # the lineage column only where there is one
    queued = any(r.queue for r in records)  # queue and worker only where a fleet works
    cols = [Col("run", key=True), Col("chain", drop=1), Col("status", keep=True),
            Col("steps", drop=3, justify="right"), Col("created", drop=4),
            Col("updated", drop=5),
            *((Col("queue", drop=6), Col("worker", drop=7)) if queued else ()),
            *((Col("forked from", drop=2),) if forks else ())]
    rows = [[r.run_id, r.chain_name, status_text(r.status), str(len(r.chain.get("steps", []))),
             _when(r.created_at), _when(r.updated_at),
             *((r.queue or "", driver_text(r)) if queued else ()),
             *((r.lineage or "",) if forks else ())]
            for r in records]
    return fitted(cols, rows, width)


def driver_text(record: RunRecord) -> str:
    """Who drives the run now: ``w2 on host-a`` (a fleet worker), ``pid 12 on host-a``."""
    d = record.driver
    if d is None:
        return ""
    return f"{d.worker} on {d.host}" if d.worker else f"pid {d.pid} on {d.host}"


def queues_line(depths: Sequence[QueueDepth]) -> str:
    """One line about every queue: ``queues: default: 12 queued · 3 in progress · ...``."""
    return ("queues: " + "; ".join(d.text() for d in depths)) if depths else ""


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def print_json(console: Console, data: Any) -> None:
    console.print_json(json.dumps(data, default=str, ensure_ascii=False))
