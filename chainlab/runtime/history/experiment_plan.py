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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chainlab._text import did_you_mean
from chainlab.errors import ExperimentError, RunNotFoundError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, RunStatus, StepStatus
from chainlab.plan.schema import Chain
from chainlab.runtime.engine.experiment import CallDecision, decide_call
from chainlab.runtime.history.fork_plan import ForkDecision, ForkPlan, text_table
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.store.base import RunRecord, Store
    from chainlab.tools import Toolbox

__all__ = ["AT_RUN_TIME", "ExperimentPlan", "ExperimentRow", "RunPlan", "agents_used",
           "changed_toolbox", "check_concurrency", "check_runs", "describe", "recording",
           "replay_rows", "run_id_of", "stored_change"]

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
        return text_table(self.table(), ["run", "step", "tool", "decision", "reason"])


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
            rows.append(ExperimentRow(row.step_id, row.tool, str(CallDecision.RECORDED), why))
        elif not effects:
            rows.append(ExperimentRow(row.step_id, row.tool, str(CallDecision.LIVE),
                                      "effect-free: runs" + _because(row.reason, recorded)))
        elif row.args is None:
            rows.append(ExperimentRow(
                row.step_id, row.tool, AT_RUN_TIME,
                f"side-effecting, {row.reason.split('; side-effecting')[0]}: answered from "
                "the recording if it has these "
                "args, else needs_live_effect (or asks, when listed live)"))
        else:
            decision, _ = decide_call(spec, row.tool, True, row.args)
            rows.append(ExperimentRow(row.step_id, row.tool, str(decision), _WHY[decision]))
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


# ---------------------------------------------------------------------- the change
def changed_toolbox(toolbox: Toolbox, tools: Iterable[Any] | None,
                    agents: Mapping[str, Any] | None) -> Toolbox:
    """``toolbox`` itself, or an overlay of it with ``tools`` (a Toolbox or Tools, each
    replacing the tool of its name) and ``agents`` (``{name: Agent}``)."""
    if not tools and not agents:
        return toolbox
    box = toolbox.overlay()
    for tool in tools or ():
        box.replace(tool)
    for agent in (agents or {}).values():
        box.add_agent(agent)
    return box


def describe(change: Mapping[str, Any]) -> dict[str, Any]:
    """The change as JSON data, for the experiment's record: what was changed, by name."""
    out: dict[str, Any] = {}
    if change.get("chain") is not None:
        out["chain"] = change["chain"].name
        out["chain_data"] = change["chain"].to_dict()
    if change.get("agents"):
        out["agents"] = sorted(change["agents"])
    if change.get("tools"):
        out["tools"] = sorted(t.name for t in change["tools"])
    if change.get("context") is not None:
        callable_ = callable(change["context"])
        out["context"] = "function" if callable_ else sorted(change["context"])
        if not callable_:
            out["context_data"] = dict(change["context"])
    return out


def check_concurrency(concurrency: Any) -> None:
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ExperimentError([f"concurrency must be a whole number >= 1, got "
                               f"{concurrency!r}"])


def stored_change(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a change the record keeps as data: the chain and a context mapping."""
    out: dict[str, Any] = {}
    if isinstance(stored.get("chain_data"), dict):
        out["chain"] = Chain.from_dict(stored["chain_data"])
    if isinstance(stored.get("context_data"), dict):
        out["context"] = stored["context_data"]
    return out


# ---------------------------------------------------------------------- checks
def check_runs(store: Store, ids: Sequence[str], chain: Chain | None,
           agents: Mapping[str, Any] | None, toolbox: Toolbox, live: Sequence[str],
           scorers: Mapping[str, Any] | None) -> list[RunRecord]:
    """The recorded runs, every problem found first (ExperimentError lists them all)."""
    problems: list[str] = []
    records: list[RunRecord] = []
    if not ids:
        problems.append("no runs given: pass run ids, or a selection such as "
                        "runtime.runs(chain=\"support\", status=\"succeeded\", limit=50)")
    known: list[str] | None = None
    for run_id in ids:
        try:
            record = store.get_run(run_id)  # (its status is kept with it: no log read)
        except RunNotFoundError:
            if known is None:
                known = [r.run_id for r in store.list_runs(200)]
            problems.append(f"run {run_id!r} does not exist{did_you_mean(run_id, known)}")
            continue
        if record.status not in RUN_TERMINAL and record.status != RunStatus.SUSPENDED:
            problems.append(f"run {run_id!r} is still {record.status or 'starting'}: wait for "
                            "it or cancel it, then replay it")
            continue
        records.append(record)
    names = sorted({r.chain_name for r in records})
    if chain is None and len(names) > 1:
        by = "; ".join(f"{n}: {', '.join(r.run_id for r in records if r.chain_name == n)}"
                       for n in names)
        problems.append(f"the runs are of different chains ({by}): give chain=... (the "
                        "chain to replay them all with) or pick runs of one chain")
    used = agents_used(records, chain)
    for agent, given in sorted((agents or {}).items()):
        if not hasattr(given, "tool") or not hasattr(given, "instructions"):
            problems.append(f"agents[{agent!r}] is a {type(given).__name__}, not an Agent: "
                            "give chainlab.Agent(...) objects")
        if agent not in used:
            problems.append(f"agent {agent!r} is not used by the chain"
                            f"{'s' if len(names) > 1 else ''} {', '.join(names)} (it uses "
                            f"{', '.join(sorted(used)) or 'no agent'})")
    for tool in live:
        if tool not in toolbox:
            problems.append(f"live tool {tool!r} is not in toolbox {toolbox.name!r}")
    for scorer, fn in (scorers or {}).items():
        if not callable(fn):
            problems.append(f"scorer {scorer!r} is not callable ({type(fn).__name__}): give "
                            "a function fn(original, new) -> number | bool")
    if problems:
        raise ExperimentError(problems)
    return records


def agents_used(records: Sequence[RunRecord], chain: Chain | None) -> set[str]:
    chains = [chain.to_dict()] if chain is not None else []
    for record in records:
        chains += [record.chain, *record.chains.values()]
    return {str(s.get("tool", ""))[len("agent:"):] for c in chains for s in c.get("steps", ())
            if str(s.get("tool", "")).startswith("agent:")}


def run_id_of(run: Any) -> str:
    if isinstance(run, str):
        return run
    run_id = getattr(run, "run_id", None)
    if isinstance(run_id, str):
        return run_id
    raise ExperimentError([f"{run!r} is not a run: give run ids, Run handles or RunRecords "
                           "(runtime.runs(...))"])
