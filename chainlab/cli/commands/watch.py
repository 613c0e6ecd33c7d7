"""Commands for runs driven elsewhere: ``watch`` (follow one live) and ``approvals`` (what
waits for a person across every unfinished run). Both only read the store."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated

import anyio
import typer
from rich.table import Table
from rich.text import Text

from chainlab.cli.common import CliError, ExitCode, exit_code_for, reporting_errors
from chainlab.cli.driving import Output, db_flag, report, runs_stalled, stall_lines
from chainlab.cli.loading import DEFAULT_DB, open_store
from chainlab.cli.options import DbOpt, JsonOpt, QuietOpt
from chainlab.cli.progress import follow
from chainlab.cli.views import clip
from chainlab.events import RUN_TERMINAL, Event, RunState
from chainlab.plan.schema import Chain
from chainlab.runtime.coordination.inbox import WaitingDecision, waiting_decisions
from chainlab.runtime.runtime import Runtime
from chainlab.store.base import Store
from chainlab.tools import Toolbox

__all__ = ["approvals_table", "event_dict", "register"]


def event_dict(ev: Event) -> dict[str, object]:
    """An event as JSON data (one line of ``chainlab watch --json``)."""
    return {"run_id": ev.run_id, "seq": ev.seq, "ts": ev.ts, "epoch": ev.epoch,
            "kind": str(ev.kind), "step_id": ev.step_id, "attempt": ev.attempt,
            "payload": ev.payload}


def _print_event(ev: Event) -> None:
    sys.stdout.write(json.dumps(event_dict(ev), default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def watch_run(io: Output, store: Store, run_id: str, *, until_suspended: bool
              ) -> tuple[Chain, RunState]:
    """Follow ``run_id`` (driven by another process) with the progress display of ``chainlab
    run`` (``--json``: every event as a JSON line) until it ends, or suspends with
    ``until_suspended``. A run that has ended is only read."""

    async def main() -> tuple[Chain, RunState]:
        async with Runtime(Toolbox("watch (no tools)"), store) as runtime:
            run = await anyio.to_thread.run_sync(runtime.watch_run, run_id)
            run.settle_on_suspend = until_suspended
            if io.as_json:
                for ev in run.history():
                    _print_event(ev)
                run.subscribe(_print_event)
            if run.status not in RUN_TERMINAL:
                io.err.print(Text.assemble(
                    ("watching ", "dim"), f"run {run_id} ({run.chain.name}) ",
                    (f"{run.status}, {run.driven_by()}; Ctrl-C stops watching (the "
                     "run goes on)", "dim")), soft_wrap=True)
                await follow(run, io.err, io.progress)
            return run.chain, run.state

    try:
        return anyio.run(main)
    except KeyboardInterrupt:
        raise CliError(f"stopped watching run {run_id}; it goes on in its driver",
                       hint=f"watch it again: chainlab watch {run_id}",
                       code=ExitCode.INTERRUPTED) from None


def approvals_table(items: list[WaitingDecision], now: float | None = None) -> Table:
    """One row per waiting decision: run, chain, step, tool, kind, since, preview."""
    now = time.time() if now is None else now
    table = Table(show_edge=False, pad_edge=False, expand=True)
    for name in ("run", "chain", "step", "tool", "decision", "since"):
        table.add_column(name, no_wrap=True)
    table.add_column("preview / error", no_wrap=True, overflow="ellipsis", ratio=1)
    for d in items:
        kind = Text("confirm", style="bold yellow") if d.kind == "confirm" else \
            Text("in doubt", style="bold magenta")
        ago = max(0.0, now - d.since)
        since = time.strftime("%H:%M:%S", time.localtime(d.since)) + (
            f" ({ago:.0f} s ago)" if ago < 120 else f" ({ago / 60:.0f} min ago)")
        table.add_row(d.run_id, d.chain, d.step_id, d.tool or "", kind, since,
                      clip(d.preview, 120))
    return table


def register(app: typer.Typer) -> None:
    """Add ``watch`` and ``approvals`` to ``app``."""

    @app.command()
    def watch(
        run_id: Annotated[str, typer.Argument(metavar="RUN_ID",
                                              help="The run's id (see `chainlab runs`).")],
        db: DbOpt = DEFAULT_DB,
        until_suspended: Annotated[bool, typer.Option(
            "--until-suspended", help="Also stop (exit 3) when the run waits for a person."
        )] = False,
        quiet: QuietOpt = False,
        as_json: Annotated[bool, typer.Option(
            "--json", help="Print every event (stored, then live) as one JSON line.")] = False,
    ) -> None:
        """Follow, live, a run driven by another process (`chainlab run`, a notebook, a
        service) until it ends; exit code as `chainlab run` gives for that end. A run that
        already ended: its final state."""
        io = Output.make(quiet=quiet, as_json=as_json)
        with reporting_errors(io.err):
            store = open_store(db, must_exist=True, readonly=True)
            try:
                chain, state = watch_run(io, store, run_id, until_suspended=until_suspended)
                code = exit_code_for(state.status) if as_json else report(
                    io, run_id, chain, state, db, store)
            finally:
                store.close()
        raise typer.Exit(int(code))

    @app.command()
    def approvals(db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
        """Every step that waits for a person, across all unfinished runs: confirmations to
        approve or reject, in-doubt steps to resolve (oldest first); and the runs that stand
        still with nobody driving them (`chainlab resume RUN`) or queued behind the run
        holding their concurrency key."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            store = open_store(db, must_exist=True, readonly=True)
            try:
                items = waiting_decisions(store)
                stalled = runs_stalled(store)  # runs a person must move on another way
            finally:
                store.close()
            shown = stall_lines(stalled, db_flag(db))
            if as_json:
                sys.stdout.write(json.dumps([d.to_dict() for d in items], default=str,
                                            ensure_ascii=False) + "\n")
                if shown is not None:  # (a person's note beside the data)
                    io.err.print(shown, soft_wrap=True)
                return
            if shown is not None:
                io.out.print(shown, soft_wrap=True)
            if not items:
                io.err.print("nothing waits for a decision", markup=False)
                return
            io.out.print(approvals_table(items))
            flag = db_flag(db)
            io.out.print(Text(
                f"{len(items)} waiting · approve: chainlab approve RUN STEP{flag} · reject: "
                f"chainlab reject RUN STEP --reason '...'{flag} · in doubt: chainlab resolve "
                f"RUN STEP (--output JSON | --retry | --fail){flag}", style="dim"),
                soft_wrap=True)
