"""``chainlab fork``: a new run from a finished or suspended one (DESIGN §11), or with
``--plan`` only the fork plan (nothing is written)."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import anyio
import typer

from chainlab.cli.common import CliError, reporting_errors, trace_to
from chainlab.cli.driving import Output, interrupted, report
from chainlab.cli.executors import executor_for
from chainlab.cli.loading import (
    DEFAULT_DB,
    open_store,
    parse_json_object,
    parse_step_values,
    toolbox_for_run,
)
from chainlab.cli.options import DaskOpt, DbOpt, JsonOpt, QuietOpt, ToolsOpt
from chainlab.cli.progress import follow
from chainlab.runtime.runtime import Runtime

__all__ = ["register"]

def fork(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run to fork.")],
    from_step: Annotated[str | None, typer.Option(
        "--from", metavar="STEP", help="Run this step (and what depends on it) again.")] = None,
    args: Annotated[list[str] | None, typer.Option(
        "--args", metavar="STEP=JSON", help="Merge args into a step's args (repeatable).")
    ] = None,
    output: Annotated[list[str] | None, typer.Option(
        "--output", metavar="STEP=JSON",
        help="Record this output instead of running the step (repeatable).")] = None,
    context: Annotated[str | None, typer.Option(
        "--context", metavar="JSON", help="Merged over the parent's context.")] = None,
    rerun: Annotated[str | None, typer.Option(
        "--rerun", metavar="a,b", help="Steps to run again even if reusable.")] = None,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Only print the fork plan (one row per step); nothing runs.")] = False,
    tools: ToolsOpt = None,
    db: DbOpt = DEFAULT_DB,
    dask: DaskOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a NEW run from a finished or suspended one: steps that would do exactly what
    they did are reused (not called), changed or failed ones and their descendants run
    again, side-effecting ones only after approval. Without options: retry from the
    failure. Exit codes as `chainlab run`."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err):
        edits: dict[str, Any] = {
            "args": parse_step_values(args, "--args") or None,
            "outputs": parse_step_values(output, "--output") or None,
            "context": parse_json_object(context, "--context"),
            "rerun": ([from_step] if from_step else [])
            + [s.strip() for s in (rerun or "").split(",") if s.strip()] or None,
        }
        for step_id, value in (edits["args"] or {}).items():
            if not isinstance(value, dict):
                raise CliError(f"--args {step_id}: args are a JSON object, got "
                               f"{type(value).__name__}")
        store = open_store(db, must_exist=True)
        record = store.get_run(run_id)
        toolbox, spec = toolbox_for_run(record, tools)
        if plan:
            found = Runtime(toolbox, store).fork_plan_sync(run_id, **edits)
            if as_json:
                sys.stdout.write(json.dumps({"parent": run_id, "parent_seq": found.parent_seq,
                                             "steps": found.table()}) + "\n")
            else:
                io.out.print(str(found), markup=False, soft_wrap=True)
            store.close()
            raise typer.Exit(0)

        trace_to(None)  # (the OTEL_EXPORTER_OTLP_* variables)

        async def main() -> tuple[str, Any, Any]:
            async with Runtime(toolbox, store, executor=executor) as runtime:
                run = await runtime.fork(run_id, **edits, meta={
                    "tools": spec, "cwd": record.meta.get("cwd") or os.getcwd()})
                started.append(run.run_id)
                io.err.print(f"forked run {run.run_id} from run {run_id} (event "
                             f"{run.record.meta['forked_at_seq']})", markup=False)
                await follow(run, io.err, io.progress)
                return run.run_id, run.chain, run.state

        started: list[str] = []
        with executor_for(dask) as executor, interrupted(started, db):
            new_id, chain, state = anyio.run(main)
        code = report(io, new_id, chain, state, db, store)
        store.close()
    raise typer.Exit(int(code))


def register(app: typer.Typer) -> None:
    app.command()(fork)
