"""A process that starts or resumes one run of a durability-test chain from a SQLite file
(or a PostgreSQL database: DB is then a ``postgresql://`` URL).

    python -m tests.durability.worker DB LEDGER RUN_ID start|resume [options]

It behaves like a script a person would write: drive the run until it ends or only people
can move it on; with ``--approve`` approve whatever waits for confirmation; with
``--resolve`` decide in-doubt steps the way a careful operator would (look the idempotency
key up in the ledger: it happened -> ``resolve(output=...)``, it did not -> ``retry``);
``--actions`` applies a list of explicit decisions once; with ``--rollback`` a run that
ended ``succeeded`` is then undone with ``run.rollback()`` (a rollback interrupted by a crash
is carried on by ``resume`` itself). The parent test kills it with SIGKILL at random moments
and then starts another one with ``resume``.

``--barrier DIR --peers N`` (fencing trials): wait until N workers are ready, resume at the
same moment (``--stagger S``: S seconds later), and start work only once every peer has
finished its own ``resume``, so the race is always between two real claims.

Prints one JSON line and exits with: 0 the run is finished, 10 suspended (waiting for a
person), 3 StaleEpochError (``stale_at``: resume or write), 4 PlanError from an approval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from chainlab import PlanError, StaleEpochError
from chainlab.errors import DecisionError
from chainlab.runtime import Run, Runtime
from chainlab.store import SQLiteStore, open_store
from tests.durability.chainlib import (
    CHAINS,
    SEED,
    Ledger,
    make_toolbox,
    settle,
    started_in,
)

EXIT_DONE, EXIT_SUSPENDED, EXIT_STALE, EXIT_PLAN = 0, 10, 3, 4


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("ledger")
    p.add_argument("run_id")
    p.add_argument("mode", choices=["start", "resume"])
    p.add_argument("--chain", default="crash", choices=sorted(CHAINS))
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--approve", action="store_true")
    p.add_argument("--resolve", action="store_true")
    p.add_argument("--actions", default="[]")
    p.add_argument("--rollback", action="store_true")
    p.add_argument("--barrier", default=None)
    p.add_argument("--peers", type=int, default=2)
    p.add_argument("--stagger", type=float, default=0.0)
    return p.parse_args(argv)


async def wait_for_files(folder: Path, pattern: str, count: int) -> None:
    with anyio.fail_after(60):
        while len(list(folder.glob(pattern))) < count:
            await anyio.sleep(0.001)


def report(run: Run | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": os.getpid(), **extra}
    if run is not None:
        r = run.result()
        # the fold's epoch is that of the last event this process applied: its own once it
        # resumed (run_resumed carries it)
        out.update(status=str(r.status), outputs=r.outputs, steps=r.steps, waiting=r.waiting,
                   epoch=run.state.epoch if run.active else None)
    return out


async def apply_actions(run: Run, actions: list[list[Any]]) -> None:
    for action in actions:
        verb, step_id, *rest = action
        if verb == "approve":
            await run.approve(step_id, args=rest[0] if rest else None, note="edited")
        elif verb == "reject":
            await run.reject(step_id, rest[0] if rest else "rejected")
        else:
            raise ValueError(f"unknown action {verb!r}")


async def main(args: argparse.Namespace) -> int:
    ledger = Ledger(args.ledger)
    # DB is a SQLite file, or a postgresql:// URL (the PostgreSQL takeover trials)
    store = open_store(args.db) if args.db.startswith("postgresql:") else SQLiteStore(args.db)
    runtime = Runtime(make_toolbox(ledger, args.delay, started_in(args.db)), store)
    run: Run | None = None
    stale_at = "resume"
    try:
        if args.mode == "start":
            run = await runtime.start(CHAINS[args.chain](), {"seed": SEED}, run_id=args.run_id)
        else:
            barrier = Path(args.barrier) if args.barrier else None
            if barrier is not None:
                (barrier / f"ready-{os.getpid()}").touch()
                await wait_for_files(barrier, "ready-*", args.peers)
                await anyio.sleep(args.stagger)
            try:
                # the killed (or racing) driver may still look alive: taking over is the point
                run = await runtime.resume(args.run_id, force=True)
            finally:
                if barrier is not None:
                    (barrier / f"resumed-{os.getpid()}").touch()
            if barrier is not None:
                await wait_for_files(barrier, "resumed-*", args.peers)
        stale_at = "write"
        result = await run.wait()
        actions = json.loads(args.actions)
        if actions and result.suspended:
            await apply_actions(run, actions)
        result = await settle(run, ledger, approve=args.approve, resolve=args.resolve)
        if args.rollback and result.ok:
            await run.rollback()
            result = await run.wait()
        print(json.dumps(report(run)))
        return EXIT_SUSPENDED if result.suspended else EXIT_DONE
    except StaleEpochError as exc:
        epoch = run.state.epoch if run is not None and run.active else None
        print(json.dumps(report(None, stale_at=stale_at, epoch=epoch, error=str(exc))))
        return EXIT_STALE
    except (PlanError, DecisionError) as exc:
        print(json.dumps(report(run, error=str(exc))))
        return EXIT_PLAN
    finally:
        await runtime.aclose()
        store.close()


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse(sys.argv[1:])))
