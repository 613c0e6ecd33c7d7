"""Options shared by several commands (typer ``Annotated`` types)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ChainArg", "ContextOpt", "DaskOpt", "DbOpt", "JsonOpt", "McpOpt", "OtlpOpt",
           "QuietOpt", "ToolsOpt"]

ToolsOpt = Annotated[str | None, typer.Option(
    "--tools", "-t", envvar="CHAINLAB_TOOLS", metavar="MODULE:TOOLBOX",
    help="The toolbox: MODULE:TOOLBOX (or file.py:TOOLBOX). Runs started by `chainlab run` "
         "remember theirs.")]
McpOpt = Annotated[list[str] | None, typer.Option(
    "--mcp", metavar="[PREFIX=]CMD|URL",
    help="Add the tools of an MCP server: a command line (a stdio server, e.g. 'python -m "
         "server') or a streamable-HTTP URL; PREFIX= registers them as PREFIX__name. "
         "Repeatable; needs chainlab[mcp].")]
DbOpt = Annotated[str, typer.Option(
    "--db", envvar="CHAINLAB_DB", metavar="PATH|URL",
    help="Where runs are stored: a SQLite file (or sqlite:///PATH), :memory:, or a "
         "postgresql:// URL.")]
ContextOpt = Annotated[str | None, typer.Option(
    "--context", "-c", metavar="JSON|@FILE",
    help="The run's context: a JSON object, or @file (.json/.yaml).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
DaskOpt = Annotated[str | None, typer.Option(
    "--dask", envvar="CHAINLAB_DASK", metavar="ADDRESS",
    help="Run sync tool bodies on the Dask scheduler at ADDRESS ('local': a LocalCluster).")]
ChainArg = Annotated[Path, typer.Argument(metavar="CHAIN_FILE",
                                          help="The chain (YAML or JSON).")]
OtlpOpt = Annotated[str | None, typer.Option(
    "--otlp", metavar="URL",
    help="Send each run's trace (OpenTelemetry, GenAI conventions) to the OTLP/HTTP "
         "collector at URL (e.g. http://localhost:4318); without it, the standard "
         "OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables name one. "
         "A collector that is down costs one warning. Needs chainlab[otel].")]
