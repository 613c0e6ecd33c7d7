"""The worker fleet on the command line (DESIGN §19): ``worker`` (a long-running process that
claims and drives the runs of its queues), ``workers`` (who serves, what they hold, how
deep each queue is) and ``queue`` (a queue's fleet-wide limit). ``chainlab run --enqueue``
puts a run in a queue (chainlab.cli)."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.table import Table

from chainlab.cli.common import CliError, reporting_errors, trace_to
from chainlab.cli.driving import Output
from chainlab.cli.loading import DEFAULT_DB, load_chain, load_tools, open_store
from chainlab.cli.options import DbOpt, JsonOpt, McpOpt, OtlpOpt, ToolsOpt
from chainlab.cli.views import queues_line
from chainlab.plan.schema import Chain, RunOptions
from chainlab.render.json import record_dict
from chainlab.store.base import Store
from chainlab.store.queue import DEFAULT_QUEUE, Queue, QueueDepth, WorkerInfo
from chainlab.tools import Toolbox

__all__ = ["enqueue_run", "register", "worker_rows"]

QueueOpt = Annotated[list[str] | None, typer.Option(
    "--queue", metavar="NAME", help="A queue to serve (repeatable; default: 'default').")]


def _fleet_store(db: str, *, must_exist: bool, readonly: bool = False) -> Store:
    store = open_store(db, must_exist=must_exist, readonly=readonly)
    if not isinstance(store, Queue):
        raise CliError(f"--db {db}: this store keeps no queue",
                       hint="use a SQLite file or a postgresql:// URL")
    return store


def enqueue_run(io: Output, *, chain: Chain, toolbox: Toolbox, db: str,
                context: dict[str, Any], options: RunOptions | None, meta: dict[str, Any],
                queue: str | None, key: str | None) -> str:
    """``chainlab run --enqueue``: store the run queued (validated first, all or nothing) and
    print its id on stdout (``--json``: its record). The database must exist already (a
    worker creates it): an enqueue nobody would ever claim is refused at once."""
    from chainlab.store.open import is_server, store_location

    where = store_location(db)
    if not is_server(where) and where != ":memory:" and not Path(where).is_file():
        raise CliError(f"--db {db}: no chainlab database there, so no worker would ever "
                       "claim this run", hint=f"start a worker on it first (chainlab worker "
                       f"--db {db} --tools MODULE:TOOLBOX), or fix the path")
    store = _fleet_store(db, must_exist=True)
    from chainlab.runtime import Runtime

    async def main() -> str:
        async with Runtime(toolbox, store) as runtime:
            return await runtime.enqueue(chain, context, queue=queue or DEFAULT_QUEUE,
                                         options=options, idempotency_key=key, meta=meta)

    run_id = anyio.run(main)
    record = store.get_run(run_id)
    if io.as_json:
        sys.stdout.write(json.dumps(record_dict(record)) + "\n")
    else:
        sys.stdout.write(run_id + "\n")
        io.err.print(f"queued run {run_id} in {record.queue!r} ({record.status}); a worker "
                     f"drives it: chainlab worker --db {db} --queue {record.queue} (see "
                     f"chainlab workers --db {db})", markup=False, soft_wrap=True)
    store.close()
    return run_id


def worker_rows(workers: list[WorkerInfo], stale_after_s: float,
                now: float | None = None) -> list[dict[str, Any]]:
    """The workers as ``chainlab workers --json`` prints them (``state`` ``lapsed`` for one
    whose beat is older than ``stale_after_s``: it is dead or frozen)."""
    now = time.time() if now is None else now
    return [{"name": w.name, "worker_id": w.worker_id, "host": w.host, "pid": w.pid,
             "queues": list(w.queues), "concurrency": w.concurrency,
             "state": "lapsed" if w.age(now) >= stale_after_s else w.state,
             "beat_age_s": round(w.age(now), 3), "started_at": w.started_at,
             "claimed": list(w.claimed), "note": w.note} for w in workers]


def _workers_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for name in ("worker", "host", "pid", "queues", "state", "beat", "runs", "note"):
        table.add_column(name, no_wrap=name != "note", overflow="fold")
    for r in rows:
        claimed = r["claimed"]
        runs = f"{len(claimed)}/{r['concurrency']}" + (
            f" {', '.join(claimed[:3])}{' …' if len(claimed) > 3 else ''}" if claimed else "")
        table.add_row(r["name"], r["host"], str(r["pid"]), ",".join(r["queues"]), r["state"],
                      f"{r['beat_age_s']:.1f} s ago", runs, r["note"])
    return table


def register(app: typer.Typer) -> None:
    """Add ``worker``, ``workers`` and ``queue`` to ``app``."""

    @app.command()
    def worker(
        db: DbOpt = DEFAULT_DB,
        tools: ToolsOpt = None,
        mcp: McpOpt = None,
        chains: Annotated[list[Path] | None, typer.Option(
            "--chains", metavar="FILE",
            help="Chains usable as sub-chains by name (.yaml/.json; repeatable).")] = None,
        queue: QueueOpt = None,
        concurrency: Annotated[int, typer.Option(
            "--concurrency", "-j", min=1, max=10_000,
            help="How many runs this worker drives at once.")] = 4,
        name: Annotated[str | None, typer.Option(
            "--name", help="This worker's name in `chainlab workers` (default HOST-PID; "
                           "a restart may reuse it).")] = None,
        poll: Annotated[float, typer.Option(
            "--poll", min=0.01, metavar="SECONDS",
            help="How often an idle worker looks for work.")] = 0.2,
        drain_timeout: Annotated[float, typer.Option(
            "--drain-timeout", min=0.0, metavar="SECONDS",
            help="On SIGTERM / Ctrl-C: how long runs may go on before they are handed back "
                 "(a second signal hands them back at once).")] = 30.0,
        heartbeat: Annotated[float, typer.Option(
            "--heartbeat", min=0.05, metavar="SECONDS",
            help="How often this worker beats for each run it drives.")] = 1.0,
        lapse: Annotated[float, typer.Option(
            "--lapse", min=0.2, metavar="SECONDS",
            help="A run whose driver has not beaten for this long is taken over (give every "
                 "worker of a fleet the same).")] = 5.0,
        same_host_check: Annotated[bool, typer.Option(
            "--same-host-check/--no-same-host-check",
            help="Notice a dead worker of this host at once by its pid (off where workers "
                 "of one host name do not share a pid namespace: then only its lapsed "
                 "heartbeats tell).")] = True,
        quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                            help="No line per run.")] = False,
        otlp: OtlpOpt = None,
    ) -> None:
        """Claim queued runs (and runs whose driver died, and suspended runs a person
        decided) from the store and drive them, until SIGTERM or Ctrl-C drains it."""
        err = Output.make().err
        with reporting_errors(err):
            trace_to(otlp)
            toolbox = load_tools(tools, mcp, "worker")
            subchains = {c.name: c for c in (load_chain(p) for p in chains or [])}
            store = _fleet_store(db, must_exist=False)
            from chainlab.runtime import new_worker

            if not 0 < heartbeat < lapse:
                raise CliError(f"--heartbeat {heartbeat:g} must be below --lapse {lapse:g}",
                               hint="a worker beats several times before it counts as dead")
            fleet = new_worker(toolbox, store, name=name, queues=queue or [DEFAULT_QUEUE],
                               concurrency=concurrency, chains=subchains, poll_s=poll,
                               drain_s=drain_timeout, heartbeat_s=heartbeat,
                               stale_after_s=lapse, same_host_check=same_host_check)
            if not quiet:
                logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                                    format="chainlab worker: %(message)s")
                logging.getLogger("chainlab.runtime.coordination.workers").setLevel(
                    logging.INFO)
            info = fleet.info
            say = f"{info.name}: serving {', '.join(info.queues)} (at most {concurrency} " \
                  f"runs at once) from {db}; toolbox {toolbox.name!r} ({len(toolbox)} " \
                  "tools); SIGTERM or Ctrl-C drains"

            async def main() -> None:
                async with anyio.create_task_group() as tg:
                    async def signals() -> None:
                        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as got:
                            async for sig in got:
                                err.print(f"chainlab worker {info.name}: "
                                          f"{signal.Signals(sig).name}: "
                                          + ("handing back what still runs" if fleet.draining
                                             else "draining (again: hand back at once)"),
                                          markup=False)
                                fleet.drain()

                    tg.start_soon(signals)
                    await fleet.run(ready=lambda: err.print(f"chainlab worker {say}",
                                                            markup=False, soft_wrap=True))
                    tg.cancel_scope.cancel()

            anyio.run(main)
            err.print(f"chainlab worker {info.name}: stopped after {fleet.claims} claims",
                      markup=False)
            store.close()

    @app.command()
    def workers(db: DbOpt = DEFAULT_DB, as_json: JsonOpt = False) -> None:
        """The fleet: live workers (their queues, claimed runs, heartbeat age, notes) and
        each queue's depth and limit."""
        io = Output.make(as_json=as_json)
        with reporting_errors(io.err):
            store = _fleet_store(db, must_exist=True, readonly=True)
            from chainlab.runtime.coordination.workers import WORKER_STALE_AFTER_S

            rows = worker_rows(store.list_workers(), WORKER_STALE_AFTER_S)  # type: ignore[attr-defined]
            depths: list[QueueDepth] = store.queue_depths()  # type: ignore[attr-defined]
            if as_json:
                sys.stdout.write(json.dumps({"workers": rows, "queues": [
                    {"queue": d.queue, "queued": d.queued, "in_progress": d.in_progress,
                     "suspended": d.suspended, "limit": d.limit} for d in depths]}) + "\n")
                return
            if rows:
                io.out.print(_workers_table(rows))
            else:
                io.err.print(f"no worker serves {db} (start one: chainlab worker --db "
                             f"{db} --tools MODULE:TOOLBOX)", markup=False)
            line = queues_line(depths)
            if line:
                io.out.print(line, markup=False, soft_wrap=True)

    @app.command()
    def queue(
        name: Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.")],
        db: DbOpt = DEFAULT_DB,
        limit: Annotated[int | None, typer.Option(
            "--limit", min=1, help="At most N runs of this queue in progress across the "
                                   "whole fleet.")] = None,
        no_limit: Annotated[bool, typer.Option("--no-limit",
                                               help="Remove the queue's limit.")] = False,
    ) -> None:
        """Show a queue (depth, limit), or set its fleet-wide limit (stored with the
        queue: every worker obeys it from its next claim)."""
        io = Output.make()
        with reporting_errors(io.err):
            if limit is not None and no_limit:
                raise CliError("give --limit N or --no-limit, not both")
            store: Any = _fleet_store(db, must_exist=limit is None and not no_limit)
            if limit is not None or no_limit:
                try:
                    store.set_queue_limit(name, None if no_limit else limit)
                except ValueError as exc:
                    raise CliError(str(exc)) from None
            found = next((d for d in store.queue_depths() if d.queue == name),
                         QueueDepth(name))
            io.out.print(found.text(), markup=False)
            store.close()
