"""An experiment's plan (DESIGN §22): for each recorded run, the fork it makes under the change
and, per step, what the replay does with its call, before anything runs.

A replay is a fork (:mod:`.fork`) with an experiment's contract on top: its decisions are the
fork's, each mapped through THE call rule of :mod:`chainlab.runtime.engine.experiment`
(``decide_call``), which the gate applies again at run time, when a call's args are known:

=====================  ===========================================================  ========
fork's decision         the tool                                                     replay
=====================  ===========================================================  ========
reuse                  side-effecting (same tool, code, args: the recorded effect)  recorded
reuse                  effect-free, ``recorded=True``                               recorded
rerun (asked here)     effect-free                                                  live
confirm                side-effecting, args known now                               the rule
confirm                side-effecting, args known only once upstream steps ran      at run
=====================  ===========================================================  ========

:func:`recording` reads what answers the replay from a recorded run: its side effects that
still stand (by tool and args hash, following a reused effect to the run that made it) and
its model turns (by request hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chainlab.events import Event, EventKind, RunState, StepStatus
from chainlab.runtime.engine.experiment import CallDecision, decide_call
from chainlab.runtime.history.fork_plan import ForkDecision, ForkPlan
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["AT_RUN_TIME", "ExperimentPlan", "ExperimentRow", "RunPlan", "recording"]

K = EventKind
S = StepStatus

#: a replay decision taken when the call's args are known (``recorded``,
#: ``needs_live_effect`` or ``ask``: the gate applies the rule then)
AT_RUN_TIME = "at_run_time"


@dataclass(frozen=True, slots=True)
class ExperimentRow:
    """What the replay of one run does with one step: ``decision`` is a
    :class:`~chainlab.runtime.engine.experiment.CallDecision` value or :data:`AT_RUN_TIME`."""

    step_id: str
    tool: str
    decision: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunPlan:
    """The replay of one recorded run: its fork plan, one row per step, and the recording
    that answers it (``spec``, stored with the replay)."""

    run_id: str
    fork: ForkPlan
    rows: list[ExperimentRow]
    spec: dict[str, Any]

    @property
    def needs_live_effect(self) -> list[ExperimentRow]:
        """The calls known now to stop the replay (new side effects not listed live)."""
        return [r for r in self.rows if r.decision == CallDecision.NEEDS_LIVE_EFFECT]


@dataclass(frozen=True, slots=True)
class ExperimentPlan:
    """What :meth:`chainlab.runtime.Runtime.experiment` would do, run by run, step by step."""

    runs: list[RunPlan] = field(default_factory=list)
    live: tuple[str, ...] = ()
    recorded: bool = False

    def table(self) -> list[dict[str, Any]]:
        """One dict per (run, step): run, step, tool, decision, reason."""
        return [{"run": p.run_id, "step": r.step_id, "tool": r.tool, "decision": r.decision,
                 "reason": r.reason} for p in self.runs for r in p.rows]

    def __str__(self) -> str:
        cols = ["run", "step", "tool", "decision", "reason"]
        rows = [[str(r[c]) for c in cols] for r in self.table()]
        width = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width, strict=True)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()
                  for r in rows]
        return "\n".join(lines)


def replay_rows(fork: ForkPlan, toolbox: Toolbox, spec: Mapping[str, Any],
                recorded: bool) -> list[ExperimentRow]:
    """The fork's decisions as the replay's (the table in the module docstring)."""
    rows = []
    for row in fork.rows:
        tool = toolbox.get(row.tool) if row.tool in toolbox else None
        effects = bool(tool is not None and tool.side_effects)
        if row.decision == ForkDecision.REUSE:
            why = ("side effect answered from the recording (same tool, code and args): not "
                   "made again" if effects else "effect-free, answered from the recording "
                   "(recorded=True)")
            rows.append(ExperimentRow(row.step_id, row.tool, CallDecision.RECORDED, why))
        elif not effects:
            rows.append(ExperimentRow(row.step_id, row.tool, CallDecision.LIVE,
                                      "effect-free: runs" + _because(row.reason, recorded)))
        elif row.args is None:
            rows.append(ExperimentRow(
                row.step_id, row.tool, AT_RUN_TIME,
                f"side-effecting, {row.reason.split('; side-effecting')[0]}: answered from "
                "the recording if it has these "
                "args, else needs_live_effect (or asks, when listed live)"))
        else:
            decision, _ = decide_call(spec, row.tool, True, row.args)
            rows.append(ExperimentRow(row.step_id, row.tool, decision, _WHY[decision]))
    return rows


def _because(reason: str, recorded: bool) -> str:
    return "" if reason.startswith("effect-free") else f" ({reason})"


_WHY = {
    CallDecision.RECORDED: "side effect recorded with these args: answered from the "
                           "recording, not made again",
    CallDecision.NEEDS_LIVE_EFFECT: "side effect new in this experiment (no recording with "
                                    "these args): NOT made, the replay stops here",
    CallDecision.ASK: "side effect new in this experiment, its tool listed live: waits for a "
                      "person's approval",
}


def recording(run_id: str, state: RunState, events: list[Event]) -> dict[str, Any]:
    """What answers a replay of ``run_id`` (its ``state`` and log ``events``): ``effects``
    ``{tool: {args_hash: {output, source_run, source_attempt, code, step_id}}}`` for every
    call that succeeded and still stands (a compensated effect answers nothing), and
    ``turns`` ``{request_hash: {answer, source_run, step_id}}`` for every model turn."""
    last_call = {rec.step_id: rec for rec in state.attempts if rec.kind == "call"}
    effects: dict[str, dict[str, Any]] = {}
    for step_id, st in state.steps.items():
        if st.status != S.SUCCEEDED or st.args is None:
            continue
        if st.reused:
            if st.reused.get("origin") != "call":
                continue  # a person's output made no effect to answer with
            tool = st.reused.get("tool")
            source = {"source_run": st.reused.get("source_run"),
                      "source_attempt": st.reused.get("source_attempt"),
                      "code": st.reused.get("code")}
        else:
            rec = last_call.get(step_id)
            if rec is None or rec.tool is None:
                continue
            tool = rec.tool
            source = {"source_run": run_id, "source_attempt": rec.attempt, "code": rec.code}
        if tool:
            effects.setdefault(str(tool), {})[args_hash(st.args)] = {
                "output": st.output, "step_id": step_id, **source}
    return {"effects": effects, "turns": _turns(run_id, events)}


def _turns(run_id: str, events: list[Event]) -> dict[str, Any]:
    asked: dict[tuple[str | None, int | None], tuple[str, str]] = {}
    turns: dict[str, Any] = {}
    for ev in events:
        p = ev.payload
        if ev.kind == K.STEP_STARTED and "request_hash" in p:
            asked[(ev.step_id, ev.attempt)] = (p["request_hash"],
                                               p.get("answered_from") or run_id)
        elif ev.kind == K.STEPS_ADDED and "turn" in p and "answer" in p:
            _answer(turns, asked.get((ev.step_id, p.get("attempt"))), ev.step_id, p)
        elif ev.kind == K.STEP_SUCCEEDED and "answer" in p:
            _answer(turns, asked.get((ev.step_id, ev.attempt)), ev.step_id, p)
    return turns


def _answer(turns: dict[str, Any], asked: tuple[str, str] | None, step_id: str | None,
            payload: Mapping[str, Any]) -> None:
    if asked is not None:
        turns[asked[0]] = {"answer": payload["answer"], "source_run": asked[1],
                           "step_id": step_id}
