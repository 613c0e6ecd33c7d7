"""Commands on stored runs: ``runs``, ``show``, ``timeline``, ``grants`` (read only),
``approve``, ``reject``, ``revoke``, ``resolve`` (sent to the process that drives the run,
else the run is continued here: ``Runtime.decide``) and ``resume``, ``rollback`` (continue
the run in this process)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from chainlab.cli.audit import attempt_rows, grants_table, timeline_table, write_csv
from chainlab.cli.commands.deciding import decide_run
from chainlab.cli.common import CliError, reporting_errors
from chainlab.cli.driving import (
    Control,
    Output,
    continue_run,
    db_flag,
    report,
    runs_stalled,
    stall_lines,
    stored_state,
)
from chainlab.cli.executors import executor_for
from chainlab.cli.loading import (
    DEFAULT_DB,
    open_store,
    parse_json,
    parse_json_object,
    toolbox_for_run,
)
from chainlab.cli.options import DaskOpt, DbOpt, JsonOpt, QuietOpt, ToolsOpt
from chainlab.cli.views import queues_line, runs_table
from chainlab.events.fold_decisions import grants_of
from chainlab.events.status import RUN_TERMINAL
from chainlab.plan.schema import Chain
from chainlab.render.json import record_dict
from chainlab.runtime import check_approve_args, check_rollback
from chainlab.runtime.coordination.stalls import STALLABLE
from chainlab.store.queue import Queue
from chainlab.tools import Toolbox

__all__ = ["register"]

RunIdArg = Annotated[str, typer.Argument(metavar="RUN_ID",
                                         help="The run's id (see `chainlab runs`).")]
StepArg = Annotated[str, typer.Argument(metavar="STEP", help="The step's id.")]
NoteOpt = Annotated[str | None, typer.Option("--note", help="A note kept with the decision.")]
ByOpt = Annotated[str | None, typer.Option(
    "--by", envvar="CHAINLAB_PRINCIPAL", metavar="PRINCIPAL",
    help="Who decides (recorded with the decision; default user@host).")]
RoleOpt = Annotated[list[str] | None, typer.Option(
    "--role", envvar="CHAINLAB_ROLES", metavar="ROLE",
    help="A role of the principal (repeatable): a tool naming approvers takes only "
         "principals with one of them.")]


def principal(by: str | None, roles: list[str] | None) -> dict[str, Any]:
    """The decision's ``by`` and ``roles`` options, as given (else the local user's)."""
    return {**({"by": by} if by else {}), **({"roles": list(roles)} if roles else {})}
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Take the run over even if another live process drives it (that one is "
                    "fenced: it commits nothing more).")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=0.1, metavar="SECONDS",
    help="How long to wait for the answer of the process that drives the run.")]


def _continue(run_id: str, action: str, control: Control | None, *, tools: str | None,
              db: str, dask: str | None, quiet: bool, as_json: bool,
              force: bool = False) -> None:
    """resume / rollback: take the run over in this process (refused while another live
    process drives it, unless ``force``), apply ``control``, follow and report."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err):
        store = open_store(db, must_exist=True)
        record = store.get_run(run_id)
        chain, state = stored_state(store, run_id)
        if action == "rollback":
            check_rollback(state)
        if action == "resume" and state.status in RUN_TERMINAL:
            io.err.print(f"run {run_id} already ended ({state.status}); nothing to resume",
                         markup=False)
            raise typer.Exit(int(report(io, run_id, chain, state, db, store)))
        toolbox, _ = toolbox_for_run(record, tools)
        with executor_for(dask) as executor:
            code = continue_run(io, run_id=run_id, toolbox=toolbox, store=store, db=db,
                                control=control, was=state.status, executor=executor,
                                force=force)
        store.close()
    raise typer.Exit(int(code))


def _decide(run_id: str, step: str, action: str, options: Callable[[], dict[str, Any]], *,
            tools: str | None, db: str, dask: str | None, quiet: bool, as_json: bool,
            timeout: float) -> None:
    """approve / reject / resolve through ``Runtime.decide`` (see
    chainlab.cli.commands.deciding)."""
    io = Output.make(quiet=quiet, as_json=as_json)
    with reporting_errors(io.err):
        chosen = options()  # parse the options first: a typo never reaches the run
        store = open_store(db, must_exist=True)
        record = store.get_run(run_id)
        unknown: CliError | None = None
        try:
            toolbox, _ = toolbox_for_run(record, tools)
        except CliError as exc:  # e.g. a notebook's run: its live driver has the tools
            toolbox, unknown = Toolbox("unknown"), exc
        if chosen.get("args") is not None and unknown is None:
            check_args(Chain.from_dict(record.chain), toolbox, step, chosen["args"])
        with executor_for(dask) as executor:
            code = decide_run(io, run_id=run_id, step_id=step, action=action, options=chosen,
                              toolbox=toolbox, store=store, db=db, executor=executor,
                              timeout=timeout, no_toolbox=unknown)
        store.close()
    raise typer.Exit(int(code))


