"""One confirmation step's life, traced: how many chainlab functions and files it runs through.

    PYTHONPATH=CHECKOUT .venv/bin/python benchmarks/trace_walk.py

The method of ../shared/notes/structure-review.md, appendix A, kept as a script so the figure
can be taken again on any commit (run it with another checkout first on PYTHONPATH to compare):
the review's invoice example (fetch -> send_invoice needing confirmation, SQLite store on a
temporary file), with sys.setprofile around four phases. Only `call` events in frames whose
file is under the imported chainlab package count (a module imported during a phase counts:
its body is a call). Per phase: calls, distinct (file, function) pairs, distinct files,
changes of file between consecutive calls, and returns (arriving at a file that was left
earlier in the phase).

The second walk is an agent's call (issue 44): an agent step whose model (the scripted
OpenAI-compatible server of chainlab.testing, over HTTP in a thread that is not traced) asks
for send_invoice in its first turn; the call waits for a person; the approval runs it, and
its result goes back to the model, whose second turn answers. It is traced on a second run
(the first loads what an agent's run loads: module bodies would count as calls). Each walk
ends with the agent files it visited (chainlab/agent/, engine/attempt/agent*): a plain
chain's walk should visit none.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import tempfile
from pathlib import Path

import chainlab
from chainlab import Agent, Chain, Runtime, Toolbox

try:  # the package layout moved in issue 24; accept both
    from chainlab.jupyter.run_widget import RunWidget
except ImportError:  # pragma: no cover - the layout before
    from chainlab.jupyter.widgets import RunWidget  # type: ignore[no-redef]
from chainlab.store import SQLiteStore
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

ROOT = str(Path(chainlab.__file__).resolve().parent)
YAML = """
name: invoice
steps:
  - {id: fetch, tool: fetch,        args: {n: 3}}
  - {id: send,  tool: send_invoice, args: {total: "{{ steps.fetch.output.total }}"}}
"""

tb = Toolbox()


@tb.tool
def fetch(n: int) -> dict:
    return {"total": n * 10}


@tb.tool(
    side_effects=True,
    idempotent=False,
    requires_confirmation=True,
    preview=lambda a: f"send {a['total']}",
)
def send_invoice(total: int) -> str:
    return f"sent {total}"


class Trace:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if f.startswith(ROOT):
                self.calls.append((f[len(ROOT) + 1 :], frame.f_code.co_name))

    def figures(self) -> tuple[int, int, int, int, int]:
        files = [f for f, _ in self.calls]
        hops = sum(1 for a, b in itertools.pairwise(files) if a != b)
        left: set[str] = set()
        returns = 0
        for a, b in itertools.pairwise(files):
            if a != b:
                left.add(a)
                if b in left:
                    returns += 1
        return len(self.calls), len(set(self.calls)), len(set(files)), hops, returns


def traced(fn):
    t = Trace()
    sys.setprofile(t)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return t, result


async def traced_async(fn):
    t = Trace()
    sys.setprofile(t)
    try:
        result = await fn()
    finally:
        sys.setprofile(None)
    return t, result


async def start_and_wait(runtime, chain):
    run = await runtime.start(chain)
    await run.wait()
    return run


async def approve_and_wait(run, step_id):
    await run.approve(step_id)
    await run.wait()


def agent_files(traces: list[Trace]) -> list[str]:
    """The agent's files the walk visited (the package and the engine's agent kind)."""
    seen = {f for t in traces for f, _ in t.calls}
    return sorted(f for f in seen if f.startswith("agent/") or "/attempt/agent" in f)


def table(title: str, rows: list[tuple[str, Trace]]) -> None:
    print(f"{title}\n{'phase':<32}{'calls':>8}{'functions':>11}{'files':>7}{'file hops':>11}"
          f"{'returns':>9}")
    total = Trace()
    for name, tr in rows:
        c, fn, fl, h, r = tr.figures()
        total.calls += tr.calls
        print(f"{name:<32}{c:>8}{fn:>11}{fl:>7}{h:>11}{r:>9}")
    c, fn, fl, h, r = total.figures()
    print(f"{'all phases':<32}{c:>8}{fn:>11}{fl:>7}{h:>11}{r:>9}")
    found = agent_files([t for _, t in rows])
    print(f"agent files visited: {len(found)}" + (f" ({', '.join(found)})" if found else ""))


async def agent_walk(d: str) -> list[tuple[str, Trace]]:
    """The agent call's walk: model turn -> call -> approval -> result back to the model."""
    with FakeOpenAI() as server:
        box = Toolbox("billing")
        box.add(tb.get("fetch"))
        box.add(tb.get("send_invoice"))
        box.add_agent(Agent("billing", "You send invoices.", tools=["fetch", "send_invoice"],
                            model="fake-model", base_url=server.base_url, api_key="test"))
        chain = Chain.from_dict({"name": "bill", "steps": [
            {"id": "bill", "tool": "agent:billing", "args": {"request": "invoice 30"}}]})
        runtime = Runtime(box, SQLiteStore(str(Path(d) / "agent.db")))
        for _ in range(2):  # the first run, untraced, loads what an agent's run loads
            server.add(tool_calls(Call("send_invoice", {"total": 30})),
                       "Sent the invoice of 30.")
        warm = await start_and_wait(runtime, chain)
        await approve_and_wait(warm, "bill/1.1")
        rows = []
        t, run = await traced_async(lambda: start_and_wait(runtime, chain))
        rows.append(("turn -> call waits", t))
        assert run.state.steps["bill/1.1"].status.value == "waiting_confirmation"
        t, _ = await traced_async(lambda: approve_and_wait(run, "bill/1.1"))
        rows.append(("approve -> result -> answer", t))
        assert run.state.status.value == "succeeded", run.state.status
        assert run.outputs["bill"] == "Sent the invoice of 30."
        await runtime.aclose()
    return rows


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        store = SQLiteStore(str(Path(d) / "runs.db"))
        runtime = Runtime(tb, store)
        rows = []
        t, chain = traced(lambda: Chain.from_yaml(YAML))
        rows.append(("load (Chain.from_yaml)", t))

        t, run = await traced_async(lambda: start_and_wait(runtime, chain))
        rows.append(("start -> suspended", t))
        t, _w = traced(lambda: RunWidget(run))
        rows.append(("RunWidget(run)", t))
        t, _ = await traced_async(lambda: approve_and_wait(run, "send"))
        rows.append(("approve -> succeeded", t))
        assert run.state.status.value == "succeeded", run.state.status
        await runtime.aclose()
        agent_rows = await agent_walk(d)

    print(f"chainlab at {ROOT}")
    table("a plain chain's confirmation", rows)
    print()
    table("an agent's call: model turn -> call -> approval -> result back to the model",
          agent_rows)


if __name__ == "__main__":
    asyncio.run(main())
