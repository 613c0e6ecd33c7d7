"""What an experiment's replay did compared with its recorded run, as data (DESIGN §22): one
row per run (:func:`compare`) and a readable diff (:func:`diff_text`). Pure: it reads two
folded runs (:class:`~chainlab.events.RunState`) and their records, nothing else.

A *call* is a step that ran (an attempt, or an answer from a recording): its tool and args.
Calls are matched by step id: one only in the replay was added, one only in the recorded run
was removed, one in both with other args had its args changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chainlab.events import RUN_TERMINAL, RunState, RunStatus, SkipReason, StepStatus
from chainlab.plan.inputs import select_output
from chainlab.plan.schema import Chain
from chainlab.runtime.history.fork_plan import same
from chainlab.store.base import RunRecord

__all__ = ["Outcome", "Side", "compare", "diff_text", "output_of"]

S = StepStatus
#: steps that did not run: no call to compare
_NOT_RUN = frozenset({S.PENDING, S.READY, S.SKIPPED, S.CANCELLED})


class Outcome:
    """The replay's outcome in a row (strings, the table's vocabulary)."""

    SAME = "same"  # same status, output and calls
    CHANGED = "changed"  # something differs (see the row's columns)
    NEEDS_LIVE_EFFECT = "needs_live_effect"  # stopped at a new side effect, not made
    WAITING = "waiting"  # waits for a person (a live= call to approve)
    UNFINISHED = "unfinished"  # not finished (resumable: ``runtime.resume``)
    NOT_STARTED = "not_started"  # no replay was made yet (the experiment was interrupted)


@dataclass(frozen=True, slots=True)
class Side:
    """One run of a row: its record and folded state."""

    record: RunRecord
    state: RunState


def output_of(side: Side) -> Any:
    """The run's output: the chain's declared ``output``, else its last top-level step's."""
    chain = Chain.from_dict(side.record.chain)
    if chain.output is not None:
        return select_output(chain, side.state.outputs, side.record.context)
    top = [s for s in side.state.completion if "/" not in s]
    return side.state.steps[top[-1]].output if top else None


def calls_of(state: RunState) -> dict[str, tuple[str, Any]]:
    """``{step_id: (tool, args)}`` of the steps that ran."""
    tools = {rec.step_id: rec.tool for rec in state.attempts if rec.kind == "call"}
    out = {}
    for step_id, st in state.steps.items():
        if st.status in _NOT_RUN or st.args is None:
            continue
        tool = (st.reused or {}).get("tool") or tools.get(step_id) or "?"
        out[step_id] = (str(tool), st.args)
    return out


def needs_live_effect(state: RunState) -> list[str]:
    """The calls the replay stopped at (not made): ``tool(args)`` each."""
    return [_call(st.step_id, (st.preview or {}).get("tool"), st.args)
            for st in state.steps.values()
            if st.status == S.SKIPPED and st.reason == SkipReason.NEEDS_LIVE_EFFECT]


def compare(before: Side, after: Side | None,
            side_effecting: Callable[[str], bool]) -> dict[str, Any]:
    """One row of the experiment's table (the columns ``Experiment.table()`` shows)."""
    b = before.state
    row: dict[str, Any] = {
        "run": before.record.run_id, "new_run": None, "outcome": Outcome.NOT_STARTED,
        "changed": None, "status_before": str(b.status), "status_after": None,
        "output_before": output_of(before), "output_after": None,
        "calls_added": [], "calls_removed": [], "args_changed": [], "needs_live_effect": [],
        "effects_made": 0, **_measures(b, "before"), **_measures(None, "after")}
    if after is None:
        return row
    a = after.state
    old, new = calls_of(b), calls_of(a)
    row.update({
        "new_run": after.record.run_id, "status_after": str(a.status),
        "output_after": output_of(after),
        "calls_added": [_call(s, *new[s]) for s in new if s not in old],
        "calls_removed": [_call(s, *old[s]) for s in old if s not in new],
        "args_changed": [f"{s}: {_args_diff(old[s][1], new[s][1])}" for s in new
                         if s in old and not same(old[s][1], new[s][1])],
        "needs_live_effect": needs_live_effect(a),
        "effects_made": sum(1 for s, (tool, _) in new.items()
                            if a.steps[s].reused is None and side_effecting(tool)),
        **_measures(a, "after")})
    changed = bool(row["calls_added"] or row["calls_removed"] or row["args_changed"]
                   or row["status_before"] != row["status_after"]
                   or not same(row["output_before"], row["output_after"]))
    row["changed"] = changed
    if row["needs_live_effect"]:
        row["outcome"] = Outcome.NEEDS_LIVE_EFFECT
    elif a.status == RunStatus.SUSPENDED:
        row["outcome"] = Outcome.WAITING
    elif a.status not in RUN_TERMINAL:
        row["outcome"] = Outcome.UNFINISHED
    else:
        row["outcome"] = Outcome.CHANGED if changed else Outcome.SAME
    return row


