"""The notebook as a user meets it (issues 29, 38 and 40): how long a run started from a
notebook waits before its first step, whether it keeps moving (and its widget keeps
updating) while the kernel executes later cells, and what opening and scrubbing a widget of
a 10,000-event run cost.

    .venv/bin/python benchmarks/bench_notebook.py [--reps 5] [--before DIR] [--only SECTION]

``--before DIR`` measures another checkout (for example the commit before a change,
``git archive COMMIT | tar -x -C DIR``) in the SAME run, side by side with this one: every
row is then ``before | now | now/before``. Every measurement of a checkout runs in its own
kernel or subprocess with that checkout first on ``PYTHONPATH`` (the kernel prints which
``chainlab`` it imported).

start-up   A REAL kernel (jupyter_client, the venv's ipykernel) runs the quick-start chain of
           notebook 01 (4 steps) --reps times each way, one cell at a time:
             %chain run     ``run = %chain run invoice ...``: the run and its widget (shown)
             designer Run   ``ChainDesigner(...).run()`` (the same launch path as the button)
             runtime.start  ``run = await runtime.start(chain, ...)`` on the session's runtime
           and reads the run's stored events: ``run_started`` to the first ``step_started``
           (both stamped by the runtime's clock), in milliseconds.
run-all    Notebook 01 executed as JupyterLab's Run All does it (every cell's execute
           request sent at once) in a fresh kernel per repetition: from the run's own end
           (``run_succeeded``) to the kernel's message that sets the widget's badge to
           "succeeded" (its header's date), and Run All until that message.
five-runs  Five ``%chain run`` cells of the quick-start chain in one Run All: each run's
           ``run_started`` to its first ``step_started`` (all five runs of every repetition
           pooled), and how long a trivial sync step takes from start to success there.
busy-cell  A run of three sync steps of 0.1 s each, started by a cell that is followed by a
           cell computing for 1.5 s (pure Python, holding the GIL in slices as any later
           cell does): the run's makespan (``run_started`` to ``run_succeeded``).
widget     A RunWidget (no kernel: the widget's Python side, what the kernel pays) of a real
           --events-event run on SQLiteStore (a 3,332-step chain, bench_history's): opening
           it (first open with an empty layout cache; again in the same process; in a new
           process, the layout kept on disk) and ``scrubber.scrub_to(seq)`` for random
           positions.
Each cell is the median / p90 (or max, where it says so) of the repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TOOLS = textwrap.dedent('''
    import chainlab, json
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

    def gap_ms(run):
        evs = run.event_list()
        t0 = next(e.ts for e in evs if e.kind == "run_started")
        t1 = min(e.ts for e in evs if e.kind == "step_started")
        return (t1 - t0) * 1000

    def step_ms(run):
        evs = run.event_list()
        start = {e.step_id: e.ts for e in evs if e.kind == "step_started"}
        return [(e.ts - start[e.step_id]) * 1000 for e in evs if e.kind == "step_succeeded"]
''')

SETUP = "%load_ext chainlab\n" + TOOLS + textwrap.dedent('''
    from chainlab.jupyter import ChainDesigner
    from chainlab.jupyter.session import get_session
    runtime = get_session().runtime(tools, ":memory:")
''')

WAYS = {
    "%chain run": ("run = %chain run invoice --tools tools --context '{\"customer\": \"Ada\"}'"
                   " --db :memory:"),
    "designer Run": ("d = ChainDesigner(tools, invoice, context={'customer': 'Ada'}, "
                     "db=':memory:')\ndisplay(d)\nrun = d.run()"),
    "runtime.start": "run = await runtime.start(invoice, {'customer': 'Ada'})",
}
WAIT = "await run.wait()\nprint('OUT', json.dumps(gap_ms(run)))"
RUN_CELL = ("r{i} = %chain run invoice --tools tools --context '{{\"customer\": \"Ada\"}}'"
            " --db :memory:")
BUSY_TOOLS = textwrap.dedent('''
    import time as _time

    @tools.tool
    def nap(i: int) -> int:
        _time.sleep(0.1)
        return i

    naps = chainlab.Chain.from_yaml(""\"
    name: naps
    steps:
      - {id: a, tool: nap, args: {i: 1}}
      - {id: b, tool: nap, args: {i: 2}, depends_on: [a]}
      - {id: c, tool: nap, args: {i: 3}, depends_on: [b]}
    ""\")
''')
BUSY = textwrap.dedent('''
    t_end = _time.perf_counter() + 1.5
    x = 0
    while _time.perf_counter() < t_end:
        x += sum(range(1000))
''')


# --------------------------------------------------------------------------- the kernel
class Kernel:
    """A real kernel with ``src`` first on its path, driven like a front end."""

    def __init__(self, src: Path, cwd: str):
        from jupyter_client.manager import start_new_kernel

        env = dict(os.environ, PYTHONPATH=str(src))
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, cwd=cwd)
        where = self.execute("import chainlab; print(chainlab.__file__)").strip()
        if not where.startswith(str(src)):
            raise RuntimeError(f"the kernel imported {where}, not the code in {src}")

    def execute(self, code: str) -> str:
        """Run ``code``; returns what it printed (raises on an error)."""
        return self.run_all([code])[0]

    def run_all(self, cells: list[str], watch: Any = None) -> list[str]:
        """Send every cell at once (Run All); returns what each printed. ``watch(msg)`` sees
        every iopub message as it arrives."""
        ids = [self.kc.execute(code) for code in cells]
        out: dict[str, list[str]] = {i: [] for i in ids}
        idle: set[str] = set()
        while len(idle) < len(ids):
            msg = self.kc.get_iopub_msg(timeout=120)
            if watch is not None:
                watch(msg)
            parent = msg["parent_header"].get("msg_id")
            if parent not in out:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[parent].append(content["text"])
            elif kind == "error":
                raise RuntimeError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                idle.add(parent)
        return ["".join(out[i]) for i in ids]

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _value(printed: str) -> Any:
    return json.loads(printed.split("OUT", 1)[1].strip())


def start_up(src: Path, reps: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        k = Kernel(src, tmp)
        try:
            k.execute(SETUP)
            gaps: dict[str, list[float]] = {way: [] for way in WAYS}
            for i in range(reps + 1):  # the first round warms imports and layouts up
                for way, code in WAYS.items():
                    k.execute(code)
                    gap = _value(k.execute(WAIT))
                    if i:
                        gaps[way].append(gap)
            return {f"start-up {way}": xs for way, xs in gaps.items()}
        finally:
            k.close()


def _badge_time(msg: dict[str, Any], status: str) -> float | None:
    """The kernel's time of a widget update that shows run status ``status``, else None."""
    if msg["msg_type"] != "comm_msg":
        return None
    data = msg["content"].get("data") or {}
    value = (data.get("state") or {}).get("value")
    if data.get("method") != "update" or not isinstance(value, str) \
            or f"cl-badge cl-r-{status}" not in value:
        return None
    date = msg["header"]["date"]
    return float(date.timestamp() if hasattr(date, "timestamp") else date)


