"""Drives one saga run in its own process, for the SIGKILL-during-rollback tests.

    python tests/saga/worker.py DB DIR RUN_ID start|resume|rollback [--slow STEP]
                                [--window before|after] [--unsafe-undo]

``start`` runs the chain ``a -> {b, c, d} -> e``: b's call returns only after d ended and
c's after b ended (anyio Events set from the run's event stream; no timing involved), so
they complete a, d, b, c; ``e`` fails, and the run rolls back c, b, d, a.
``resume`` continues a run from the SQLite file (``runtime.resume``); ``rollback`` resumes
it and asks ``run.rollback()``. The final result is printed as one JSON line.

The compensation tool ``undo`` is the outside world's API:
* every call appends ``{name, key, attempt, epoch, pid}`` to ``DIR/calls.jsonl``;
* the effect (one line in ``DIR/effects.jsonl``) is applied only if no line with the same
  idempotency key is there yet, as an API that deduplicates by key would do;
* both files are written with ``os.write`` + ``fsync``, so they survive a SIGKILL.
With ``--slow STEP`` the compensation of STEP hangs (``before`` or ``after`` its effect), so
the test can kill the process in the middle of the rollback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from chainlab import CallContext, Chain, PermanentError, Toolbox
from chainlab.runtime import Event, Runtime
from chainlab.store import SQLiteStore

AFTER = {"b": ["d"], "c": ["b"]}  # b ends after d, c after b
ENDS = ("step_succeeded", "step_failed", "step_in_doubt", "step_cancelled")


def append(path: Path, **entry: Any) -> None:
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except FileNotFoundError:
        return []


def build(folder: Path, slow: str | None, window: str, unsafe_undo: bool,
          ended: dict[str, anyio.Event]) -> Toolbox:
    toolbox = Toolbox("saga-worker")
    calls, effects = folder / "calls.jsonl", folder / "effects.jsonl"

    async def undo(id: str, ctx: CallContext) -> dict[str, str]:
        name = id.removeprefix("rec-")
        append(calls, name=name, key=ctx.idempotency_key, attempt=ctx.attempt,
               epoch=ctx.epoch, pid=os.getpid(), kind=ctx.kind)
        if name == slow and window == "before":
            await anyio.sleep(3600)  # killed here, before any effect
        if not any(e["key"] == ctx.idempotency_key for e in read(effects)):
            append(effects, name=name, key=ctx.idempotency_key, epoch=ctx.epoch)
        if name == slow and window == "after":
            await anyio.sleep(3600)  # killed here: the effect happened, the answer is lost
        return {"undone": name}

    async def create(name: str, after: list[str] | None = None,
                     fail: bool = False) -> dict[str, str]:
        for step_id in after or ():
            await ended[step_id].wait()
        if fail:
            raise PermanentError(f"create {name!r} refused")
        return {"id": f"rec-{name}"}

    toolbox.tool(undo, side_effects=True, idempotent=not unsafe_undo)
    toolbox.tool(create, side_effects=True, idempotent=True, retry={"max_attempts": 1},
                 compensate=("undo", {"id": "{{ output.id }}"}))
    return toolbox


def chain() -> Chain:
    steps: list[dict[str, Any]] = [{"id": "a", "tool": "create", "args": {"name": "a"}}]
    for sid in "bcd":
        args: dict[str, Any] = {"name": sid}
        if sid in AFTER:
            args["after"] = AFTER[sid]
        steps.append({"id": sid, "tool": "create", "depends_on": ["a"], "args": args})
    steps.append({"id": "e", "tool": "create", "depends_on": ["b", "c", "d"],
                  "args": {"name": "e", "fail": True}})
    return Chain.from_dict({"name": "saga-crash", "steps": steps})


async def main(args: argparse.Namespace) -> dict[str, Any]:
    store = SQLiteStore(args.db)
    ended = {sid: anyio.Event() for sid in "abcde"}

    def watch(event: Event) -> None:
        if event.kind in ENDS and event.step_id in ended:
            ended[event.step_id].set()

    toolbox = build(Path(args.dir), args.slow, args.window, args.unsafe_undo, ended)
    runtime = Runtime(toolbox, store)
    try:
        if args.mode == "start":
            run = await runtime.start(chain(), run_id=args.run_id)
            run.subscribe(watch)
        else:
            # the killed (or racing) driver may still look alive: taking over is the point
            run = await runtime.resume(args.run_id, force=True)
            if args.mode == "rollback":
                await run.rollback()
        result = await run.wait()
        return {"status": str(result.status), "steps": result.steps, "epoch": run.state.epoch}
    finally:
        await runtime.aclose()
        store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("dir")
    parser.add_argument("run_id")
    parser.add_argument("mode", choices=["start", "resume", "rollback"])
    parser.add_argument("--slow")
    parser.add_argument("--window", choices=["before", "after"], default="after")
    parser.add_argument("--unsafe-undo", action="store_true")
    out = anyio.run(main, parser.parse_args())
    sys.stdout.write(json.dumps(out) + "\n")