def _measures(state: RunState | None, when: str) -> dict[str, Any]:
    usage: Mapping[str, Any] = state.usage if state is not None else {}
    span = None
    if state is not None and state.started_at is not None and state.ended_at is not None:
        span = round(state.ended_at - state.started_at, 6)
    return {f"tokens_{when}": usage.get("tokens", 0) if state is not None else None,
            f"cost_{when}": usage.get("cost", 0) if state is not None else None,
            f"makespan_{when}": span}


def diff_text(before: Side, after: Side | None) -> str:
    """A readable diff of the replay against its recorded run: status, output, each step
    whose args, output or status changed, and the model's answers."""
    b = before.state
    head = f"run {before.record.run_id} (recorded)"
    if after is None:
        return f"{head}: no replay yet (the experiment did not reach it)"
    a = after.state
    lines = [f"{head} -> {after.record.run_id} (replay): {b.status} -> {a.status}"]
    out_b, out_a = output_of(before), output_of(after)
    if not same(out_b, out_a):
        lines.append(f"  output: {_short(out_b)} -> {_short(out_a)}")
    for step_id in _ordered(b, a):
        sb, sa = b.steps.get(step_id), a.steps.get(step_id)
        if sb is None and sa is not None:
            lines.append(f"  + {step_id}: {sa.status} args {_short(sa.args)} output "
                         f"{_short(sa.output)}")
            continue
        if sa is None and sb is not None:
            lines.append(f"  - {step_id}: {sb.status} (not in the replay)")
            continue
        assert sb is not None and sa is not None
        parts = []
        if sb.status != sa.status:
            parts.append(f"{sb.status} -> {sa.status}")
        if sa.reason == SkipReason.NEEDS_LIVE_EFFECT:
            parts.append("needs_live_effect: NOT made")
        if not same(sb.args, sa.args) and sa.args is not None:
            parts.append(f"args {_args_diff(sb.args or {}, sa.args)}")
        if not same(sb.output, sa.output) and sa.status == S.SUCCEEDED:
            parts.append(f"output {_short(sb.output)} -> {_short(sa.output)}")
        if sa.reused and sa.reused.get("decision") == "recorded":
            parts.append(f"answered from the recording of {sa.reused.get('source_run')}")
        if parts:
            lines.append(f"  ~ {step_id}: " + "; ".join(parts))
    answers_b, answers_a = _answers(b), _answers(a)
    for key in sorted(set(answers_b) | set(answers_a)):
        if answers_b.get(key) != answers_a.get(key):
            lines.append(f"  model {key[0]} turn {key[1]}: {_short(answers_b.get(key))} -> "
                         f"{_short(answers_a.get(key))}")
    if len(lines) == 1:
        lines.append("  nothing changed")
    return "\n".join(lines)


def _answers(state: RunState) -> dict[tuple[str, int], Any]:
    """``{(agent step, turn): the model's text or calls}`` of every recorded turn."""
    out: dict[tuple[str, int], Any] = {}
    for parent, payload in state.growth:
        if "turn" in payload and "answer" in payload:
            answer = payload["answer"]
            out[(parent, payload["turn"])] = answer.get("content") or [
                f"{c.get('function')}({c.get('arguments')})" for c in answer.get("calls", ())]
    return out


def _ordered(b: RunState, a: RunState) -> list[str]:
    seen = dict.fromkeys([*b.steps, *a.steps])
    return list(seen)


def _call(step_id: str, tool: Any, args: Any) -> str:
    return f"{step_id}={tool}({_short(args, 60)})"


def _args_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if not same(old.get(k), new.get(k)))
    return ", ".join(f"{k}: {_short(old.get(k), 30)} -> {_short(new.get(k), 30)}"
                     for k in keys)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