def check_args(chain: Chain, toolbox: Toolbox, step_id: str, args: dict[str, Any]) -> None:
    """Edited args must fit the step's tool (checked here, by the runtime's own check, so
    that a mistake does not take the run over). Raises DecisionError."""
    step = chain.step(step_id) if step_id in chain.step_ids else None
    tool = toolbox.get(step.tool) if step is not None and step.tool in toolbox else None
    check_approve_args(tool, step_id, args)


def register(app: typer.Typer) -> None:
    """Add the run commands to ``app``."""

    @app.command()
    def runs(db: DbOpt = DEFAULT_DB,
             limit: Annotated[int, typer.Option("--limit", "-n", min=1)] = 20,
             as_json: JsonOpt = False) -> None:
        """List the runs in the database, newest first; under them, what each run that
        stands still waits for (nobody drives it: `chainlab resume RUN`; queued: the run
        that holds its concurrency key, and what that run waits for)."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            store = open_store(db, must_exist=True, readonly=True)
            records = store.list_runs(limit)
            moving = [r.run_id for r in records if r.status in STALLABLE]
            stalled = {s.run_id: s for s in runs_stalled(store, moving)} if moving else {}
            if as_json:
                sys.stdout.write(json.dumps([
                    {**record_dict(r), **({"stalled": stalled[r.run_id].to_dict()}
                                          if r.run_id in stalled else {})}
                    for r in records]) + "\n")
            elif not records:
                io.err.print(f"no runs in {db}", markup=False)
            else:
                io.out.print(runs_table(records, width=io.out.width))
                shown = stall_lines(list(stalled.values()), db_flag(db))
                if shown is not None:  # what a run that stands still waits for
                    io.out.print(shown, soft_wrap=True)
                line = queues_line(store.queue_depths()) if isinstance(store, Queue) else ""
                if line:  # how deep each queue of the fleet is
                    io.out.print(line, markup=False, soft_wrap=True)

    @app.command()
    def show(run_id: RunIdArg, db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
        """A run's steps: status, attempts, time, and what waits for a person (or that
        nobody drives it: `chainlab resume RUN`; queued: the run holding its key)."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            store = open_store(db, must_exist=True, readonly=True)
            chain, state = stored_state(store, run_id)
            code = report(io, run_id, chain, state, db, store)
        raise typer.Exit(int(code))

    @app.command()
    def timeline(run_id: RunIdArg, db: DbOpt = DEFAULT_DB,
                 csv: Annotated[Path | None, typer.Option(
                     "--csv", metavar="FILE", help="Also write the attempts as CSV.")] = None,
                 ) -> None:
        """Every attempt and compensation of a run, in start order."""
        io = Output.make()
        with reporting_errors(io.err):
            chain, state = stored_state(open_store(db, must_exist=True, readonly=True), run_id)
            rows = attempt_rows(run_id, state)
            io.out.print(timeline_table(rows, title=f"run {run_id} ({chain.name}): "
                                                    f"{len(rows)} attempts", width=io.out.width))
            if csv is not None:
                write_csv(rows, csv)
                io.err.print(f"wrote {len(rows)} rows to {csv}", markup=False)

    @app.command()
    def approve(run_id: RunIdArg, step: StepArg,
                args: Annotated[str | None, typer.Option(
                    "--args", metavar="JSON|@FILE",
                    help="Run the step with these args instead (validated again).")] = None,
                note: NoteOpt = None, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
                dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
                timeout: TimeoutOpt = 10.0,
                budget: Annotated[str | None, typer.Option(
                    "--budget", metavar="JSON",
                    help="A step stopped by the run's budget: raise it, e.g. "
                         "'{\"max_cost\": 2}' (merged over the current limits).")] = None,
                every: Annotated[bool, typer.Option(
                    "--all", help="Approve every step waiting at or under STEP (the "
                                  "instances of a for_each step, a sub-chain's steps), each "
                                  "with its own args.")] = False,
                grant: Annotated[str | None, typer.Option(
                    "--grant", metavar="COND",
                    help="Also approve the calls of the same tool in --scope whose args "
                         "match COND, e.g. 'args.amount <= 100' (waiting now, and later "
                         "ones) until --ttl passes or `chainlab revoke`.")] = None,
                scope: Annotated[str, typer.Option(
                    "--scope", metavar="step|run",
                    help="What a --grant covers: the calls of this step's parent (a "
                         "for_each step, an agent step) or of the whole run.")] = "step",
                ttl: Annotated[str, typer.Option(
                    "--ttl", metavar="DURATION",
                    help="How long a --grant lasts: seconds or 90s, 10m, 2h, 1d.")] = "10m",
                by: ByOpt = None, role: RoleOpt = None,
                ) -> None:
        """Approve a step that waits for confirmation (or for a budget): the process that
        drives the run applies it, or (nobody drives it) the run goes on in this process.
        With --grant, the approval decides similar calls too (DESIGN §21)."""
        def options() -> dict[str, Any]:
            if every and (args is not None or budget is not None or grant is not None):
                raise CliError("--all approves each step with its own args: it takes no "
                               "--args, --budget or --grant", hint="approve one step with "
                               f"them: chainlab approve {run_id} STEP --args ...")
            who = principal(by, role)
            if every:
                return {"all": True, "note": note, **who}
            edited = parse_json_object(args, "--args") if args is not None else None
            raised = parse_json_object(budget, "--budget") if budget is not None else None
            given = {"grant": {"when": grant, "scope": scope, "ttl_s": ttl}} \
                if grant is not None else {}
            return {"args": edited, "note": note, **({"budget": raised} if raised else {}),
                    **given, **who}

        _decide(run_id, step, "approve", options, tools=tools, db=db, dask=dask, quiet=quiet,
                as_json=as_json, timeout=timeout)

    @app.command()
    def reject(run_id: RunIdArg, step: StepArg,
               reason: Annotated[str, typer.Option("--reason", help="Why (kept in the log).")],
               by: ByOpt = None, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
               dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
               timeout: TimeoutOpt = 10.0) -> None:
        """Reject a step that waits for confirmation: its dependants are skipped and, under
        fail_fast, the run rolls back."""
        _decide(run_id, step, "reject", lambda: {"reason": reason, **principal(by, None)},
                tools=tools, db=db,
                dask=dask, quiet=quiet, as_json=as_json, timeout=timeout)

    @app.command()
    def grants(run_id: RunIdArg, db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
        """A run's grants (DESIGN §21): each one's condition, scope, who gave it, until
        when, its status (active, revoked, expired) and the calls it decided."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            _, state = stored_state(open_store(db, must_exist=True, readonly=True), run_id)
            rows = grants_of(state, time.time(), None)
            if as_json:
                sys.stdout.write(json.dumps(rows) + "\n")
            elif not rows:
                io.err.print(f"run {run_id} has no grants", markup=False)
            else:
                io.out.print(grants_table(rows, width=io.out.width))

    @app.command()
    def revoke(run_id: RunIdArg,
               grant: Annotated[str, typer.Argument(metavar="GRANT",
                                                    help="The grant's id (chainlab grants).")],
               by: ByOpt = None, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
               dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
               timeout: TimeoutOpt = 10.0) -> None:
        """Revoke a grant: it decides nothing more (the calls it decided stay decided)."""
        _decide(run_id, grant, "revoke", lambda: principal(by, None), tools=tools, db=db,
                dask=dask, quiet=quiet, as_json=as_json, timeout=timeout)

    @app.command()
    def resolve(run_id: RunIdArg, step: StepArg,
                output: Annotated[str | None, typer.Option(
                    "--output", metavar="JSON|@FILE",
                    help="The call took effect; this is its output.")] = None,
                retry: Annotated[bool, typer.Option("--retry", help="Call it again.")] = False,
                fail: Annotated[bool, typer.Option("--fail", help="Mark it failed.")] = False,
                note: NoteOpt = None, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
                dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
                timeout: TimeoutOpt = 10.0) -> None:
        """Decide an in-doubt step (a call whose effect is unknown): exactly one of
        --output JSON, --retry, --fail."""
        def options() -> dict[str, Any]:
            chosen = [name for name, on in (("--output", output is not None),
                                            ("--retry", retry), ("--fail", fail)) if on]
            if len(chosen) != 1:
                raise CliError(
                    "resolve needs exactly one of --output JSON, --retry, --fail"
                    + (f" (got {' and '.join(chosen)})" if chosen else ""),
                    hint=f"e.g. chainlab resolve {run_id} {step} --output '{{\"id\": 1}}'")
            value = parse_json(output, "--output") if output is not None else None
            return {"output": value, "retry": retry, "fail": fail, "note": note}

        _decide(run_id, step, "resolve", options, tools=tools, db=db, dask=dask, quiet=quiet,
                as_json=as_json, timeout=timeout)

    @app.command()
    def resume(run_id: RunIdArg, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
               dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
               force: ForceOpt = False) -> None:
        """Continue a run whose process stopped (crash, Ctrl-C): completed steps are kept,
        interrupted calls re-run, reconciled or left in doubt."""
        _continue(run_id, "resume", None, tools=tools, db=db, dask=dask, quiet=quiet,
                  as_json=as_json, force=force)

    @app.command()
    def rollback(run_id: RunIdArg, tools: ToolsOpt = None, db: DbOpt = DEFAULT_DB,
                 dask: DaskOpt = None, quiet: QuietOpt = False, as_json: JsonOpt = False,
                 force: ForceOpt = False) -> None:
        """Compensate a run's completed steps in reverse completion order (stopping it
        first if it still goes on); run again to retry failed compensations."""
        async def control(run: Any) -> None:
            await run.rollback()

        _continue(run_id, "rollback", control, tools=tools, db=db, dask=dask, quiet=quiet,
                  as_json=as_json, force=force)
