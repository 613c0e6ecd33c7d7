"""The notebook as a user meets it (issue 29): how long a run started from a notebook waits
before its first step, and what a scrubber position costs.

    .venv/bin/python benchmarks/bench_notebook.py [--reps 9] [--src DIR] [--events 10000]

start-up  A REAL kernel (jupyter_client, the venv's ipykernel) runs the quick-start chain of
          notebook 01 (4 steps, context {"customer": "Ada"}) --reps times each way:
            %chain run     ``run = %chain run invoice ...``: the run and its widget
            designer Run   ``ChainDesigner(...).run()`` (the same launch path as the button)
            runtime.start  ``run = await runtime.start(chain, ...)``: no widget at all
          and reads the run's stored events: the time from ``run_started`` to the first
          ``step_started`` (both stamped by the runtime's clock), in milliseconds.
          ``--src`` puts another checkout first on the kernel's path (measure main's code:
          ``--src /work/main``).
scrubbing A RunWidget (no kernel: the widget's Python side, what a drag costs the kernel) of a
          real --events-event run on SQLiteStore: ``scrubber.scrub_to(seq)`` for random positions
          (the DAG's statuses and badges, header, inspector and event log redrawn from the
          run's state at that event).
Each cell is the median and p90 of the repetitions.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SETUP = textwrap.dedent('''
    %load_ext chainlab
    import chainlab, json
    from chainlab.jupyter import ChainDesigner
    tools = chainlab.Toolbox("quickstart")

    @tools.tool
    def fetch_orders(customer: str) -> list[dict]:
        return [{"id": 1, "amount": 30.0}, {"id": 2, "amount": 12.5}]

    @tools.tool
    def fetch_discount(customer: str) -> float:
        return 0.1

    @tools.tool
    def total(orders: list[dict]) -> float:
        return sum(o["amount"] for o in orders)

    @tools.tool
    def invoice_line(customer: str, total: float, discount: float) -> str:
        return f"{customer}: {total * (1 - discount):.2f} EUR"

    invoice = chainlab.Chain.from_yaml(""\"
    name: invoice
    steps:
      - {id: orders, tool: fetch_orders, args: {customer: "{{ context.customer }}"}}
      - {id: discount, tool: fetch_discount, args: {customer: "{{ context.customer }}"}}
      - {id: sum, tool: total, args: {orders: "{{ steps.orders.output }}"}}
      - id: line
        tool: invoice_line
        args: {customer: "{{ context.customer }}", total: "{{ steps.sum.output }}",
               discount: "{{ steps.discount.output }}"}
    ""\")
    from chainlab.jupyter.session import get_session
    runtime = get_session().runtime(tools, ":memory:")

    def gap_ms(run):
        evs = run.event_list()
        t0 = next(e.ts for e in evs if e.kind == "run_started")
        t1 = min(e.ts for e in evs if e.kind == "step_started")
        return (t1 - t0) * 1000
''')

WAYS = {
    "%chain run": ("run = %chain run invoice --tools tools --context '{\"customer\": \"Ada\"}'"
                   " --db :memory:"),
    "designer Run": ("d = ChainDesigner(tools, invoice, context={'customer': 'Ada'}, "
                     "db=':memory:')\ndisplay(d)\nrun = d.run()"),
    "runtime.start": "run = await runtime.start(invoice, {'customer': 'Ada'})",
}
WAIT = "await run.wait()\nprint('GAP', json.dumps(gap_ms(run)))"


def _execute(kc: Any, code: str) -> str:
    """Run ``code`` in the kernel; returns what it printed (raises on an error)."""
    msg_id = kc.execute(code)
    out: list[str] = []
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            raise RuntimeError("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)


def start_up(reps: int, src: Path) -> dict[str, list[float]]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, PYTHONPATH=str(src))
    with tempfile.TemporaryDirectory() as tmp:
        km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=tmp)
        try:
            where = _execute(kc, "import chainlab; print(chainlab.__file__)").strip()
            print(f"kernel imports {where}", file=sys.stderr)
            _execute(kc, SETUP)
            gaps: dict[str, list[float]] = {way: [] for way in WAYS}
            for i in range(reps + 1):  # the first round warms imports and layouts up
                for way, code in WAYS.items():
                    _execute(kc, code)
                    out = _execute(kc, WAIT)
                    gap = float(out.split("GAP", 1)[1].strip())
                    if i:
                        gaps[way].append(gap)
            return gaps
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def scrubbing(events: int, reps: int) -> dict[str, list[float]]:
    import anyio

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_history import build

    from chainlab import Toolbox
    from chainlab.jupyter import RunWidget
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.db"
        run_id = build(path, events)
        tb = Toolbox("bench")
        tb.tool(lambda i: i, name="noop")

        async def main() -> dict[str, list[float]]:
            rt = Runtime(tb, SQLiteStore(path))
            run = rt.get_run(run_id)
            t0 = time.perf_counter()
            w = RunWidget(run)
            first = [(time.perf_counter() - t0) * 1000]
            last = w.scrubber.last or events
            rng = random.Random(7)
            times: list[float] = []
            for _ in range(reps):
                seq = rng.randint(1, last)
                t0 = time.perf_counter()
                w.scrubber.scrub_to(seq)
                times.append((time.perf_counter() - t0) * 1000)
            w.close()
            await rt.aclose()
            return {"open widget": first, "scrub_to(seq)": times}

        return anyio.run(main)


def _cell(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"{statistics.median(xs):8.2f} / {p90:8.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--src", type=Path, default=ROOT)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--only", choices=("start-up", "scrubbing"))
    ns = ap.parse_args()
    if ns.only != "scrubbing":
        gaps = start_up(ns.reps, ns.src)
        print(f"start-up: run_started -> first step_started, ms (median / p90 of {ns.reps}),"
              f" code from {ns.src}")
        print(f"{'way':<16}{'median / p90':>21}")
        for way, xs in gaps.items():
            print(f"{way:<16}{_cell(xs):>21}")
    if ns.only != "start-up":
        sys.path.insert(0, str(ns.src))
        rows = scrubbing(ns.events, max(ns.reps, 20))
        print(f"\nscrubbing a {ns.events}-event run, ms (median / p90), code from {ns.src}")
        for name, xs in rows.items():
            print(f"{name:<18}{_cell(xs):>21}")


if __name__ == "__main__":
    main()
