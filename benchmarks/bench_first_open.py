"""A large run opens at once (issue 49, item 4): the first open of a run widget on a stored
10,000-event run, in a fresh process with a fresh layout cache, laid out by chainlab and by
Graphviz; and the layout alone by graph size, which decides where chainlab's layout takes
over (``chainlab.render.layout.LAYERED_FROM``).

    .venv/bin/python benchmarks/bench_first_open.py [--reps 3] [--events 10000]
        [--graphviz-reps 1] [--quick]

first open   bench_history's run on SQLiteStore (a 3,332-step chain with fan-in, ~10,000
             events). Each repetition is a NEW process with a NEW, empty layout cache
             (``CHAINLAB_LAYOUT_CACHE=<empty dir>``): ``RunWidget(runtime.get_run(id))``
             timed from before ``get_run`` (what ``%chain show RUN`` pays in a restarted
             kernel), once as shipped (chainlab's layout for this graph) and once with
             ``CHAINLAB_LAYOUT=graphviz`` (the system ``dot``, what main did). Then, in
             another fresh process each, where the time goes: folding the run's events,
             writing the drawing (DOT text and scene), laying it out (chainlab's layout or
             Graphviz), cutting the live template, and the rest of the widget (the same
             open, timed inside).
threshold    The layout alone (``layout_svg``), Graphviz with its caches off against
             chainlab's layered layout, for growing graphs of two shapes: ``layered``
             (bench_render's seeded DAG, ~10 steps a layer, half the edges labelled data
             edges) and ``chain`` (bench_history's shape: a chain, every tenth step also
             depending on the step ten back). Median of --reps.
Figures are milliseconds: for the first open the median and least wall time and the median
CPU time of the process (what the open costs whatever else runs on the machine), for the
parts CPU time; the machine's load average is printed with them: they are ratios on one
machine, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# the probe run in a fresh process: ``RunWidget`` on the stored run, then (``--parts``)
# the same work step by step in a process of its own
PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import anyio
from chainlab.jupyter import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import SQLiteStore
imported = time.perf_counter() - t0
path, run_id, parts = sys.argv[1], sys.argv[2], sys.argv[3] == "parts"
spent = {}

def timed(module, name, label):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        t = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - t
    setattr(module, name, wrapper)

async def main():
    rt = Runtime(None, SQLiteStore(path))
    if not parts:
        t, cpu = time.perf_counter(), time.process_time()
        RunWidget(rt.get_run(run_id))
        return {"open": time.perf_counter() - t, "cpu": time.process_time() - cpu,
                "imports": imported}
    from chainlab.render import layout, live
    timed(live, "_drawn", "drawing (DOT and scene)")
    timed(layout, "layout_svg", "layout")
    timed(live, "_split", "live template")
    t = time.process_time(); run = rt.get_run(run_id); run.state
    out = {"fold the events": time.process_time() - t}
    t = time.process_time(); RunWidget(run); total = time.process_time() - t
    out.update(spent)
    out["the rest of the widget"] = total - sum(spent.values())
    out["open (all of the above)"] = total + out["fold the events"]
    return out

print(json.dumps(anyio.run(main)))
"""

def probe(path: Path, run_id: str, *, graphviz: bool, parts: bool = False) -> dict[str, float]:
    """One fresh process with an empty layout cache; seconds per figure."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, CHAINLAB_LAYOUT_CACHE=cache, PYTHONPATH=str(ROOT))
        env.pop("CHAINLAB_LAYOUT", None)
        if graphviz:
            env["CHAINLAB_LAYOUT"] = "graphviz"
        done = subprocess.run([sys.executable, "-c", PROBE, str(path), run_id,
                               "parts" if parts else "open"], env=env, capture_output=True,
                              text=True, check=False, cwd=cache)
    if done.returncode:
        raise RuntimeError(f"the probe failed:\n{done.stderr[-3000:]}")
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def first_open(path: Path, run_id: str, reps: int, *, graphviz: bool = False
               ) -> list[dict[str, float]]:
    """``RunWidget(get_run(id))`` in ``reps`` fresh processes with fresh caches: seconds
    of wall time (``open``) and of the process's CPU time (``cpu``: what the open costs
    whatever else the machine runs; Graphviz's ``dot`` runs in a process of its own and
    counts in ``open`` only)."""
    return [probe(path, run_id, graphviz=graphviz) for _ in range(reps)]


def build_run(folder: Path, events: int) -> tuple[Path, str]:
    """bench_history's stored run (about ``events`` events) in ``folder``."""
    from bench_history import build

    path = folder / "first-open.db"
    return path, build(path, events)


