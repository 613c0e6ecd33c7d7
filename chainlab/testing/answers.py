"""The toolbox of a replay: every tool answers from a run's recorded calls
(:mod:`chainlab.testing.replay` drives the replay; its docstring says how answers are
matched). A replayed tool keeps the original's schemas and side-effect contract and gets
another body; a remote job (:class:`~chainlab.tools.job.JobTool`) also gets another ``poll``
(the recorded end, answered for the recorded handle), ``cancel`` (nothing to cancel) and no
``find``, so a replay never reaches the job's backend.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chainlab._json import NotJSONError, to_json_value
from chainlab.errors import ReplayError, ToolError
from chainlab.events import EventKind
from chainlab.events.usage import add_usage
from chainlab.runtime.history.fork_plan import same
from chainlab.runtime.preparing import toolbox_of
from chainlab.testing.recording import RecordedCall, Recording
from chainlab.testing.replay_agent import RecordedModel, replay_agents
from chainlab.tools import CallContext, Tool, Toolbox
from chainlab.tools.job import JobStatus, JobTool

if TYPE_CHECKING:
    from chainlab.runtime import Run
    from chainlab.store.base import Store

__all__ = ["Answers", "ReplayMismatch", "args_diff", "replay", "replay_toolbox", "resolve"]

K = EventKind
_CTX = "_chainlab_replay_ctx"  # the context parameter of a replayed tool that had none


class ReplayMismatch(ToolError):
    """A replayed tool was called in a way the recording never saw (never retried)."""

    kind = "permanent"


class _Replayed(ToolError):
    """A recorded error, raised again with its recorded kind and message."""

    def __init__(self, message: str, kind: str = "execution_failed",
                 before_effect: bool = False):
        super().__init__(message, before_effect=before_effect)
        self.kind = kind


class Answers:
    """The recorded calls of one run, by step and kind, consumed in order."""

    def __init__(self, calls: Sequence[RecordedCall]):
        self.left: dict[tuple[str, str], list[RecordedCall]] = {}
        self.seen: dict[tuple[str, str], list[RecordedCall]] = {}
        self.jobs: dict[tuple[str, int], RecordedCall] = {}  # (step, attempt) -> its job
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
    return same(_normal(tool, recorded), now)  # as JSON values: 1 is not true, nor 1.0


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
    recording, toolbox = resolve(run_or_recording, toolbox, store)
    return replay_toolbox(recording, toolbox, live, Answers(recording.calls))


def resolve(what: Any, toolbox: Toolbox | None, store: Store | None
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
    return recording, toolbox_of(toolbox, recording.meta, recording.run_id)  # (its ad-hoc
    # agent, if it had one: its turns then answer from the recording as a registered one's)


def replay_toolbox(recording: Recording, toolbox: Toolbox, live: Iterable[str],
             answers: Answers) -> Toolbox:
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
    tools = {tool.name: tool for tool in out}
    for agent in replay_agents(toolbox, RecordedModel(recording.turns), live, tools):
        out.add_agent(agent.agent)  # its model's turns answer from the recording too
    return out


def _replayed(tool: Tool, answers: Answers, code: str | None) -> Tool:
    twin = copy.copy(tool)  # same schemas and side-effect contract, another body
    param = tool.context_param or _CTX

    async def answer(**kwargs: Any) -> Any:
        ctx: CallContext = kwargs.pop(param)
        call = answers.take(tool, ctx, _normal(tool, kwargs))
        if call.usage and ctx.usage is not None:
            add_usage(ctx.usage, call.usage)
        if call.job is not None and call.job.get("handle") is not None:
            answers.jobs[(ctx.step_id, ctx.attempt)] = call  # its polls answer from it
            return call.job["handle"]  # a job's submit answered its handle
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
    if isinstance(tool, JobTool):  # (the testing layer's one kind switch: a job's backend)
        return _replayed_job(tool, twin, answers)
    return twin


def _replayed_job(tool: JobTool, twin: Tool, answers: Answers) -> Tool:
    """A job whose submit answers the recorded handle and whose poll answers the recorded
    end: the backend is never asked."""
    assert isinstance(twin, JobTool)
    async def poll(handle: Any, ctx: CallContext) -> JobStatus:
        call = answers.jobs.get((ctx.step_id, ctx.attempt))
        if call is None or call.job is None:
            raise ReplayMismatch(f"replay: job step {ctx.step_id!r} attempt {ctx.attempt} "
                                 "has no recorded handle to poll")
        return _recorded_status(call)

    async def cancel(handle: Any, ctx: CallContext) -> None:
        return None  # nothing runs anywhere

    twin.job = dataclasses.replace(tool.job, instance=None, poll=poll, cancel=cancel,
                                   find=None, _ctx={"poll": True, "cancel": True})
    return twin


def _recorded_status(call: RecordedCall) -> JobStatus:
    """What the job's backend said last, as recorded: its end (a job that timed out still
    runs; one whose polls failed fails its polls again)."""
    state = (call.job or {}).get("state")
    if state == "succeeded":
        return JobStatus.succeeded(call.output)
    if state == "failed":
        message = (call.error or "").removeprefix("the job failed: ")
        return JobStatus.failed(message, call.error_kind or "execution_failed")
    if state == "cancelled":
        return JobStatus.cancelled()
    if state == "not_found":
        return JobStatus.not_found()
    if state == "poll_failed":
        raise RuntimeError(f"replayed poll failure: {call.error}")
    return JobStatus.running()  # timed out (the replay's clock gets there too), or no end
