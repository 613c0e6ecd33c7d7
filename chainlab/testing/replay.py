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
args against the recorded ones. A replayed side-effecting tool is never really called.
``live=["tool"]`` keeps named tools real, to test a changed tool against the recorded rest.
An agent step's model turns answer from the recording (:mod:`.replay_agent`): a request that
differs from the recorded one (a changed tool output, changed instructions) fails the step
with a diff of the two.

:func:`replay_run` drives the replay: it starts the recorded chain (same context, options
and run id) on an in-memory store and a manual clock, and when the run waits for a person it
applies the recorded decisions (approvals, edited args included, rejections, resolutions of
in-doubt steps, a raised budget, a ``run.rollback()`` where the run had got to) in recorded
order; a cancel is not replayed (when it struck cannot be). A recorded fork replays from its seed
(its reused outputs and confirm-first set, as the fork wrote them), so no parent is needed.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chainlab._json import NotJSONError, to_json_value
from chainlab.errors import ChainlabError, PlanError, ReplayError, RunNotFoundError, ToolError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, RunStatus
from chainlab.events.usage import add_usage
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.testing.recording import RecordedCall, Recording, expected_of
from chainlab.testing.replay_agent import RecordedModel, replay_agents
from chainlab.tools import CallContext, Tool, Toolbox

if TYPE_CHECKING:
    from chainlab.runtime import Run
    from chainlab.store.base import Store

__all__ = ["RecordedCall", "Recording", "Replayed", "replay", "replay_run"]

K = EventKind
_CTX = "_chainlab_replay_ctx"  # the context parameter of a replayed tool that had none


# ============================================================================ the toolbox
class ReplayMismatch(ToolError):
    """A replayed tool was called in a way the recording never saw (never retried)."""

    kind = "permanent"


class _Replayed(ToolError):
    """A recorded error, raised again with its recorded kind and message."""

    def __init__(self, message: str, kind: str = "execution_failed",
                 before_effect: bool = False):
        super().__init__(message, before_effect=before_effect)
        self.kind = kind


class _Answers:
    """The recorded calls of one run, by step and kind, consumed in order."""

    def __init__(self, calls: Sequence[RecordedCall]):
        self.left: dict[tuple[str, str], list[RecordedCall]] = {}
        self.seen: dict[tuple[str, str], list[RecordedCall]] = {}
        for call in calls:
            self.left.setdefault((call.step_id, call.kind), []).append(call)
            self.seen.setdefault((call.step_id, call.kind), []).append(call)

    def take(self, tool: Tool, ctx: CallContext, args: dict[str, Any]) -> RecordedCall:
        key = (ctx.step_id, ctx.kind)
        left = self.left.get(key, [])
        for i, call in enumerate(left):
            if _same_args(tool, call.args, args):
                del left[i]
                return call
        seen = self.seen.get(key, [])
        what = "compensation of step" if ctx.kind == "compensation" else "step"
        if not seen:
            raise ReplayMismatch(f"replay: the recording has no call of {what} "
                                 f"{ctx.step_id!r} (tool {tool.name!r}); the chain or a "
                                 "tool now does something the recorded run did not")
        if not left:
            raise ReplayMismatch(f"replay: {what} {ctx.step_id!r} was called more often "
                                 f"than the {len(seen)} recorded call(s)")
        raise ReplayMismatch(
            f"replay: {what} {ctx.step_id!r} (tool {tool.name!r}) was called with args "
            "the recording never saw:\n" + args_diff(left[0].args, args))


def _normal(tool: Tool, args: Mapping[str, Any]) -> Any:
    """Args as the tool's body receives them, as JSON (recorded args are the resolved
    ones, before validation: compare like with like)."""
    try:
        values = tool.validate_args(args)
    except ValidationError:
        values = dict(args)
    values.pop(tool.context_param or "", None)
    values.pop(_CTX, None)
    try:
        return to_json_value(values)
    except NotJSONError:
        return repr(values)


