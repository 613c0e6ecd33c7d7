"""``chainlab serve``: the HTTP API with Server-Sent Events over the same runtime and store
(:mod:`chainlab.http`; ``pip install "chainlab[server]"``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from chainlab.cli.common import reporting_errors, trace_to
from chainlab.cli.driving import Output
from chainlab.cli.loading import DEFAULT_DB, load_toolbox
from chainlab.cli.options import DbOpt, OtlpOpt, ToolsOpt
from chainlab.errors import MissingExtraError, UsageError

__all__ = ["register"]


def _say(line: str) -> None:
    sys.stderr.write(f"chainlab serve: {line}\n")
    sys.stderr.flush()


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""

    @app.command()
    def serve(
        tools: ToolsOpt = None,
        chains: Annotated[list[Path] | None, typer.Option(
            "--chains", metavar="DIR_OR_FILE",
            help="Chains served by name (.yaml/.json files, or directories of them); "
                 "repeatable.")] = None,
        db: DbOpt = DEFAULT_DB,
        host: Annotated[str, typer.Option(
            "--host", help="The address to listen on. Anything but loopback needs "
                           "--token-file.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(
            "--port", min=0, max=65535, help="The port (0: any free one, printed).")] = 8000,
        token_file: Annotated[Path | None, typer.Option(
            "--token-file", metavar="FILE",
            help="Read the bearer token from FILE (a new one is written there if it does "
                 "not exist); else a token is generated and printed.")] = None,
        cors_origin: Annotated[list[str] | None, typer.Option(
            "--cors-origin", metavar="URL",
            help="A browser origin allowed to call the API (repeatable; none by "
                 "default).")] = None,
        max_body: Annotated[int, typer.Option(
            "--max-body", min=1024, metavar="BYTES",
            help="The largest request body accepted.")] = 1 << 20,
        inline_chains: Annotated[bool, typer.Option(
            "--inline-chains/--no-inline-chains",
            help="Whether POST /runs takes a chain definition (always validated, and "
                 "limited to the served toolbox's tools) besides a served chain's "
                 "name.")] = True,
        keepalive: Annotated[float, typer.Option(
            "--keepalive", min=0.1, metavar="SECONDS",
            help="How often an idle event stream sends a keep-alive comment.")] = 15.0,
        stream_send_timeout: Annotated[float, typer.Option(
            "--stream-send-timeout", min=0.1, metavar="SECONDS",
            help="Close an event stream whose client has not taken what was sent for this "
                 "long (it reconnects with Last-Event-ID and loses nothing).")] = 60.0,
        access_log: Annotated[bool, typer.Option(
            "--access-log/--no-access-log", help="Log one line per request.")] = True,
        otlp: OtlpOpt = None,
    ) -> None:
        """Serve the HTTP API: start runs, stream their events (SSE), read them, approve /
        reject / resolve and continue the SAME run, resume, cancel, rollback, fork, and the
        inbox of what waits for a person. Binds 127.0.0.1 and requires a bearer token."""
        with reporting_errors(Output.make().err):
            trace_to(otlp)
            if not tools:
                raise UsageError("`chainlab serve` needs --tools MODULE:TOOLBOX (the tools "
                                 "the server may run)",
                                 hint="for example --tools mytools:toolbox, or set "
                                      "CHAINLAB_TOOLS")
            try:
                from chainlab.http import Config, create_app, new_token
                from chainlab.http.chains import load_chains
                from chainlab.http.serving import check_address, read_token_file
                from chainlab.http.serving import serve as run_server
            except ModuleNotFoundError as exc:
                raise MissingExtraError(exc.name or "starlette", "server",
                                        "chainlab serve") from None
            check_address(host, token_file)
            toolbox = load_toolbox(tools)
            served = load_chains(chains or [])
            from chainlab.workspace import Workspace

            workspace = Workspace()
            store = workspace.store(db)  # opened now: a bad --db is one line, not a trace
            if token_file is not None:
                token, written = read_token_file(token_file)
                told = f"a new token was written to {token_file}" if written \
                    else f"the token is in {token_file}"
            else:
                token, told = new_token(), ""
            config = Config(max_body_bytes=max_body, inline_chains=inline_chains,
                            keepalive_s=keepalive, stream_send_timeout_s=stream_send_timeout,
                            cors_origins=tuple(cors_origin or ()), tools=tools,
                            extra_meta={"cwd": os.getcwd()})
            api = create_app(toolbox, token=token, chains=served, db=store, config=config)
            names = ", ".join(sorted({**toolbox.chains, **served})) or "none (inline only)"
            _say(f"toolbox {toolbox.name!r} ({len(toolbox)} tools); chains: {names}; "
                 f"store: {db}")

            def announce(url: str) -> None:
                _say(f"listening on {url} (the API: {url}/openapi.json; Ctrl-C stops)")
                if told:
                    _say(told)
                else:
                    _say(f"token: {token}")
                    _say(f"e.g. curl -H 'Authorization: Bearer {token}' {url}/runs")

            try:
                run_server(api, host, port, announce=announce, access_log=access_log)
            except KeyboardInterrupt:  # uvicorn shut down cleanly, then passes Ctrl-C on
                _say("stopped (runs it drove wait in the store: `POST /runs/ID/resume` on "
                     "the next server, or `chainlab resume ID`)")
            finally:
                workspace.close()