def _ms(found: list[dict[str, float]]) -> str:
    wall, cpu = [f["open"] for f in found], [f["cpu"] for f in found]
    return (f"{statistics.median(wall) * 1000:9.1f} {min(wall) * 1000:9.1f} "
            f"{statistics.median(cpu) * 1000:9.1f}")


def first_open_table(folder: Path, events: int, reps: int, graphviz_reps: int) -> None:
    path, run_id = build_run(folder, events)
    print(f"first open of a run widget, {events:,} events (load {_load()}): ms, a fresh "
          "process and layout cache each")
    print(f"{'':34}{'median':>9} {'min':>9} {'CPU':>9}")
    ours = first_open(path, run_id, reps)
    print(f"{'chainlab layout (as shipped)':34}{_ms(ours)}")
    theirs = first_open(path, run_id, graphviz_reps, graphviz=True) if graphviz_reps else []
    if theirs:
        print(f"{'Graphviz (CHAINLAB_LAYOUT=graphviz)':34}{_ms(theirs)}")
        ratio = statistics.median(f["open"] for f in theirs) / statistics.median(
            f["open"] for f in ours)
        print(f"{'Graphviz / chainlab':34}{ratio:9.1f}x")
    for graphviz, runs in ((False, reps), (True, graphviz_reps)):
        if not runs:
            continue
        found = [probe(path, run_id, graphviz=graphviz, parts=True) for _ in range(runs)]
        print(f"  where it goes, {'Graphviz' if graphviz else 'chainlab layout'} (median ms of "
              "CPU time; Graphviz's own process not counted):")
        for key in found[0]:
            print(f"    {key:30}{statistics.median(f[key] for f in found) * 1000:9.1f}")
    print(f"(load {_load()})")


def threshold_table(reps: int, sizes: list[int]) -> None:
    from bench_history import history_chain
    from bench_render import layered_chain, toolbox

    from chainlab.render import svg as svg_module
    from chainlab.render.dot import draw_chain
    from chainlab.render.layout import layout_svg

    os.environ["CHAINLAB_LAYOUT_CACHE"] = "off"
    tb = toolbox()
    print(f"\nthe layout alone (layout_svg), ms, median of {reps} (load {_load()})")
    print(f"{'steps':>6} {'shape':>8} {'Graphviz':>10} {'chainlab':>10} {'ratio':>7}")
    for n in sizes:
        for shape, chain in (("layered", layered_chain(n)), ("chain", history_chain(n))):
            drawing = draw_chain(chain, tb, reserve_status=True, title="")
            times: dict[str, list[float]] = {"graphviz": [], "layered": []}
            for _ in range(reps):
                for layout in times:
                    svg_module._cache.clear()
                    t = time.perf_counter()
                    layout_svg(drawing, layout=layout)  # type: ignore[arg-type]
                    times[layout].append(time.perf_counter() - t)
            gv, ours = (statistics.median(times[k]) * 1000 for k in ("graphviz", "layered"))
            print(f"{n:>6} {shape:>8} {gv:>10.1f} {ours:>10.1f} {gv / ours:>6.1f}x", flush=True)


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--graphviz-reps", type=int, default=1,
                    help="fresh processes laid out by Graphviz (seconds each; 0: none)")
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true",
                    help="2,000 events, no Graphviz open, a short threshold table")
    ap.add_argument("--only", choices=("first-open", "threshold"))
    args = ap.parse_args()
    if args.quick:
        args.events, args.graphviz_reps, args.reps = 2_000, 0, 2
    sizes = [50, 100, 200] if args.quick else [50, 100, 150, 200, 300, 500, 1000]
    with tempfile.TemporaryDirectory() as folder:
        if args.only in (None, "first-open"):
            first_open_table(Path(folder), args.events, args.reps, args.graphviz_reps)
        if args.only in (None, "threshold"):
            threshold_table(args.reps, sizes)


if __name__ == "__main__":
    main()
