"""``chainlab experiment``: replay recorded runs under a change and print the table (DESIGN
§22): ``--plan`` only prints what each call would do; ``--show ID`` reads a stored experiment
back (``--diff RUN``: one run's diff), ``--list`` lists them; ``--json`` for scripts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from chainlab.cli.common import CliError, reporting_errors
from chainlab.cli.driving import Output
from chainlab.cli.loading import (
    DEFAULT_DB,
    load_chain,
    open_store,
    parse_json_object,
    toolbox_for_run,
)
from chainlab.cli.options import DbOpt, JsonOpt, QuietOpt, ToolsOpt
from chainlab.cli.views import Col, fitted
from chainlab.runtime.runtime import Runtime

__all__ = ["experiment_table", "register"]


def experiment(
    runs: Annotated[list[str] | None, typer.Argument(
        metavar="RUN_ID...", help="The recorded runs to replay (or --of CHAIN).")] = None,
    of: Annotated[str | None, typer.Option(
        "--of", metavar="CHAIN", help="Replay the stored runs of this chain (with --status, "
                                      "--limit).")] = None,
    status: Annotated[str | None, typer.Option(
        "--status", help="With --of: only runs in this status (e.g. succeeded).")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="With --of: the newest that many runs.")] = None,
    chain: Annotated[Path | None, typer.Option(
        "--chain", metavar="FILE", help="A new version of the chain (YAML or JSON).")] = None,
    context: Annotated[str | None, typer.Option(
        "--context", metavar="JSON", help="Merged over each run's recorded context.")] = None,
    live: Annotated[str | None, typer.Option(
        "--live", metavar="a,b", help="Tools whose NEW calls may be made, each after a "
                                      "person approves it.")] = None,
    recorded: Annotated[bool, typer.Option(
        "--recorded", help="Answer unchanged effect-free calls from the recording too.")
    ] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 4,
    name: Annotated[str | None, typer.Option("--name", help="The experiment's name.")] = None,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Only print each call's decision; nothing runs.")] = False,
    show: Annotated[str | None, typer.Option(
        "--show", metavar="ID", help="Print a stored experiment's table.")] = None,
    diff: Annotated[str | None, typer.Option(
        "--diff", metavar="RUN", help="With --show: print this run's diff.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the stored experiments.")
    ] = False,
    tools: ToolsOpt = None,
    db: DbOpt = DEFAULT_DB,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Replay recorded runs under a change (a new chain file, a context) as new runs kept
    apart from `chainlab runs`, each call decided by its contract: effect-free calls run,
    recorded side effects are answered from the recording (never made again), a NEW side
    effect is not made (the replay stops: needs_live_effect) unless its tool is --live.
    Prints one row per run. Exit code 0, or 1 on bad input (nothing started)."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err):
        store = open_store(db, must_exist=True)
        if list_:
            found = Runtime(None, store).experiments()
            if as_json:
                _json([{"experiment": e.experiment_id, "name": e.name,
                        "created_at": e.created_at, "runs": e.data.get("runs", []),
                        "status": e.data.get("status")} for e in found])
            else:
                for e in found:
                    io.out.print(f"{e.experiment_id}  {e.name}  {len(e.data.get('runs', []))} "
                                 f"runs  {e.data.get('status')}", markup=False)
            raise typer.Exit(0)
        if show is not None:
            result = Runtime(None, store).experiment_result(show)
            _print_result(io, result, diff)
            raise typer.Exit(0)
        ids = list(runs or [])
        if of is not None:
            ids += [r.run_id for r in Runtime(None, store).runs(limit, chain=of,
                                                                status=status)]
        if not ids:
            raise CliError("no runs to replay", hint="give RUN_ID... or --of CHAIN")
        first = store.get_run(ids[0])
        toolbox, spec = toolbox_for_run(first, tools)
        change: dict[str, Any] = {
            "chain": load_chain(chain) if chain is not None else None,
            "context": parse_json_object(context, "--context"),
            "live": [t.strip() for t in (live or "").split(",") if t.strip()],
            "recorded": recorded}
        if plan:
            found_plan = Runtime(toolbox, store).experimenter.plan_sync(ids, **change)
            if as_json:
                _json({"runs": ids, "steps": found_plan.table()})
            else:
                io.out.print(str(found_plan), markup=False, soft_wrap=True)
            raise typer.Exit(0)

        async def main() -> Any:
            async with Runtime(toolbox, store) as runtime:
                # each replay keeps the toolbox (and its folder): `chainlab approve` finds it
                meta = {"tools": spec, "cwd": first.meta.get("cwd") or os.getcwd()}
                return await runtime.experiment(ids, concurrency=concurrency, name=name,
                                                meta=meta, **change)

        io.err.print(f"replaying {len(ids)} run(s)...", markup=False)
        _print_result(io, anyio.run(main), None)
        store.close()
    raise typer.Exit(0)


def _print_result(io: Output, result: Any, diff: str | None) -> None:
    if diff is not None:
        text = result.diff(diff)
        if io.as_json:
            _json({"experiment": result.experiment_id, "run": diff, "diff": text})
        else:
            io.out.print(text, markup=False, soft_wrap=True)
        return
    if io.as_json:
        _json({"experiment": result.experiment_id, "name": result.name,
               "rows": result.rows()})
        return
    io.out.print(f"experiment {result.experiment_id} ({result.name})", markup=False)
    io.out.print(experiment_table(result.rows(), io.out.width))
    calls = result.needs_live_effect
    if calls:
        io.out.print("not made (needs_live_effect; --live TOOL to make them after approval):",
                     markup=False)
        for call in calls:
            io.out.print(f"  {call}", markup=False)


def experiment_table(rows: list[dict[str, Any]], width: int | None = None) -> Any:
    """The experiment's rows as a terminal table (ids never cut)."""
    scores = sorted({k for r in rows for k in r if k.startswith("score:")})
    cols = [Col("run", key=True), Col("replay", key=True), Col("outcome", keep=True),
            Col("status", drop=1), Col("calls +/-/~", drop=2), Col("tokens", drop=3),
            *(Col(s[len("score:"):], drop=4) for s in scores)]
    table = [[r["run"], r["new_run"] or "-", r["outcome"],
              f"{r['status_before']} -> {r['status_after'] or '-'}",
              f"{len(r['calls_added'])}/{len(r['calls_removed'])}/{len(r['args_changed'])}",
              f"{r['tokens_before']} -> "
              f"{r['tokens_after'] if r['tokens_after'] is not None else '-'}",
              *(str(r.get(s)) for s in scores)] for r in rows]
    return fitted(cols, table, width)


def _json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")


def register(app: typer.Typer) -> None:
    app.command()(experiment)
