"""Following a run while it goes: a live table on a terminal, one line per notable event
elsewhere (pipes, logs, CI), nothing with ``--quiet``. Both subscribe to the run's events;
the live table is redrawn from the run state at most ten times a second, on the loop.
Both show a streamed model answer as it comes (``deltas=True``: an agent with
``stream=True``, which ``chainlab agent``'s ad-hoc agent is): the lines as its text, the
table below it, the current turn's last lines."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

import anyio
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from chainlab.cli.views import clip, run_line, seconds, steps_table
from chainlab.events import MODEL_DELTA, Event
from chainlab.events.writing import Writing

if TYPE_CHECKING:
    from chainlab.runtime.runtime import Run, RunResult

__all__ = ["ProgressMode", "follow"]

ProgressMode = Literal["live", "lines", "quiet"]
_LIVE_ROWS = 20
_TAIL = 400  # characters of the current turn's text the live table shows


async def follow(run: Run, console: Console, mode: ProgressMode) -> RunResult:
    """``await run.wait()`` while showing progress on ``console``."""
    if mode == "quiet":
        return await run.wait()
    if mode == "lines":
        if run.status == "running" and not run.state.attempts:
            console.print(f"▶ run {run.run_id} started: {run.chain.name} "
                          f"({len(run.steps)} steps)", markup=False, highlight=False)
        unsubscribe = run.subscribe(_lines(console, run), deltas=True)
        try:
            return await run.wait()
        finally:
            unsubscribe()
    return await _live(run, console)


def _lines(console: Console, run: Run) -> Any:
    """A subscriber printing a line per notable event, and a streamed answer's text as it
    comes (its turn on a line of its own)."""
    writing = Writing()
    line: list[tuple[str, int]] = []  # the turn whose text the current line holds

    def on_item(item: Any) -> None:
        out = console.file
        if item.kind == MODEL_DELTA:
            writing.add(item)
            if line != [(item.step_id, item.turn)]:
                out.write(("\n" if line else "") + f"… {item.step_id} turn {item.turn}: ")
                line[:] = [(item.step_id, item.turn)]
            out.write(writing.said(item))
            out.flush()
            return
        if line:
            out.write("\n")
            line.clear()
        writing.end(item.step_id)
        _line(console, run, item)

    return on_item


async def _live(run: Run, console: Console) -> RunResult:
    changed = anyio.Event()
    writing = Writing()

    def on_event(item: Any) -> None:
        writing.heard(item)  # (an event: its step's turn is recorded, the table shows it)
        changed.set()

    def view() -> Group:
        parts: list[Any] = [run_line(run.run_id, run.chain.name, run.state),
                            steps_table(run.state, run.chain, limit=_LIVE_ROWS,
                                        now=time.time(), width=console.width)]
        parts += [Text.assemble((f"… {step_id} turn {turn}: ", "dim"), text[-_TAIL:])
                  for step_id, (turn, text) in writing.open.items()]
        return Group(*parts)

    unsubscribe = run.subscribe(on_event, deltas=True)
    try:
        with Live(view(), console=console, auto_refresh=False, transient=True) as live:
            async with anyio.create_task_group() as tg:
                async def redraw() -> None:
                    nonlocal changed
                    while True:
                        with anyio.move_on_after(0.5):  # running steps' clocks tick too
                            await changed.wait()
                        changed = anyio.Event()
                        live.update(view(), refresh=True)
                        await anyio.sleep(0.1)

                tg.start_soon(redraw)
                result = await run.wait()
                tg.cancel_scope.cancel()
    finally:
        unsubscribe()
    return result


_RUN_LINES = {
    "run_suspended": ("⏸", "yellow", "suspended: waiting for a person"),
    "run_succeeded": ("✔", "green", "succeeded"),
    "run_failed": ("✘", "red", "failed"),
    "run_cancelled": ("✘", "red", "cancelled"),
    "run_rollback_started": ("↺", "yellow", "rolling back"),
    "run_rolled_back": ("↺", "blue", "rolled back"),
    "run_rollback_failed": ("✘", "red", "rollback failed"),
}


def _line(console: Console, run: Run, ev: Event) -> None:
    """One line for an event worth a line (not step_ready/step_started: too many)."""
    p = ev.payload
    kind = ev.kind
    step_id = ev.step_id or ""
    st = run.state.steps.get(step_id)
    error = clip(f"{p.get('error_kind')}: {p.get('error')}" if p.get("error_kind")
                 else p.get("error", ""), 100)
    took = seconds(st.ended_at - st.started_at) if st is not None and st.ended_at and \
        st.started_at else ""
    lines = {
        "step_succeeded": ("✓", "green", f"{step_id} succeeded {took}".rstrip()),
        "step_failed": ("✗", "red", f"{step_id} failed: {error}"),
        "step_retry_scheduled": ("↻", "yellow",
                                 f"{step_id} attempt {ev.attempt} failed ({error}); retry in "
                                 f"{seconds(p.get('delay_s'))}"),
        "step_timed_out": ("⧗", "yellow", f"{step_id} attempt {ev.attempt} timed out"),
        "step_waiting_confirmation": ("⏸", "yellow",
                                      f"{step_id} waits for confirmation: "
                                      f"{clip(p.get('preview'), 100)}"),
        "step_approved": ("✓", "green", f"{step_id} approved"
                          + (" with edited args" if p.get("args") is not None else "")),
        "step_rejected": ("✗", "red", f"{step_id} rejected: {p.get('reason', '')}"),
        "step_skipped": ("-", "dim", f"{step_id} skipped ({p.get('reason')})"),
        "step_in_doubt": ("?", "magenta", f"{step_id} in doubt: {error}"),
        "step_cancelled": ("-", "dim", f"{step_id} cancelled"),
        "compensation_started": ("↺", "yellow", f"{step_id} compensating with {p.get('tool')}"),
        "compensation_succeeded": ("↺", "blue", f"{step_id} compensated"),
        "compensation_failed": ("✗", "red", f"{step_id} compensation failed: {error}"),
        "run_started": ("▶", "bold", f"run {ev.run_id} started: {run.chain.name} "
                                     f"({p.get('steps')} steps)"),
        "run_resumed": ("▶", "bold", f"run {ev.run_id} resumed ({p.get('reason')})"),
    }
    if kind in _RUN_LINES:
        mark, style, text = _RUN_LINES[kind]
        text = f"run {ev.run_id} {text}"
    elif kind in lines:
        mark, style, text = lines[kind]
    else:
        return
    console.print(Text.assemble((mark + " ", style), text), soft_wrap=True, highlight=False)
