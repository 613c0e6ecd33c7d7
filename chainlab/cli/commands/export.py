"""``chainlab export-test``: a recorded run as a pytest regression test (a test file and
its JSON fixture beside it; :mod:`chainlab.testing.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chainlab.cli.common import reporting_errors
from chainlab.cli.driving import Output
from chainlab.cli.loading import DEFAULT_DB, open_store, toolbox_for_run
from chainlab.cli.options import DbOpt, ToolsOpt
from chainlab.testing.export import export_test as write_test

__all__ = ["register"]


def export_test(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The recorded run.")],
    out: Annotated[Path, typer.Option(
        "--output", "-o", metavar="tests/test_NAME.py",
        help="The test file to write (its fixture goes beside it: test_NAME.replay.json).")],
    live: Annotated[list[str] | None, typer.Option(
        "--live", metavar="TOOL",
        help="Call this tool for real in the test (repeatable; default: the effect-free "
             "tools whose recorded calls all succeeded and cost nothing).")] = None,
    replay_all: Annotated[bool, typer.Option(
        "--replay-all", help="No tool is live: every tool answers from the recording.")
    ] = False,
    tools: ToolsOpt = None,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Write a pytest file that replays RUN_ID from its recorded attempts and asserts the
    same step statuses, outputs and confirmation points (no database needed)."""
    io = Output.make()
    with reporting_errors(io.err):
        store = open_store(db, must_exist=True, readonly=True)
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
