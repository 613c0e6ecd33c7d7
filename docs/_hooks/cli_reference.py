"""MkDocs hook: the CLI reference page, rendered from the typer app at build time.

Every command of ``chainlab.cli.app`` (sub-commands included) gets a section holding exactly
what ``chainlab COMMAND --help`` prints, so the page cannot go stale: a new command or option
appears at the next build, and tests/test_docs.py checks that every command is there.
"""

from __future__ import annotations

from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/cli.md"
INTRO = """# CLI reference

The `chainlab` command is a thin front end over the same runtime as the notebook and the
Python API (install it with `pip install "chainlab[cli]"`; `python -m chainlab` works too).
Runs live in the store named by `--db` (a SQLite path, `sqlite:///...`, `postgresql://...` or
`:memory:`), default `.chainlab/chainlab.db`, or `CHAINLAB_DB`; `--tools MODULE:TOOLBOX` may
come from `CHAINLAB_TOOLS`.

Exit codes: 0 succeeded; 1 failed, cancelled, rollback failed, or the store cannot be used;
2 usage or plan error (nothing changed); 3 suspended (waits for a person); 4 rolled back;
130 interrupted.

This page is generated from the command's own `--help` at every build of the site.
"""


def command_paths() -> list[tuple[str, ...]]:
    """Every command of the app as its words after ``chainlab`` (groups and leaves), in the
    order ``chainlab --help`` lists them."""
    import typer.main

    from chainlab.cli import app

    # duck-typed: typer ships its own copy of click, so isinstance(cmd, click.Group) fails
    root = typer.main.get_command(app)
    paths: list[tuple[str, ...]] = []

    def walk(cmd: Any, path: tuple[str, ...], ctx: Any) -> None:
        if path:
            paths.append(path)
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, (*path, name), sub.context_class(sub, info_name=name, parent=ctx))

    walk(root, (), root.context_class(root, info_name="chainlab"))
    return paths


def help_text(path: tuple[str, ...]) -> str:
    """What ``chainlab PATH --help`` prints (80 columns, no colour)."""
    from typer.testing import CliRunner

    from chainlab.cli import app

    result = CliRunner().invoke(app, [*path, "--help"], prog_name="chainlab",
                                env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    if result.exit_code != 0:
        raise RuntimeError(f"`chainlab {' '.join(path)} --help` exited {result.exit_code}: "
                           f"{result.output}")
    return result.output.rstrip()


def cli_reference() -> str:
    """The whole page as Markdown."""
    parts = [INTRO, "## chainlab\n", "```text", help_text(()), "```\n"]
    for path in command_paths():
        title = " ".join(("chainlab", *path))
        parts += [f"## {title}\n", "```text", help_text(path), "```\n"]
    return "\n".join(parts)


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the generated CLI reference page."""
    files.append(File.generated(config, PAGE, content=cli_reference()))
    return files