def run_all(src: Path, reps: int) -> dict[str, list[float]]:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "01-quickstart.ipynb", as_version=4)
    cells = ["".join(c.source) for c in nb.cells if c.cell_type == "code"]
    cells.append("print('OUT', json.dumps([e.ts for e in run.event_list() "
                 "if e.kind == 'run_succeeded']))")
    lags, totals = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            k = Kernel(src, tmp)
            try:
                k.execute("import json")
                seen: list[float] = []

                def watch(msg: dict[str, Any], seen: list[float] = seen) -> None:
                    t = _badge_time(msg, "succeeded")
                    if t is not None:
                        seen.append(t)

                t0 = time.time()
                printed = k.run_all(cells, watch=watch)
                end = _value(printed[-1])[0]
                lags.append((min(seen) - end) * 1000 if seen else float("nan"))
                totals.append((min(seen) - t0) * 1000 if seen else float("nan"))
            finally:
                k.close()
    return {"run-all: run end -> badge": lags, "run-all: Run All -> badge": totals}


def five_runs(src: Path, reps: int) -> dict[str, list[float]]:
    gaps: list[float] = []
    steps: list[float] = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            k = Kernel(src, tmp)
            try:
                k.execute(SETUP)
                cells = [RUN_CELL.format(i=i) for i in range(5)]
                cells.append("runs = [r0, r1, r2, r3, r4]\nfor r in runs:\n    await r.wait()\n"
                             "print('OUT', json.dumps([[gap_ms(r) for r in runs], "
                             "[ms for r in runs for ms in step_ms(r)]]))")
                got = _value(k.run_all(cells)[-1])
                gaps += got[0]
                steps += got[1]
            finally:
                k.close()
    return {"five-runs: first step (max)": gaps, "five-runs: sync step": steps}


def busy_cell(src: Path, reps: int) -> dict[str, list[float]]:
    spans: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        k = Kernel(src, tmp)
        try:
            k.execute(SETUP + BUSY_TOOLS)
            for i in range(reps + 1):
                k.run_all(["run = %chain run naps --tools tools --db :memory:", BUSY])
                out = k.execute("await run.wait()\nevs = run.event_list()\n"
                                "print('OUT', json.dumps((evs[-1].ts - evs[0].ts) * 1000))")
                if i:
                    spans.append(_value(out))
        finally:
            k.close()
    return {"busy-cell: makespan": spans}


