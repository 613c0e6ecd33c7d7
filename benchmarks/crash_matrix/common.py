"""What every agent driver of the crash matrix shares (standard library only: it runs in
each peer's own virtualenv as well as in chainlab's).

A driver is one process running one system's support agent (``lookup_order`` reads,
``refund`` charges the ledger and needs approval, ``ping`` does nothing for the overhead
run). It talks to the harness (``benchmarks/crash_matrix.py``) in JSON lines:

* to stdout: ``{"event": "waiting", "calls": [{"id", "tool", "args", "kind"}]}`` (``kind``:
  ``approval``, ``in_doubt`` or ``limit``), ``{"event": "done", "status", "output",
  "in_doubt", "error"}``, ``{"event": "timing", ...}``, ``{"event": "versions", ...}``;
* from stdin, one line per ``waiting``: ``{"decisions": [{"id", "approve": true} |
  {"id", "reject": REASON} | {"id", "resolve": OUTPUT}]}``.

Configured by the environment: ``CRASH_LEDGER`` (the ledger file the tools append to),
``CRASH_STATE`` (a folder for what the system persists: its state file or database),
``OPENAI_BASE_URL`` (the scripted model), ``CRASH_MAX_TURNS`` (model requests allowed),
``CRASH_SLOW_S`` (how long ``lookup_order`` takes), ``CRASH_BLOCK_REFUND=1`` (the refund
writes its ledger line, then blocks: the harness kills the process there).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

INSTRUCTIONS = ("You are a shop's support agent. Look the order up before acting; refund "
                "only what the customer asks for.")
REQUEST = "Order 7 arrived broken. Please refund 15."
MODEL = "fake-model"


@dataclass
class Outcome:
    """Where a system's run stands: calls waiting for a person, or finished."""

    waiting: list[dict[str, Any]] = field(default_factory=list)
    status: str = "done"
    output: Any = None
    in_doubt: list[str] = field(default_factory=list)
    error: str | None = None


def emit(event: str, **fields: Any) -> None:
    """One JSON line to the harness."""
    sys.stdout.write(json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def base_url() -> str:
    return os.environ["OPENAI_BASE_URL"]


def state_path(name: str) -> str:
    folder = os.environ["CRASH_STATE"]
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, name)


