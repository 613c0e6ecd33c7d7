"""Replay a recorded run as a test: every tool answers from the run's recorded attempts.

    from chainlab.testing.replay import Recording, replay, replay_run

    recording = Recording.from_store(store, run_id)        # or Recording.load("x.json")
    tools = replay(recording, toolbox=toolbox, live=["parse"])  # a Toolbox
    replayed = await replay_run(recording, toolbox, live=["parse"])
    replayed.assert_same()          # same statuses, outputs and confirmation points

A replayed tool has the original's schemas and side-effect contract (so validation, retry,
in_doubt, confirmation and compensation go exactly as they went), but its body answers from
the recording, matched by step id, kind (call or compensation) and the validated args: the
recorded output or the recorded error (its kind and message), in recorded order, so a flaky
tool's failure then success replays as such; the usage it reported is reported again. A
call with args the recording never saw fails the step (``permanent``) with a diff of the
args against the recorded ones. A replayed side-effecting tool is never really called, and a
remote job's backend is never asked: its submit answers the recorded handle, its polls the
recorded end (:mod:`chainlab.testing.answers` builds the toolbox). ``live=["tool"]`` keeps
named tools real, to test a changed tool against the recorded rest. An agent step's model
turns answer from the recording (:mod:`.replay_agent`): a request that differs from the
recorded one (a changed tool output, changed instructions) fails the step with a diff.

:func:`replay_run` drives the replay: it starts the recorded chain (same context, options
and run id) on an in-memory store and a manual clock, from the recorded ``run_started`` (so
the release order and a budget's estimates are the recorded ones: a replay has no history),
and when the run waits for a person it applies the recorded decisions (approvals, edited
args included, rejections, resolutions of in-doubt steps, a raised budget, a
``run.rollback()`` where the run had got to) in recorded order; a cancel is not replayed
(when it struck cannot be). A recorded fork replays from its seed (its reused outputs and
confirm-first set, as the fork wrote them), so no parent is needed. Statuses and outputs are
compared as JSON values, type included: ``1`` is not ``true`` and ``2`` is not ``2.0``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chainlab.errors import ChainlabError, PlanError, ReplayError, RunNotFoundError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, RunStatus
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.history.fork_plan import same
from chainlab.testing.answers import Answers, args_diff, replay, replay_toolbox, resolve
from chainlab.testing.recording import RecordedCall, Recording, expected_of
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.runtime import Run
    from chainlab.store.base import Store

__all__ = ["RecordedCall", "Recording", "Replayed", "replay", "replay_run"]

K = EventKind


# ============================================================================ driving it
@dataclass
class Replayed:
    """A replay that ran: the new run, what the recording expected, and the differences."""

    run: Run
    recording: Recording
    state: RunState
    unused: list[RecordedCall]
    decisions_left: list[dict[str, Any]]
    refused: list[str] = field(default_factory=list)  # recorded approvals not given, why

    @property
    def actual(self) -> dict[str, Any]:
        return expected_of(self.state, self.run.event_list())

    def differences(self) -> str:
        """A readable account of what differs from the recording ('' when nothing does):
        a unified diff of statuses and outputs, then the step errors that say why."""
        want, got = _comparable(self.recording.expected), _comparable(self.actual)
        parts = []
        order = [s.get("id") for s in self.recording.chain.get("steps", [])]
        if not same(want, got):  # as JSON values: 1 is not true, 2 is not 2.0
            parts.append("\n".join(difflib.unified_diff(
                _lines(want, order), _lines(got, order),
                f"recorded run {self.recording.run_id}", "replay", lineterm="")))
            errors = [f"step {step_id!r} {st.status}: {st.error}"
                      for step_id, st in self.state.steps.items()
                      if st.error and str(st.status) != want["steps"].get(step_id, {})
                      .get("status")]
            if errors or self.refused:
                parts.append("why:\n" + "\n".join(errors + self.refused))
        if self.decisions_left and not self.refused:
            left = ", ".join(f"{d['action']} {d['step_id'] or 'the run'}"
                             for d in self.decisions_left)
            parts.append(f"recorded decisions the replay never asked for: {left}")
        return "\n\n".join(parts)

    def assert_same(self) -> None:
        """Raises AssertionError with :meth:`differences` when the replay differs."""
        diff = self.differences()
        if diff:
            raise AssertionError(f"the replay of run {self.recording.run_id!r} differs from "
                                 f"the recording:\n{diff}")


def _comparable(expected: Mapping[str, Any]) -> dict[str, Any]:
    return {k: expected.get(k) for k in ("status", "steps", "confirmations")}


def _lines(expected: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """One line per fact (the run's status, the confirmation points, each step's status
    and output as compact JSON, steps in declaration order): a diff of these names exactly
    what changed."""
    lines = [f"run: {expected['status']}",
             f"confirmations: {', '.join(expected['confirmations'] or ()) or '-'}"]
    steps = expected.get("steps") or {}
    rank = {step_id: i for i, step_id in enumerate(order)}
    for step_id in sorted(steps, key=lambda s: (rank.get(s, len(rank)), s)):
        st = steps[step_id]
        output = json.dumps(st.get("output"), sort_keys=True, separators=(",", ":"))
        lines.append(f"{step_id}: {st.get('status')} {output}")
    return lines


async def replay_run(recording: Recording | Run | str, toolbox: Toolbox | None = None, *,
                     store: Store | None = None, live: Iterable[str] = ()) -> Replayed:
    """Replay a recorded run to its end (or to where the recording stopped waiting for a
    person), applying the recorded decisions; see the module docstring.

    Raises ReplayError when the recorded chain no longer validates against ``toolbox``
    (naming the problems) or a recorded decision no longer fits."""
    from chainlab.runtime import Runtime
    from chainlab.store import MemoryStore
    from chainlab.testing import ManualClock

    recording, toolbox = resolve(recording, toolbox, store)
    answers = Answers(recording.calls)
    tools = replay_toolbox(recording, toolbox, live, answers)
    try:
        chain = Chain.from_dict(recording.chain)
        chains = {n: Chain.from_dict(c) for n, c in recording.chains.items()}
        raise_for_problems(chain, tools, chains={**tools.chains, **chains})
        options = RunOptions.model_validate(recording.options)
    except (PlanError, ValidationError) as exc:
        raise ReplayError(
            f"the recorded chain {recording.chain.get('name')!r} of run {recording.run_id!r} "
            f"no longer validates against toolbox {toolbox.name!r}:\n{exc}\nfix the chain "
            "or the tools, or record and export the run again", run_id=recording.run_id
        ) from None
    clock = ManualClock(recording.started_at)
    runtime = Runtime(tools, MemoryStore(), clock=clock, chains=chains,
                      id_factory=lambda: recording.run_id)
    decisions = list(recording.decisions)
    refused: list[str] = []
    async with runtime:
        if recording.seed:
            run = await _start_seeded(runtime, recording)
        else:  # a fixture written before runs kept their run_started
            run = await runtime.start(chain, recording.context, options,
                                      run_id=recording.run_id)
        while True:
            result = await run.wait()
            if decisions and decisions[0]["action"] == "rollback":
                decisions.pop(0)  # a person asked to undo the run once it had got here
                await run.rollback()
                continue
            if result.status in RUN_TERMINAL:
                break
            waiting = run.waiting()
            decision = next((d for d in decisions if d["step_id"] in waiting), None)
            if decision is None:
                break  # the recording stopped here too (or the replay differs: compared)
            st = run.state.steps[decision["step_id"]]
            if decision.get("asked_hash") not in (None, st.args_hash):
                # an approval is bound to the args it saw: never approve other ones
                refused.append(f"step {st.step_id!r} waits for approval of args the "
                               "recording never approved:\n"
                               + args_diff(_approved_args(recording, decision), st.args))
                break
            decisions.remove(decision)
            await _apply(run, decision, recording.run_id)
        state = run.state
        replayed = Replayed(run, recording, state,
                            [c for left in answers.left.values() for c in left], decisions,
                            refused)
    return replayed


def _approved_args(recording: Recording, decision: Mapping[str, Any]) -> Any:
    """The args the recorded approval saw (from the recorded call of that step)."""
    for call in recording.calls:
        if call.step_id == decision["step_id"] and call.kind == "call":
            return call.args
    return decision.get("args")


async def _start_seeded(runtime: Any, recording: Recording) -> Run:
    """A recorded run, replayed from its first events as they were recorded: run_started
    (release order, budget estimates) and a fork's seed (no parent needed)."""
    from chainlab.store.base import RunRecord

    now = recording.started_at
    record = RunRecord(run_id=recording.run_id, chain_name=recording.chain.get("name", ""),
                       status=RunStatus.RUNNING, epoch=1, created_at=now, updated_at=now,
                       chain=recording.chain, chains=recording.chains,
                       context=recording.context, options=recording.options,
                       meta={k: v for ev in recording.seed[:1]
                             for k, v in (ev.get("payload") or {}).items()
                             if k in ("forked_from", "forked_at_seq")})
    store = runtime.store
    store.create_run(record)
    events = [Event(recording.run_id, ev["seq"], ev["ts"], 1, EventKind(ev["kind"]),
                    ev.get("step_id"), ev.get("attempt"), ev.get("payload") or {})
              for ev in recording.seed]
    store.append(recording.run_id, 1, events)
    await store.flush(recording.run_id, 1)
    return await runtime.resume(recording.run_id)  # type: ignore[no-any-return]


async def _apply(run: Run, decision: Mapping[str, Any], run_id: str) -> None:
    action, step_id = decision["action"], decision["step_id"]
    try:
        if action == "approve":
            if "budget" in decision:
                await run.approve(step_id, decision.get("args"), decision.get("note"),
                                  budget=decision["budget"])
            else:
                await run.approve(step_id, decision.get("args"), decision.get("note"))
        elif action == "reject":
            await run.reject(step_id, decision.get("reason") or "rejected")
        else:
            await run.resolve(step_id, output=decision.get("output"),
                              retry=bool(decision.get("retry")),
                              fail=bool(decision.get("fail")), note=decision.get("note"))
    except (ChainlabError, RunNotFoundError) as exc:
        raise ReplayError(f"replay of run {run_id!r}: the recorded decision {dict(decision)!r} "
                          f"no longer fits: {exc}", run_id=run_id, step_id=step_id) from None
