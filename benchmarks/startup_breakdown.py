"""Where the time between a notebook run's creation and its first step goes (issue 29 item 1).

    .venv/bin/python benchmarks/startup_breakdown.py [--reps 15]

A REAL kernel runs notebook 01's quick-start chain with ``%chain run`` (and, for the
kernel's own share, with a bare ``await runtime.start``), and marks the moments on the
runtime's clock (``time.time``, the clock events are stamped with): ``run_started`` (the
run's first event), the run widget built, its output displayed, the magic returned, IPython's
``post_run_cell`` hooks done, and the first ``step_started``. Each column is the median (and
p90) over the repetitions, in ms after ``run_started``. The first step cannot start before
the cell's code has returned to the kernel's event loop: whatever runs in the cell after the
run was created (the widget) and whatever the kernel does after the cell (its hooks, the
execute reply) is a gap before the first step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_notebook import ROOT, SETUP, _execute

MARKS = '''
import time as _t
from chainlab.jupyter import launch as _launch
from chainlab.jupyter.magics import commands as _cmd
_marks = {}
_orig_widget_cls = _launch.RunWidget
class _Timed(_orig_widget_cls):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _marks["widget built"] = _t.time()
    def _ipython_display_(self):
        super()._ipython_display_()
        _marks["displayed"] = _t.time()
_launch.RunWidget = _Timed
_orig_start = _cmd.start
def _start(*a, **k):
    r = _orig_start(*a, **k)
    return r
def _post(result):
    _marks.setdefault("post_run_cell done", _t.time())
get_ipython().events.register("post_run_cell", _post)
def _marks_of(run):
    evs = run.event_list()
    t0 = next(e.ts for e in evs if e.kind == "run_started")
    out = {k: (v - t0) * 1000 for k, v in _marks.items()}
    out["first step_started"] = (min(e.ts for e in evs if e.kind == "step_started") - t0) * 1000
    return out
'''
RUN = ("_marks.clear()\nrun = %chain run invoice --tools tools --context "
       "'{\"customer\": \"Ada\"}' --db :memory:\n_marks['magic returned'] = _t.time()")
BARE = ("_marks.clear()\nrun = await runtime.start(invoice, {'customer': 'Ada'})\n"
        "_marks['start returned'] = _t.time()")
WAIT = "await run.wait()\nprint('MARKS', json.dumps(_marks_of(run)))"


def measure(reps: int, src: Path) -> dict[str, dict[str, list[float]]]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, PYTHONPATH=str(src))
    with tempfile.TemporaryDirectory() as tmp:
        km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=tmp)
        try:
            _execute(kc, SETUP)
            _execute(kc, MARKS)
            found: dict[str, dict[str, list[float]]] = {"%chain run": {}, "runtime.start": {}}
            for i in range(reps + 1):
                for way, code in (("%chain run", RUN), ("runtime.start", BARE)):
                    _execute(kc, code)
                    out = _execute(kc, WAIT)
                    marks = json.loads(out.split("MARKS", 1)[1])
                    if i:  # the first round warms imports and layouts up
                        for k, v in marks.items():
                            found[way].setdefault(k, []).append(v)
            return found
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--src", type=Path, default=ROOT)
    args = ap.parse_args()
    found = measure(args.reps, args.src)
    print(f"ms after run_started, median / p90 over {args.reps} runs (a real kernel)")
    for way, marks in found.items():
        print(f"\n{way}")
        for k, xs in sorted(marks.items(), key=lambda kv: statistics.median(kv[1])):
            xs = sorted(xs)
            p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
            print(f"  {k:<22} {statistics.median(xs):7.2f} / {p90:7.2f}")


if __name__ == "__main__":
    main()