# --------------------------------------------------------------------------- the widget
def widget(src: Path, events: int, reps: int) -> dict[str, list[float]]:
    import anyio

    import chainlab  # from ``src`` (PYTHONPATH), before bench_history puts ROOT first

    if not chainlab.__file__ or not chainlab.__file__.startswith(str(src)):
        raise RuntimeError(f"imported {chainlab.__file__}, not the code in {src}")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_history import build

    from chainlab import Toolbox
    from chainlab.jupyter import RunWidget
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = tmp  # an empty layout cache: the first open lays out
        path = Path(tmp) / "h.db"
        run_id = build(path, events)
        tb = Toolbox("bench")
        tb.tool(lambda i: i, name="noop")

        async def main() -> dict[str, list[float]]:
            rt = Runtime(tb, SQLiteStore(path))
            opened = []
            for _ in range(2):  # the second open finds the layout of the graph's shape
                run = rt.get_run(run_id)
                t0 = time.perf_counter()
                w = RunWidget(run)
                opened.append((time.perf_counter() - t0) * 1000)
                if len(opened) == 1:
                    w.close()
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
            return {"widget: open (layout)": opened[:1],
                    "widget: open (cached)": opened[1:], "widget: scrub_to(seq)": times}

        rows = anyio.run(main)
        # a new process (a restarted kernel): the layout is on disk, nothing in memory
        probe = ("import sys, time, anyio, json, chainlab\n"
                 f"assert chainlab.__file__.startswith({str(src)!r}), chainlab.__file__\n"
                 "from chainlab.jupyter import RunWidget\n"
                 "from chainlab.runtime import Runtime\nfrom chainlab.store import SQLiteStore\n"
                 "async def main():\n"
                 f"    rt = Runtime(None, SQLiteStore({str(path)!r}))\n"
                 f"    run = rt.get_run({run_id!r})\n"
                 "    t0 = time.perf_counter(); RunWidget(run)\n"
                 "    print(json.dumps((time.perf_counter() - t0) * 1000))\n"
                 "anyio.run(main)\n")
        fresh = [float(subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                      text=True, check=True, env=dict(os.environ), cwd=tmp
                                      ).stdout.split()[-1]) for _ in range(3)]
        rows["widget: open (new process)"] = fresh
        return rows


SECTIONS = {"start-up": start_up, "run-all": run_all, "five-runs": five_runs,
            "busy-cell": busy_cell, "widget": None}


def measure(section: str, src: Path, ns: argparse.Namespace) -> dict[str, list[float]]:
    """One section for the code in ``src``: in a subprocess with ``src`` on its path (the
    kernels it starts inherit that path)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", section,
           "--reps", str(ns.reps), "--events", str(ns.events)]
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"{section} on {src} failed:\n{proc.stderr[-3000:]}")
    return {k: v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def worker(section: str, ns: argparse.Namespace) -> None:
    src = Path(os.environ.get("PYTHONPATH", str(ROOT)).split(os.pathsep)[0])
    if section == "widget":
        rows = widget(src, ns.events, max(ns.reps, 20))
    else:
        rows = SECTIONS[section](src, ns.reps)  # type: ignore[misc]
    print(json.dumps(rows))


def _cell(xs: list[float], use_max: bool = False) -> str:
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return f"{'-':>17}"
    hi = xs[-1] if use_max else xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"{statistics.median(xs):8.1f} / {hi:6.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--before", type=Path, help="another checkout, measured in the same run")
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--only", choices=tuple(SECTIONS), action="append")
    ap.add_argument("--worker", choices=tuple(SECTIONS), help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.worker:
        worker(ns.worker, ns)
        return
    sources = ([("before", ns.before.resolve())] if ns.before else []) + [("now", ROOT)]
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores; ms, median / p90 "
          f"(max for rows marked so) of {ns.reps} repetitions")
    for label, src in sources:
        print(f"  {label}: {src}")
    head = f"{'':<32}" + "".join(f"{label:>19}" for label, _ in sources)
    print(head + ("   now/before" if ns.before else ""))
    for section in ns.only or SECTIONS:
        results = [measure(section, src, ns) for _, src in sources]
        for row in results[-1]:
            use_max = "(max)" in row
            cells = [_cell(r.get(row, []), use_max) for r in results]
            line = f"{row:<32}" + "".join(f"{c:>19}" for c in cells)
            if ns.before and results[0].get(row) and results[-1].get(row):
                ratio = statistics.median(results[-1][row]) / statistics.median(results[0][row])
                line += f"   {ratio:8.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