def _same_args(tool: Tool, recorded: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    return _normal(tool, recorded) == now


def args_diff(recorded: Any, now: Any) -> str:
    """A unified diff of recorded args against the args of this call: one line per arg, its
    value as compact JSON, every line shown (args are small)."""
    a, b = _arg_lines(recorded), _arg_lines(now)
    return "\n".join(difflib.unified_diff(a, b, "recorded args", "args now", lineterm="",
                                         n=max(len(a), len(b))))


def _arg_lines(args: Any) -> list[str]:
    if not isinstance(args, Mapping):
        return [json.dumps(args, sort_keys=True, default=repr)]
    return [f"{key}: {json.dumps(value, sort_keys=True, separators=(',', ':'), default=repr)}"
            for key, value in sorted(args.items())]


def replay(run_or_recording: Run | Recording | str, *, toolbox: Toolbox | None = None,
           store: Store | None = None, live: Iterable[str] = ()) -> Toolbox:
    """A toolbox whose tools answer from the recorded attempts of a run (the module
    docstring says how). ``run_or_recording``: a Run (its runtime's toolbox and store are
    used), a :class:`Recording`, or a run id in ``store``. ``toolbox``: the tools the run
    was made with (their schemas and contracts; ``live`` ones are called for real).

    Raises RunNotFoundError, ReplayError (no toolbox to take the tools' contracts from, a
    ``live`` name that is not a tool, a recorded tool missing from the toolbox)."""
    recording, toolbox = _resolve(run_or_recording, toolbox, store)
    return _toolbox(recording, toolbox, live, _Answers(recording.calls))


def _resolve(what: Any, toolbox: Toolbox | None, store: Store | None
             ) -> tuple[Recording, Toolbox]:
    if isinstance(what, Recording):
        recording = what
    elif isinstance(what, str):
        if store is None:
            raise ReplayError(f"replay({what!r}): pass store= (the store that holds the run)")
        recording = Recording.from_store(store, what)
    else:  # a Run handle
        recording = Recording.from_store(what.runtime.store, what.run_id)
        toolbox = toolbox or what.runtime.toolbox
    if toolbox is None:
        raise ReplayError("replay needs the toolbox the run was made with (toolbox=...): "
                          "its tools' schemas and side-effect contracts decide how the "
                          "replay goes", run_id=recording.run_id)
    return recording, toolbox


def _toolbox(recording: Recording, toolbox: Toolbox, live: Iterable[str],
             answers: _Answers) -> Toolbox:
    live = set(live)
    unknown = sorted(live - set(toolbox.names()))
    if unknown:
        raise ReplayError(f"live={unknown!r}: no such tool in toolbox {toolbox.name!r} "
                          f"(it has {', '.join(toolbox.names())})", run_id=recording.run_id)
    missing = [t for t in recording.tools_used() if t not in toolbox]
    if missing:
        raise ReplayError(f"the recorded run {recording.run_id!r} called {missing!r}, which "
                          f"toolbox {toolbox.name!r} no longer has; add the tool back or "
                          "export a new run", run_id=recording.run_id)
    codes = {c.tool: c.code for c in recording.calls if c.code}
    for ev in recording.seed:  # a fork reused outputs of this code: keep it reusable
        payload = ev.get("payload") or {}
        if ev.get("kind") == K.STEP_REUSED and payload.get("tool") and payload.get("code"):
            codes.setdefault(payload["tool"], payload["code"])
    out = Toolbox(f"replay:{toolbox.name}")
    for tool in toolbox:
        out.add(tool if tool.name in live else _replayed(tool, answers, codes.get(tool.name)))
    for name, chain in toolbox.chains.items():
        out.chains[name] = chain
    for agent in replay_agents(toolbox, RecordedModel(recording.turns), live):
        out.add_agent(agent.agent)
    return out


def _replayed(tool: Tool, answers: _Answers, code: str | None) -> Tool:
    twin = copy.copy(tool)  # same schemas and side-effect contract, another body
    param = tool.context_param or _CTX

    async def answer(**kwargs: Any) -> Any:
        ctx: CallContext = kwargs.pop(param)
        call = answers.take(tool, ctx, _normal(tool, kwargs))
        if call.usage and ctx.usage is not None:
            add_usage(ctx.usage, call.usage)
        if call.fate == "succeeded":
            return call.output
        unsafe = tool.side_effects and not tool.idempotent
        raise _Replayed(call.error or "replayed failure", call.error_kind or "execution_failed",
                        before_effect=not (unsafe and call.fate == "in_doubt"))

    twin.fn = answer
    twin.is_async = True
    twin.context_param = param
    twin.reconcile = None  # nothing to ask the world: nothing happened in it
    if code is not None:
        twin.fingerprint = code
    return twin


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
        if want != got:
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

    recording, toolbox = _resolve(recording, toolbox, store)
    answers = _Answers(recording.calls)
    tools = _toolbox(recording, toolbox, live, answers)
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
            run = await _start_fork(runtime, recording)
        else:
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


async def _start_fork(runtime: Any, recording: Recording) -> Run:
    """A recorded fork, replayed from the events it was seeded with (no parent needed)."""
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
