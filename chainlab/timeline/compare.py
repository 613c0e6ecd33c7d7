"""Comparing schedules and runs: the schedule a run really had (:func:`schedule_of`), the
what-if replay of its recorded durations under another release order or concurrency
(:func:`whatif`; the simulation itself is
:func:`chainlab.runtime.history.whatif.simulate`), two schedules on one time axis
(:func:`gantt_compare`), and a run against its fork, step by step (:func:`diff`). A real
schedule leaves out the time its run waited for a person (:func:`person_waits`): a
what-if replays calls, never the pauses between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from chainlab.events import RUN_END_KINDS, Event, EventKind
from chainlab.events.fold import RunState
from chainlab.events.usage import total_usage
from chainlab.timeline.plot import TimelineFigure

__all__ = ["DIFF_COLUMNS", "Schedule", "diff", "gantt_compare", "person_waits", "schedule_of",
           "whatif"]


class Schedule:
    """Who ran when, in seconds from the run's start: ``frame`` (step_id, tool, start_s,
    end_s, duration_s, cost, tokens; one row per step that took a slot), ``makespan``
    (seconds), and what the schedule's calls cost: ``usage`` (the recorded usage of its
    steps, :mod:`chainlab.events.usage`), ``cost`` and ``tokens`` (None when nothing
    reported any). A what-if runs the same calls in another order, so it costs the same;
    a schedule over fewer steps (a fork's) costs less.

    ``waited_s``: the time a real run waited for a person (paused at a breakpoint, in step
    mode, suspended on an approval or a budget) while no call ran; it is left out of the
    schedule's times and makespan, so a run compares like with like with its what-if
    (issue 40: a run that sat 11 s at a breakpoint read "0.05 x")."""

    def __init__(self, frame: pd.DataFrame, label: str, state: RunState | None = None,
                 waited_s: float = 0.0):
        self.frame = frame
        self.label = label
        self.waited_s = waited_s
        self.makespan = float(frame["end_s"].max()) if len(frame) else 0.0
        steps = state.steps if state is not None else {}
        per_step = [steps[s].usage if s in steps else None for s in frame["step_id"]]
        self.frame["cost"] = pd.Series([(u or {}).get("cost", float("nan")) for u in per_step],
                                       dtype="float64", index=frame.index)
        self.frame["tokens"] = pd.Series([(u or {}).get("tokens", float("nan"))
                                          for u in per_step], dtype="float64",
                                         index=frame.index)
        self.usage = total_usage(per_step)
        self.cost: float | None = self.usage.get("cost")
        self.tokens: int | None = self.usage.get("tokens")

    @property
    def waited_text(self) -> str:
        """``"11.94 s waiting for a person left out"``, or "" when the run never waited."""
        return f"{self.waited_s:.3g} s waiting for a person left out" if self.waited_s else ""

    def __repr__(self) -> str:
        cost = f", cost {self.cost:.4g}" if self.cost is not None else ""
        waited = f" ({self.waited_text})" if self.waited_s else ""
        return (f"<Schedule {self.label}: {len(self.frame)} steps, makespan "
                f"{self.makespan:.3f} s{waited}{cost}>")


#: what starts and what ends a run's wait for a person (its status paused or suspended)
_WAIT_STARTS = frozenset({EventKind.RUN_PAUSED, EventKind.RUN_SUSPENDED})
_WAIT_ENDS = frozenset({EventKind.RUN_RESUMED, EventKind.RUN_ROLLBACK_STARTED,
                        *RUN_END_KINDS})


def person_waits(events: Iterable[Event], calls: Iterable[tuple[float, float]]
                 ) -> list[tuple[float, float]]:
    """The intervals ``(from, to)`` in which a run waited for a person: its status was
    ``paused`` (a breakpoint, step mode, Pause) or ``suspended`` (an approval, an in-doubt
    step, a budget) and none of ``calls`` (``(start, end)`` of its call attempts) ran."""
    waits: list[tuple[float, float]] = []
    since: float | None = None
    for ev in events:
        if ev.kind in _WAIT_STARTS and since is None:
            since = ev.ts
        elif ev.kind in _WAIT_ENDS and since is not None:
            waits.append((since, ev.ts))
            since = None
    busy = sorted(calls)
    idle: list[tuple[float, float]] = []
    for a, b in waits:  # each wait minus the calls that ran during it
        at = a
        for c, d in busy:
            if d <= at or c >= b:
                continue
            if c > at:
                idle.append((at, c))
            at = max(at, d)
        if at < b:
            idle.append((at, b))
    return idle


def _shift(waits: list[tuple[float, float]]) -> Any:
    """``t -> seconds of waiting for a person before t``."""
    def before(t: float) -> float:
        return sum(min(b, t) - a for a, b in waits if a < t)

    return before


def _durations(run: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Per step: seconds in call attempts (what holds a slot), and the first start."""
    took: dict[str, float] = {}
    first: dict[str, float] = {}
    for rec in run.state.attempts:
        if rec.kind != "call" or rec.ended_at is None or rec.tool is None:
            continue
        took[rec.step_id] = took.get(rec.step_id, 0.0) + (rec.ended_at - rec.started_at)
        first.setdefault(rec.step_id, rec.started_at)
    return took, first


def schedule_of(run: Any) -> Schedule:
    """The schedule a run really had (its call attempts, from the store's fold), with the
    time it waited for a person left out (:func:`person_waits`; ``Schedule.waited_s``)."""
    took, first = _durations(run)
    t0 = run.state.started_at or min(first.values(), default=0.0)
    calls = [(rec.started_at, rec.ended_at) for rec in run.state.attempts
             if rec.kind == "call" and rec.ended_at is not None]
    waits = person_waits(run.history(), calls)
    waited = _shift(waits)
    tools = {s.id: s.tool for s in run.chain.steps}
    rows = [{"step_id": step_id, "tool": tools.get(step_id, ""),
             "start_s": start - t0 - waited(start),
             "end_s": start - t0 - waited(start) + took[step_id], "duration_s": took[step_id]}
            for step_id, start in first.items()]
    frame = pd.DataFrame(rows, columns=["step_id", "tool", "start_s", "end_s", "duration_s"])
    frame = frame.sort_values(["start_s"], kind="stable").reset_index(drop=True)
    return Schedule(frame, f"run {run.run_id} ({run.state.priority})", run.state,
                    waited_s=sum(b - a for a, b in waits))


def whatif(run: Any, *, priority: str = "critical_path",
           max_concurrency: int | None = None) -> Schedule:
    """Replay a finished run's recorded call durations on the real scheduler in virtual time
    under another release ``priority`` (``declaration`` | ``critical_path``) and/or
    ``max_concurrency``: no tool runs, nothing is written. Returns the simulated schedule.

    Raises ValueError for a ``max_concurrency`` below 1 or an unknown ``priority``,
    RunStateError when the run is still going (its durations are not all known) or this
    process cannot compile the run (its tools are missing).
    """
    from chainlab.errors import RunStateError
    from chainlab.events import RunStatus
    from chainlab.runtime.history.whatif import simulate

    if max_concurrency is not None and (isinstance(max_concurrency, bool)
                                        or not isinstance(max_concurrency, int)
                                        or max_concurrency < 1):
        raise ValueError(f"max_concurrency must be a whole number of slots, 1 or more, got "
                         f"{max_concurrency!r}; leave it out to use the run's own")
    if priority not in ("critical_path", "declaration"):
        raise ValueError(f"priority must be 'critical_path' or 'declaration', got {priority!r}")
    if run.status in (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.COMPENSATING):
        raise RunStateError(f"run {run.run_id!r} is still running ({run.status}): a what-if "
                            "replays recorded durations; wait for it (`await run.wait()`) "
                            "first", run_id=run.run_id, status=str(run.status))
    compiled = run.compiled()
    if compiled is None:
        raise RunStateError(f"what-if of run {run.run_id!r} needs its tools: open it with a "
                            "runtime whose toolbox has them", run_id=run.run_id)
    graph, options = compiled
    took, _ = _durations(run)
    keys = {}
    for step_id, node in graph.nodes.items():
        st = run.state.steps.get(step_id)
        if node.tool is not None and node.tool.serial_key and st is not None and st.args:
            keys[step_id] = node.tool.resolve_serial_key(st.args)
    concurrency = max_concurrency or (1 if options.mode == "sequential"
                                      else options.max_concurrency)
    slots = simulate(graph.nodes, graph.top, took, max_concurrency=concurrency,
                     priority=priority, pools=options.pools, keys=keys)
    tools = {step_id: n.step.tool for step_id, n in graph.nodes.items()}
    frame = pd.DataFrame(
        [{"step_id": s.step_id, "tool": tools[s.step_id], "start_s": s.start, "end_s": s.end,
          "duration_s": s.end - s.start} for s in slots if not s.parent],
        columns=["step_id", "tool", "start_s", "end_s", "duration_s"])
    return Schedule(frame, f"what-if {priority}, concurrency {concurrency}", run.state)


def gantt_compare(a: Any, b: Any, *, width: float = 10.0) -> Figure:
    """Two schedules (a :class:`Schedule`, or a run: its real schedule) on one time axis,
    one above the other, each with its makespan marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from chainlab.render.style import STATUS_STYLE

    scheds = [x if isinstance(x, Schedule) else schedule_of(x) for x in (a, b)]
    steps = list(dict.fromkeys([*scheds[0].frame["step_id"], *scheds[1].frame["step_id"]]))
    rows = max(len(steps), 1)
    fig = TimelineFigure(figsize=(width, 1.4 + 2 * (0.9 + 0.22 * rows)), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, sharex=True)
    colour = STATUS_STYLE["succeeded"].fill
    end = max(s.makespan for s in scheds) or 1.0
    for ax, sched in zip(axes, scheds, strict=True):
        pos = {step_id: i for i, step_id in enumerate(steps)}
        for row in sched.frame.itertuples():
            ax.barh(pos[row.step_id], max(row.duration_s, end / 400), left=row.start_s,
                    height=0.7, color=colour, edgecolor="#333333", linewidth=0.4)
        ax.axvline(sched.makespan, color="#b03a2e", linewidth=1.2, linestyle="--")
        cost = f" · cost {sched.cost:.4g}" if sched.cost is not None else ""
        waited = f" ({sched.waited_text})" if sched.waited_s else ""
        ax.set_title(f"{sched.label} · makespan {sched.makespan:.3f} s{waited}{cost}",
                     fontsize=9, loc="left")
        ax.set_yticks(range(len(steps)), steps, fontsize=7)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    axes[1].set_xlabel("seconds from the run's start")
    axes[1].set_xlim(0, end * 1.03)
    fig.subplots_adjust(left=0.2, right=0.98, top=0.94, bottom=0.08, hspace=0.35)
    return fig


DIFF_COLUMNS = ["step_id", "status_a", "status_b", "attempts_a", "attempts_b", "same_output",
                "duration_a_s", "duration_b_s", "fork_b", "code_changed"]


def _step_calls(state: RunState) -> tuple[dict[str, float], dict[str, str | None]]:
    """Per step: total call time and the code of its last call."""
    took: dict[str, float] = {}
    code: dict[str, str | None] = {}
    for rec in state.attempts:
        if rec.kind != "call":
            continue
        took[rec.step_id] = took.get(rec.step_id, 0.0) + (rec.duration_s or 0.0)
        code[rec.step_id] = rec.code
    return took, code


def diff(run_a: Any, run_b: Any) -> pd.DataFrame:
    """Compare two runs (typically a run and its fork), one row per step (steps of ``run_a``
    in order, then those only ``run_b`` has): status_a/b, attempts_a/b (tool calls),
    same_output (both succeeded with equal outputs; NA when either has none), duration_a_s/
    b_s (time in tool calls), fork_b (``reuse`` | ``override`` when ``run_b`` copied the
    step instead of running it, else ``-``), code_changed (the tool code differs between the runs'
    last calls; NA when either did not call it). ``run_a``/``run_b`` are Run handles."""
    import json

    states = [run_a.state, run_b.state]
    ids = list(dict.fromkeys([*states[0].steps, *states[1].steps]))
    (took_a, code_a), (took_b, code_b) = (_step_calls(s) for s in states)
    for st in states[1].steps.values():  # a reused step carries the code that made it
        if st.reused and st.reused.get("code"):
            code_b.setdefault(st.step_id, st.reused["code"])
    for st in states[0].steps.values():
        if st.reused and st.reused.get("code"):
            code_a.setdefault(st.step_id, st.reused["code"])
    rows = []
    for step_id in ids:
        a, b = (s.steps.get(step_id) for s in states)
        both = a is not None and b is not None and str(a.status) == str(b.status) == "succeeded"
        same = (json.dumps(a.output, sort_keys=True) == json.dumps(b.output, sort_keys=True)
                if both and a is not None and b is not None else pd.NA)
        ca, cb = code_a.get(step_id), code_b.get(step_id)
        rows.append({
            "step_id": step_id,
            "status_a": str(a.status) if a is not None else None,
            "status_b": str(b.status) if b is not None else None,
            "attempts_a": a.attempts if a is not None else 0,
            "attempts_b": b.attempts if b is not None else 0,
            "same_output": same,
            "duration_a_s": took_a.get(step_id, 0.0),
            "duration_b_s": took_b.get(step_id, 0.0),
            "fork_b": ((b.reused or {}).get("decision") if b is not None else None) or "-",
            "code_changed": (ca != cb) if ca is not None and cb is not None else pd.NA,
        })
    frame = pd.DataFrame(rows, columns=DIFF_COLUMNS)
    for col in ("same_output", "code_changed"):
        frame[col] = frame[col].astype("boolean")
    return frame
