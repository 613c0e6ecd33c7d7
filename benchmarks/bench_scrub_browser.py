"""Scrubbing a 10,000-event run in a real browser (issue 40, item 3): how long a person
waits from an input to the widget's header naming the event AND the DAG showing it.

    .venv/bin/python benchmarks/bench_scrub_browser.py [--reps 7] [--before DIR]

A real run of ~10,000 events (bench_history's 3,332-step chain, on SQLiteStore) is shown
with ``%chain show RUN --db FILE`` in a private headless JupyterLab driven by Playwright
(Debian's Chromium). For each input the page records when the input happened (its own
``performance.now()``), when the header's last change was drawn and when the DAG's last
change was drawn (MutationObservers; "drawn": after the next animation frame, so the
browser's restyle and paint count; until the DAG has been still for 0.6 s):

  drag      the slider's handle dragged to a random place and released (from its last move:
            the slider follows the drag)
  < / >     the previous / next event button
  typed     an event's number typed into the box, then Enter (not in older code)

Each row is the median / p90 of --reps inputs, in milliseconds, "header" and "header and
DAG" (the later of the two). The DAG is then checked against ``run.state_at(seq)`` for a
sample of steps (not timed): a number for a DAG that was wrong would be worthless.
``--before DIR`` measures another checkout in the same run (its own JupyterLab, its kernels
importing DIR first), printed beside this one.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# what the page records: the input's time, the header's and the DAG's last change
JS_WATCH = """() => {
  const w = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .cl-run');
  const head = w.querySelector('.cl-head').parentElement;
  const dag = w.querySelector('.cl-dagview');
  window.__cl = {input: null, head: null, dag: null, text: head.innerText};
  // a change counts once the browser has drawn it: the time after the next frame (its
  // style, layout and paint), not the time the markup changed
  const drawn = (key) => requestAnimationFrame(() => setTimeout(() => {
    window.__cl[key] = performance.now(); }, 0));
  new MutationObserver(() => {
    const text = head.innerText;
    if (text !== window.__cl.text) { window.__cl.text = text; drawn('head'); }
  }).observe(head, {subtree: true, childList: true, characterData: true});
  new MutationObserver(() => drawn('dag')).observe(dag, {subtree: true, childList: true,
    characterData: true, attributes: true});
  for (const kind of ['pointerup', 'keydown', 'click']) {
    document.addEventListener(kind, () => { window.__cl.input = performance.now(); },
                              {capture: true});
  }
  // a drag moves the slider before it is released: its last move is the input
  document.addEventListener('pointermove', (e) => {
    if (e.buttons) window.__cl.input = performance.now(); }, {capture: true});
}"""
JS_RESET = "() => { window.__cl.input = null; window.__cl.head = null; window.__cl.dag = null; }"
JS_TIMES = "() => window.__cl"
JS_LOOKS = """steps => {
  const w = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .cl-run');
  const out = {};
  for (const s of steps) {
    const g = [...w.querySelectorAll('g.node')].find(
      n => n.querySelector('title') && n.querySelector('title').textContent === s);
    const st = g && g.querySelector('.cl-st');
    out[s] = st ? getComputedStyle(st, '::after').content : null;
  }
  return out;
}"""


def build_run(path: Path, events: int) -> str:
    from bench_history import build

    return build(path, events)


def _after_event(page: Any, widget: Any) -> int | None:
    import re

    text = widget.locator(".cl-head").first.inner_text()
    m = re.search(r"after event (\d+) of", text)
    return int(m.group(1)) if m else None


def _settle(page: Any, quiet_s: float = 0.6, timeout_s: float = 30.0) -> dict[str, Any]:
    """Wait until the input was seen, the header changed and the DAG has been still for
    ``quiet_s``; the page's record of the three times."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = page.evaluate(JS_TIMES)
        now = page.evaluate("() => performance.now()")
        if t["input"] is not None and t["head"] is not None and t["head"] >= t["input"]:
            last = max(t["head"], t["dag"] or 0)
            if now - last >= quiet_s * 1000:
                return t
        time.sleep(0.05)
    raise TimeoutError("the widget did not answer the input")


def _expected(db: Path, run_id: str, seq: int, steps: list[str]) -> dict[str, str]:
    from chainlab.render.style import status_line
    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore

    store = SQLiteStore(db, readonly=True)
    try:
        state = Runtime(store=store).get_run(run_id).state_at(seq)
        from chainlab.render.display import step_badges

        badges = step_badges(state.steps)
        return {s: status_line(str(state.steps[s].status), badges.get(s)) for s in steps}
    finally:
        store.close()


