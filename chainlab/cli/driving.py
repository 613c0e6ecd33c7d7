"""Driving runs from the command line: start one, or continue one from the store in a new
process (approve, reject, resolve, rollback, resume), showing progress, then report.

A continued run goes ``run = await runtime.resume(run_id)`` (a new epoch: an older process
can no longer write), ``await run.wait()`` (recovery settles: suspended again, or ended),
then the control coroutine, then ``await run.wait()`` for the new state.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console, Group
from rich.text import Text

from chainlab.cli.common import CliError, ExitCode, exit_code_for, trace_to
from chainlab.cli.loading import DEFAULT_DB
from chainlab.cli.progress import ProgressMode, follow
from chainlab.cli.views import next_steps, run_line, steps_table
from chainlab.events.fold import RunState, read_run
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.events.usage import usage_text
from chainlab.plan.parts import names_an_agent
from chainlab.plan.schema import Chain, RunOptions
from chainlab.render.json import declared_output, run_dict
from chainlab.runtime import Executor
from chainlab.runtime.coordination.liveness import Liveness
from chainlab.runtime.coordination.stalls import Stall, stall_of, stalls
from chainlab.runtime.runtime import Run, Runtime
from chainlab.store.base import Store
from chainlab.tools import Toolbox

__all__ = ["Control", "Output", "continue_run", "run_stall", "runs_stalled", "stall_lines",
           "start_run", "stored_state"]

Control = Callable[[Run], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Output:
    """Where things go: results on ``out`` (stdout), progress and errors on ``err``."""

    out: Console
    err: Console
    progress: ProgressMode
    as_json: bool = False

    @classmethod
    def make(cls, *, quiet: bool = False, as_json: bool = False) -> Output:
        err = Console(stderr=True, highlight=False)
        mode: ProgressMode = "quiet" if quiet or as_json else (
            "live" if err.is_terminal else "lines")
        return cls(Console(highlight=False), err, mode, as_json)


def db_flag(db: str) -> str:
    """``--db PATH`` for the hints, when the database is not the default one."""
    import shlex

    return "" if Path(db) == Path(DEFAULT_DB) else f" --db {shlex.quote(str(db))}"


def report(io: Output, run_id: str, chain: Chain | None, state: RunState, db: str,
           store: Store) -> ExitCode:
    """Print where the run stands (and what a person can do), return its exit code. With
    ``--json``: the run's JSON view (:func:`chainlab.render.json.run_dict`, its record read
    from ``store``)."""
    status = state.status or RunStatus.RUNNING
    if io.as_json:
        view = run_dict(store.get_run(run_id), state)
        sys.stdout.write(json.dumps(view, default=str) + "\n")
        return exit_code_for(status)
    io.out.print(steps_table(state, chain, limit=50, width=io.out.width))
    io.out.print(run_line(run_id, chain.name if chain else "?", state), soft_wrap=True)
    stalled = run_stall(store, run_id)
    if stalled is not None:  # in progress with nobody driving it, or queued behind a key
        io.out.print(stall_lines([stalled], db_flag(db)), soft_wrap=True)
    for line in turns_lines(state):  # an agent step: what each model turn asked for
        io.out.print(line, soft_wrap=True, markup=False, highlight=False)
    if chain is not None and chain.output is not None and status == RunStatus.SUCCEEDED:
        output = declared_output(store.get_run(run_id), state)  # what RunResult.output is
        io.out.print(f"output: {json.dumps(output, default=str)}", soft_wrap=True,
                     markup=False, highlight=False)
    hints = next_steps(run_id, state, db_flag(db)) if status == RunStatus.SUSPENDED else None
    if hints is not None:
        io.out.print(hints, soft_wrap=True)
    return exit_code_for(status)


def run_stall(store: Store, run_id: str) -> Stall | None:
    """What keeps run ``run_id`` standing still, if anything (as a CLI process sees
    drivers: the runtime's default liveness)."""
    return stall_of(store, Liveness(), run_id)


def runs_stalled(store: Store, run_ids: Iterable[str] | None = None) -> list[Stall]:
    """The runs of ``store`` (or ``run_ids``) that stand still, as :func:`run_stall`."""
    return stalls(store, Liveness(), run_ids)


def stall_lines(found: Sequence[Stall], db_flag: str = "") -> Group | None:
    """The runs that stand still, and the command that moves each on (``chainlab show``,
    ``approvals``, ``runs``): ``run R is running, but nobody drives it: ... / take it over:
    chainlab resume R``."""
    lines: list[Text] = []
    for stall in found:
        lines.append(Text(stall.text, style="bold yellow"))
        move = stall.command(suffix=db_flag)
        if move:
            what = "take it over" if stall.kind == "no_driver" else f"move {stall.holder} on"
            lines.append(Text(f"    {what}: {move}"))
    return Group(*lines) if lines else None


def turns_lines(state: RunState) -> list[str]:
    """An agent step's turns, a line each, under the steps table (DESIGN §18): ``help turn 1:
    help/1.1 lookup succeeded, help/1.2 refund waiting_confirmation, 'teleport' refused``;
    the turn that answered says ``final answer``; a turn whose usage the server reported
    wrongly says so (``usage unknown: the server reported ...``)."""
    if not any(names_an_agent(rec.tool) for rec in state.attempts):
        return []  # (a run that ran no agent: nothing of the agent package read)
    from chainlab.agent.turns import turns_by_step

    out = []
    for step_id, turns in turns_by_step(state).items():
        for turn in turns:
            calls = [f"{c['step_id']} {c['tool']} {c['status']}" if c["step_id"] is not None
                     else f"{c['function']!r} refused" for c in turn["calls"]]
            what = ", ".join(calls) if calls else ("final answer" if turn["final"] else
                                                   "no call")
            unknown = turn.get("usage_unknown")
            note = f" ({usage_text(turn['usage'], unknown)})" if unknown else ""
            out.append(f"{step_id} turn {turn['turn']}: {what}{note}")
    return out


def start_run(io: Output, *, chain: Chain, toolbox: Toolbox, store: Store, db: str,
              context: Mapping[str, Any] | None, options: RunOptions | None,
              meta: Mapping[str, Any], executor: Executor | None = None,
              after_suspend: Control | None = None) -> tuple[ExitCode, str]:
    """Start ``chain`` and follow it until it ends or suspends. ``after_suspend`` (the demo's
    ``--approve``) acts on a suspended run in this process and follows it again. Returns
    the exit code and the run id."""

    started: list[str] = []

    async def main() -> tuple[str, RunState]:
        async with Runtime(toolbox, store, executor=executor) as runtime:
            run = await runtime.start(chain, context, options, meta=meta)
            started.append(run.run_id)
            result = await follow(run, io.err, io.progress)
            if after_suspend is not None and result.status == RunStatus.SUSPENDED:
                await after_suspend(run)
                await follow(run, io.err, io.progress)
            return run.run_id, run.state

    with interrupted(started, db):
        run_id, state = anyio.run(main)
    return report(io, run_id, chain, state, db, store), run_id


@contextmanager
def interrupted(run_ids: list[str], db: str) -> Iterator[None]:
    """Ctrl-C: say how to continue the run (its state is in the store)."""
    try:
        yield
    except KeyboardInterrupt:
        if not run_ids:
            raise
        run_id = run_ids[0]
        raise CliError(f"interrupted; run {run_id} stays in the store",
                       hint=f"continue it: chainlab resume {run_id}{db_flag(db)}",
                       code=ExitCode.INTERRUPTED) from None


def stored_state(store: Store, run_id: str) -> tuple[Chain, RunState]:
    """A run's chain and state from the store (read only). Raises RunNotFoundError."""
    record, _, state = read_run(store, run_id)
    return Chain.from_dict(record.chain), state


def continue_run(io: Output, *, run_id: str, toolbox: Toolbox, store: Store, db: str,
                 control: Control | None, was: RunStatus | None,
                 executor: Executor | None = None,
                 check: Callable[[RunState], None] | None = None,
                 force: bool = False) -> ExitCode:
    """Resume ``run_id`` in this process, apply ``control`` once recovery settled, follow
    the run to its next resting state and report it. ``was``: the stored status; ``force``:
    take it over even from a live driver."""

    trace_to(None)  # (the OTEL_EXPORTER_OTLP_* variables)

    async def main() -> tuple[Chain, RunState]:
        async with Runtime(toolbox, store, executor=executor) as runtime:
            run = await runtime.resume(run_id, check=check, force=force)
            # a suspended run just suspends again (nothing to show); a crashed one recovers
            quiet = was == RunStatus.SUSPENDED or was in RUN_TERMINAL
            await follow(run, io.err, "quiet" if quiet else io.progress)
            if control is not None:
                await control(run)
                await follow(run, io.err, io.progress)
            return run.chain, run.state

    with interrupted([run_id], db):
        chain, state = anyio.run(main)
    return report(io, run_id, chain, state, db, store)