def write_durably(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` so that a SIGKILL leaves the old or the new file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def ledger(tool: str, **args: Any) -> None:
    """Append the tool's effect (or read) to the ledger, fsync'ed: it survives a SIGKILL."""
    path = os.environ.get("CRASH_LEDGER")
    if not path:
        return
    line = json.dumps({"tool": tool, "args": args, "pid": os.getpid(), "t": time.time()})
    with open(path, "a") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# the three tools, as plain functions each system wraps its own way
def lookup_order(order_id: int) -> dict[str, Any]:
    """Look an order up (reads only)."""
    time.sleep(float(os.environ.get("CRASH_SLOW_S") or 0))
    ledger("lookup_order", order_id=order_id)
    return {"order_id": order_id, "status": "delivered", "total": 40}


def refund(order_id: int, amount: int) -> dict[str, Any]:
    """Refund an amount of an order to the customer (charges the shop's ledger)."""
    ledger("refund", order_id=order_id, amount=amount)
    if os.environ.get("CRASH_BLOCK_REFUND") == "1":
        time.sleep(120)  # the effect is written, the result not yet returned: killed here
    return {"order_id": order_id, "refunded": amount}


def ping(n: int) -> int:
    """Do nothing (the overhead run's tool)."""
    return n


def read_decisions() -> list[dict[str, Any]]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the harness closed stdin")
    return list(json.loads(line)["decisions"])


async def serve(adapter: Any, phase: str) -> None:
    """Drive ``adapter`` (``start``, ``resume``, ``decide``: each returns an Outcome) and
    report to the harness until the run finishes."""
    outcome = await (adapter.start() if phase == "start" else adapter.resume())
    while outcome.waiting:
        emit("waiting", calls=outcome.waiting)
        decisions = await asyncio.get_running_loop().run_in_executor(None, read_decisions)
        outcome = await adapter.decide(decisions)
    emit("done", status=outcome.status, output=outcome.output, in_doubt=outcome.in_doubt,
         error=outcome.error)


class WireClock:
    """Adds up the time spent waiting for the model's HTTP answers: every system here
    reaches the model through the ``openai`` client, whose transport is httpx's (``httpx2``
    from openai 3; ``httpx`` before), so timing the transports' send (the answer read
    whole) excludes the model from the overhead the same way for all."""

    def __init__(self) -> None:
        self.waited = 0.0
        self.requests = 0
        import importlib

        for name in ("httpx2", "httpx"):
            try:
                self._patch(importlib.import_module(name))
            except ImportError:
                continue

    def _patch(self, httpx: Any) -> None:
        clock = self
        sync_send = httpx.HTTPTransport.handle_request
        async_send = httpx.AsyncHTTPTransport.handle_async_request

        def handle_request(transport: Any, request: Any) -> Any:
            t0 = time.perf_counter()
            try:
                response = sync_send(transport, request)
                response.read()
                return response
            finally:
                clock.waited += time.perf_counter() - t0
                clock.requests += 1

        async def handle_async_request(transport: Any, request: Any) -> Any:
            t0 = time.perf_counter()
            try:
                response = await async_send(transport, request)
                await response.aread()
                return response
            finally:
                clock.waited += time.perf_counter() - t0
                clock.requests += 1

        httpx.HTTPTransport.handle_request = handle_request
        httpx.AsyncHTTPTransport.handle_async_request = handle_async_request


def timing_request(turns: int, calls: int, rep: int) -> str:
    """The request of one overhead run (the scripted model reads its shape from it)."""
    return f"timing {turns}x{calls} #{rep}"


async def timing(run_once: Any) -> None:
    """The overhead run: for each shape ``(turns, calls)`` of ``CRASH_SHAPES``
    (``1x1,1x16,9x1``) the fastest of ``CRASH_REPS`` runs of a model that asks ``calls``
    pings in each of ``turns`` turns, then answers; ``run_once(turns, calls, rep)`` runs
    one. Each shape is run once untimed first, then the shapes take turns (a drift in the
    machine's load touches them all alike). Reports wall time and the time spent waiting
    for the model."""
    shapes = [tuple(int(x) for x in s.split("x"))
              for s in (os.environ.get("CRASH_SHAPES") or "1x1,1x16,9x1").split(",")]
    reps = env_int("CRASH_REPS", 5)
    clock = WireClock()
    best: dict[tuple[int, ...], tuple[float, float, int]] = {}
    for rep in range(reps + 1):
        for shape in shapes:
            turns, calls = shape
            clock.waited, clock.requests = 0.0, 0
            t0 = time.perf_counter()
            await run_once(turns, calls, rep)
            took = time.perf_counter() - t0
            old = best.get(shape)
            if rep and (old is None or took - clock.waited < old[0] - old[1]):
                best[shape] = (took, clock.waited, clock.requests)
    emit("timing", rows=[{"turns": s[0], "calls": s[1], "wall_s": best[s][0],
                          "model_s": best[s][1], "requests": best[s][2]} for s in shapes])


def versions(*packages: str) -> None:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in packages:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    emit("versions", versions=found, python=sys.version.split()[0])


def main(driver: Any, run_once: Any, *packages: str) -> None:
    """A peer driver's command line: ``start`` / ``resume`` drive ``driver()`` through
    :func:`serve`, ``timing`` runs :func:`timing` with ``run_once``; the versions of
    ``packages`` are reported first."""
    versions(*packages)
    phase = sys.argv[1]
    if phase == "timing":
        asyncio.run(timing(run_once))
    else:
        asyncio.run(serve(driver(), phase))
