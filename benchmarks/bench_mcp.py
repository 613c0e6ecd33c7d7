"""What a tool from an MCP server costs per call, against the same tool in Python (issue 28,
item 8).

    .venv/bin/python benchmarks/bench_mcp.py [--quick]

The same read-only tool, ``lookup(key) -> {key, value}``, three ways in this one run: a
Python async tool; the test MCP server (``python -m chainlab.testing.mcp_server``) as a
stdio subprocess; the same server over streamable HTTP on a loopback port. Each is measured

  body call    ``await tool.fn(key=...)`` back to back (for MCP: chainlab's hand-over to
               the sessions' loop, the SDK's client, the transport, the server)
  SDK alone    the MCP SDK's ``Client.call_tool`` on this loop (no chainlab): what the
               protocol and transport cost by themselves
  run step     one step of a run (Runtime, MemoryStore): a chain of sequential steps,
               wall time / steps (validation, events, output check included)

Printed (median of the repeats, taken round robin), never asserted. The server runs on the
same small machine as the client, so the MCP figures include its share of the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chainlab import Chain, Toolbox  # noqa: E402
from chainlab.runtime import Runtime  # noqa: E402
from chainlab.store import MemoryStore  # noqa: E402
from chainlab.testing.mcp_server import LOOKUP  # noqa: E402

SERVER = [sys.executable, "-m", "chainlab.testing.mcp_server"]


def python_toolbox() -> Toolbox:
    toolbox = Toolbox("python")

    @toolbox.tool
    async def lookup(key: str) -> dict[str, str]:
        return {"key": key, "value": LOOKUP.get(key.lower(), "unknown")}

    return toolbox


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.Popen([*SERVER, "--http", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the HTTP server did not start")


async def body_us(toolbox: Toolbox, calls: int) -> float:
    fn = toolbox.get("lookup").fn
    await fn(key="mcp")  # warm
    t = time.perf_counter()
    for _ in range(calls):
        await fn(key="mcp")
    return (time.perf_counter() - t) / calls * 1e6


async def sdk_us(target: Any, calls: int) -> float:
    from mcp import Client

    async with Client(target, cache=None) as client:
        await client.call_tool("lookup", {"key": "mcp"})
        t = time.perf_counter()
        for _ in range(calls):
            await client.call_tool("lookup", {"key": "mcp"})
        return (time.perf_counter() - t) / calls * 1e6


async def step_us(toolbox: Toolbox, steps: int) -> float:
    chain = Chain.from_dict({"name": "bench", "steps": [
        {"id": f"s{i}", "tool": "lookup", "args": {"key": "mcp"},
         **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(steps)]})
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(chain, {})  # warm: compile, the session
    assert (await run.wait()).ok
    t = time.perf_counter()
    run = await runtime.start(chain, {})
    result = await run.wait()
    elapsed = time.perf_counter() - t
    assert result.ok, result.errors
    # the runtime's aclose would close the MCP sessions: only its runs are stopped here
    return elapsed / steps * 1e6


async def measure(quick: bool) -> None:
    from mcp.client.stdio import StdioServerParameters

    calls, steps, repeats = (100, 30, 2) if quick else (400, 100, 5)
    http_proc, url = start_http()
    try:
        boxes = {"python": python_toolbox(),
                 "MCP stdio": Toolbox.from_mcp(SERVER, name="stdio", include=["lookup"]),
                 "MCP HTTP": Toolbox.from_mcp(url=url, name="http", include=["lookup"])}
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
        sdk_targets = {"MCP stdio": StdioServerParameters(command=SERVER[0], args=SERVER[1:],
                                                          env=env),
                       "MCP HTTP": url}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in boxes}
        for _ in range(repeats):  # round robin: a load that comes and goes hits all alike
            for name, toolbox in boxes.items():
                got = samples[name]
                got.setdefault("body", []).append(await body_us(toolbox, calls))
                got.setdefault("step", []).append(await step_us(toolbox, steps))
                if name in sdk_targets:
                    got.setdefault("sdk", []).append(await sdk_us(sdk_targets[name], calls))
        rows = {name: {k: statistics.median(v) for k, v in got.items()}
                for name, got in samples.items()}
        for toolbox in boxes.values():
            await toolbox.aclose()
    finally:
        http_proc.kill()
        http_proc.wait()
    base = rows["python"]
    print(f"per-call cost of lookup(key): {calls} body calls, runs of {steps} sequential "
          f"steps, median of {repeats}; {os.cpu_count()} CPUs")
    print(f"{'':<10} {'body call µs':>13} {'SDK alone µs':>13} {'run step µs':>12} "
          f"{'step x python':>14}")
    for name, row in rows.items():
        sdk = f"{row['sdk']:>13.0f}" if "sdk" in row else f"{'-':>13}"
        print(f"{name:<10} {row['body']:>13.1f} {sdk} {row['step']:>12.0f} "
              f"{row['step'] / base['step']:>13.1f}x")
    for name in ("MCP stdio", "MCP HTTP"):
        row = rows[name]
        print(f"{name}: body call - SDK alone = {row['body'] - row['sdk']:+.0f} µs (chainlab's "
              f"hand-over to the sessions' thread, and noise); run step - body call = "
              f"{row['step'] - row['body']:+.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    ns = parser.parse_args()
    asyncio.run(measure(ns.quick))


if __name__ == "__main__":
    main()