def measure(src: Path, db: Path, run_id: str, reps: int, shots: Path | None
            ) -> dict[str, list[float]]:
    from tests.e2e.lab import Lab, browser_page, write_notebook
    from tests.e2e.test_lab import PANEL, run_all

    os.environ["PYTHONPATH"] = str(src)
    rng = random.Random(11)
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        nb = write_notebook(Path(tmp) / "scrub.ipynb", [
            "import chainlab; print(chainlab.__file__)\n%load_ext chainlab",
            f"%chain show {run_id} --db {db}",
        ])
        with Lab(Path(tmp) / "lab", [nb]) as lab, \
                browser_page(Path(tempfile.gettempdir()) / "chainlab-scrub-bench-failure.png",
                             width=1300) as page:
            run_all(page, lab, "scrub.ipynb")
            where = page.locator(f"{PANEL} .jp-OutputArea-output").first.inner_text()
            if not where.strip().startswith(str(src)):
                raise RuntimeError(f"the kernel imported {where!r}, not the code in {src}")
            widget = page.locator(f"{PANEL} .cl-run").first
            widget.locator("g.node").first.wait_for(timeout=120_000)
            widget.scroll_into_view_if_needed()
            page.evaluate(JS_WATCH)
            track = widget.locator(".cl-scrubber .noUi-base, .cl-scrubber .slider").first
            handle = widget.locator(".cl-scrubber .noUi-handle").first
            buttons = widget.locator(".cl-scrubber button")
            box = widget.locator(".cl-scrubber input[type=number]")
            sample = [f"s{i}" for i in range(0, 3332, 111)]

            def timed(row: str, act: Any) -> None:
                page.evaluate(JS_RESET)
                act()
                t = _settle(page)
                rows.setdefault(f"{row}: header", []).append(t["head"] - t["input"])
                rows.setdefault(f"{row}: header and DAG", []).append(
                    max(t["head"], t["dag"] or t["head"]) - t["input"])
                seq = _after_event(page, widget)
                if seq is not None:  # not timed: the DAG must show the run at that event
                    want = _expected(db, run_id, seq, sample)
                    got = {s: str(v).strip('"') for s, v in
                           page.evaluate(JS_LOOKS, sample).items()}
                    if got != want:
                        bad = {s: (got[s], want[s]) for s in sample if got[s] != want[s]}
                        raise AssertionError(f"{row}: the DAG at event {seq} is wrong: {bad}")

            for _ in range(reps):
                def drag() -> None:
                    hb, tb = handle.bounding_box(), track.bounding_box()
                    y = hb["y"] + hb["height"] / 2
                    page.mouse.move(hb["x"] + hb["width"] / 2, y)
                    page.mouse.down()
                    page.mouse.move(tb["x"] + tb["width"] * rng.uniform(0.1, 0.9), y, steps=8)
                    page.mouse.up()

                timed("drag", drag)
                timed("<", lambda: buttons.nth(0).click())
                timed(">", lambda: buttons.nth(1).click())
                if box.count():
                    def typed() -> None:
                        box.fill(str(rng.randint(1, 9990)))
                        box.press("Enter")

                    timed("typed", typed)
            if shots is not None:
                widget.screenshot(path=str(shots))
    return rows


def _cell(xs: list[float]) -> str:
    if not xs:
        return f"{'-':>17}"
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"{statistics.median(xs):8.1f} / {p90:6.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--shots", type=Path, help="save a screenshot of each widget here")
    ns = ap.parse_args()
    sources = ([("before", ns.before.resolve())] if ns.before else []) + [("now", ROOT)]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "scrub.db"
        run_id = build_run(db, ns.events)
        results = []
        for label, src in sources:
            shot = ns.shots / f"scrub-{label}.png" if ns.shots else None
            results.append(measure(src, db, run_id, ns.reps, shot))
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores; a {ns.events}-event "
          f"run; ms from the input, median / p90 of {ns.reps}")
    for label, src in sources:
        print(f"  {label}: {src}")
    print(f"{'':<26}" + "".join(f"{label:>19}" for label, _ in sources))
    for row in results[-1]:
        print(f"{row:<26}" + "".join(f"{_cell(r.get(row, [])):>19}" for r in results))


if __name__ == "__main__":
    main()
