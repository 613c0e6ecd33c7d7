"""One confirmation step's life, traced: how many chainlab functions and files it runs through.

    PYTHONPATH=CHECKOUT .venv/bin/python benchmarks/trace_walk.py

The method of ../shared/notes/structure-review.md, appendix A, kept as a script so the figure
can be taken again on any commit (run it with another checkout first on PYTHONPATH to compare):
the review's invoice example (fetch -> send_invoice needing confirmation, SQLite store on a
temporary file), with sys.setprofile around four phases. Only `call` events in frames whose
file is under the imported chainlab package count. Per phase: calls, distinct (file, function)
pairs, distinct files, changes of file between consecutive calls, and returns (arriving at a
file that was left earlier in the phase).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import tempfile
from pathlib import Path

import chainlab
from chainlab import Chain, Runtime, Toolbox

try:  # the package layout moved in issue 24; accept both
    from chainlab.jupyter.run_widget import RunWidget
except ImportError:  # pragma: no cover - the layout before
    from chainlab.jupyter.widgets import RunWidget  # type: ignore[no-redef]
from chainlab.store import SQLiteStore

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


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        store = SQLiteStore(str(Path(d) / "runs.db"))
        runtime = Runtime(tb, store)
        rows = []
        t, chain = traced(lambda: Chain.from_yaml(YAML))
        rows.append(("load (Chain.from_yaml)", t))

        async def start():
            run = await runtime.start(chain)
            await run.wait()
            return run

        t = Trace()
        sys.setprofile(t)
        run = await start()
        sys.setprofile(None)
        rows.append(("start -> suspended", t))
        t, _w = traced(lambda: RunWidget(run))
        rows.append(("RunWidget(run)", t))

        t = Trace()
        sys.setprofile(t)
        await run.approve("send")
        await run.wait()
        sys.setprofile(None)
        rows.append(("approve -> succeeded", t))
        assert run.state.status.value == "succeeded", run.state.status
        await runtime.aclose()

    print(f"chainlab at {ROOT}")
    print(f"{'phase':<24}{'calls':>8}{'functions':>11}{'files':>7}{'file hops':>11}{'returns':>9}")
    total = Trace()
    for name, tr in rows:
        c, fn, fl, h, r = tr.figures()
        total.calls += tr.calls
        print(f"{name:<24}{c:>8}{fn:>11}{fl:>7}{h:>11}{r:>9}")
    c, fn, fl, h, r = total.figures()
    print(f"{'all phases':<24}{c:>8}{fn:>11}{fl:>7}{h:>11}{r:>9}")


if __name__ == "__main__":
    asyncio.run(main())
