"""``chainlab export-test``: a recorded run as a pytest regression test (a test file and
its JSON fixture beside it; :mod:`chainlab.testing.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chainlab.cli.common import CliError, reporting_errors
from chainlab.cli.driving import Output
from chainlab.cli.loading import DEFAULT_DB, open_store, toolbox_for_run
from chainlab.cli.options import DbOpt, ToolsOpt
from chainlab.runtime.runtime import Runtime
from chainlab.testing.export import export_experiment_test as write_experiment_test
from chainlab.testing.export import export_test as write_test

__all__ = ["register"]


def export_test(
    out: Annotated[Path, typer.Option(
        "--output", "-o", metavar="tests/test_NAME.py",
        help="The test file to write (its fixture goes beside it: test_NAME.replay.json).")],
    run_id: Annotated[str | None, typer.Argument(metavar="RUN_ID", help="The recorded run.")
    ] = None,
    live: Annotated[list[str] | None, typer.Option(
        "--live", metavar="TOOL",
        help="Call this tool for real in the test (repeatable; default: the effect-free "
             "tools whose recorded calls all succeeded and cost nothing).")] = None,
    replay_all: Annotated[bool, typer.Option(
        "--replay-all", help="No tool is live: every tool answers from the recording.")
    ] = False,
    experiment: Annotated[str | None, typer.Option(
        "--experiment", metavar="ID",
        help="Export a stored experiment instead: one test case per finished replay, "
             "asserting its outcome in the experiment's table.")] = None,
    tools: ToolsOpt = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Write a pytest file that replays RUN_ID from its recorded attempts and asserts the
    same step statuses, outputs and confirmation points (no database needed); with
    --experiment ID, one case per replay of that experiment."""
    io = Output.make()
    with reporting_errors(io.err):
        store = open_store(db, must_exist=True, readonly=True)
        if experiment is not None:
            rows = Runtime(None, store).experiment_result(experiment).rows()
            first = next((r["run"] for r in rows if r["new_run"]), None)
            if first is None:
                raise CliError(f"experiment {experiment!r} has no replay to export")
            # (the recorded run keeps the toolbox `chainlab run` started it with)
            toolbox, spec = toolbox_for_run(store.get_run(first), tools)
            written = write_experiment_test(store, experiment, out, tools=spec,
                                            toolbox=toolbox,
                                            live=[] if replay_all else (live or None))
            io.out.print(f"wrote {out} and {len(written)} fixture(s); run it: pytest {out}",
                         markup=False, soft_wrap=True)
            return
        if run_id is None:
            raise CliError("give RUN_ID (or --experiment ID)")
        record = store.get_run(run_id)
        toolbox, spec = toolbox_for_run(record, tools)
        chosen = [] if replay_all else (live or None)
        done = write_test(store, run_id, out, tools=spec, toolbox=toolbox, live=chosen)
        store.close()
        io.out.print(f"wrote {done.test} and {done.fixture} (live: "
                     f"{', '.join(done.live) or 'none'}); run it: pytest {done.test}",
                     markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("export-test")(export_test)
