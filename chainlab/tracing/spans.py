"""Spans in OpenTelemetry's GenAI conventions, made from a run's EVENTS (DESIGN §24).

:class:`RunTracer` is a subscriber of one run on the side of the process that drives it: it
reads the events the run emits (the same ones the store keeps and every view reads) and
turns them into spans. Nothing in the engine calls it; an event that lacks what a span needs
gets it in its payload instead (an agent turn's ``step_started`` names its ``model``).

One trace per run (:mod:`chainlab.tracing.context`):

* ``run CHAIN``, the root: emitted once, by the process that sees the run end, with the
  run's recorded start time and, as span events, what people and limits did to it over its
  whole life (decisions with who made them, ``in_doubt``, compensations, budget stops),
  read back from the log for the part driven by earlier processes;
* ``step ID``, one per step attempt (``chainlab.step.id``, ``chainlab.tool``,
  ``chainlab.attempt``, ``chainlab.args_hash``, ``error.type``; the args only with
  ``capture_content``), a child of the root;
* ``invoke_agent NAME`` for an agent step (durable, like the root), with ``chat MODEL`` for
  each model turn (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``gen_ai.response.finish_reasons``) and ``execute_tool NAME`` for each
  call of the model's that became a step (``gen_ai.tool.name``, ``gen_ai.tool.call.id``);
* ``compensate ID`` for each compensation.

A span that a process started and never ended (it was killed) is lost with that process;
the durable ones are not, since they are emitted by whoever ends them.

Message contents (args, outputs, the model's messages) go to spans only with
``capture_content=True``, and always through
:meth:`chainlab.tracing.tracer.Tracing.content` (the redaction seam: ``redact`` is applied
first; a redactor that raises keeps the content out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import (
    SpanContext,
    SpanKind,
    TraceFlags,
)

from chainlab.agent.turns import turn_request, turns_of
from chainlab.events import RUN_END_KINDS, Event, EventKind
from chainlab.tools import args_hash
from chainlab.tracing.context import RunTrace, run_trace
from chainlab.tracing.tracer import Pending, Tracing

if TYPE_CHECKING:
    from chainlab.events import RunState
    from chainlab.store.base import RunRecord, Store

__all__ = ["RunTracer", "attach"]

log = logging.getLogger("chainlab.tracing")
K = EventKind
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: how much of an error's text a span's status keeps
_DESCRIPTION = 300


class RunTracer:
    """One run's events turned into spans (see the module docstring): a subscriber of the
    run in the process that drives it."""

    def __init__(self, tracing: Tracing, run_id: str, record: RunRecord, state: RunState,
                 store: Store, *, taken_up: bool = False):
        self.tracing = tracing
        self.run_id = run_id
        self.record = record
        self.state = state
        self.store = store
        self.trace: RunTrace = run_trace(run_id, record.meta)
        self.root = SpanContext(self.trace.trace_id, self.trace.root_span_id, is_remote=True,
                                trace_flags=_SAMPLED)
        # (what, step id, attempt) -> the span it will be when it ends
        self.open: dict[tuple[str, str, int], Pending] = {}
        self.agents: set[str] = set()  # agent steps seen taking a turn here
        self.frames: dict[str, Any] = {}  # an agent step's last recorded request frame
        self.marks: list[tuple[str, float, dict[str, Any]]] = []  # the root's span events
        # a run taken up here (resumed, taken over): the events before this drive were seen
        # by other processes (read back at the end for the root's span events)
        self.earlier = state.last_seq if taken_up else 0
        self.ended = False
        parent = self.trace.parent
        self.parent = SpanContext(parent.trace_id, parent.span_id, is_remote=True,
                                  trace_flags=TraceFlags(parent.flags)) if parent else None
        self.sampled = tracing.sampled(self.trace.trace_id, self.parent)

    def __call__(self, ev: Event) -> None:
        if not self.sampled:
            return
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:
            handler(self, ev)
        if ev.kind in _MARKED or ev.payload.get("resolved"):
            mark = _mark(ev)
            if mark is not None:
                self.marks.append(mark)
        if ev.kind in RUN_END_KINDS:
            self._end_run(ev)

    # ------------------------------------------------------------------ attempts
    def _step_started(self, ev: Event) -> None:
        p, step_id, attempt = ev.payload, str(ev.step_id), int(ev.attempt or 0)
        attrs: dict[str, Any] = {"chainlab.run.id": self.run_id, "chainlab.step.id": step_id,
                                 "chainlab.attempt": attempt}
        tool = p.get("tool")
        if tool:
            attrs["chainlab.tool"] = tool
        args = p.get("args")
        if args is not None:
            attrs["chainlab.args_hash"] = args_hash(args)
        if "turn" in p:  # a model turn of an agent step
            self.agents.add(step_id)
            model = p.get("model") or "unknown"
            attrs.update({"gen_ai.operation.name": "chat", "chainlab.turn": p["turn"],
                          "gen_ai.request.model": model,
                          # (an agent asks an OpenAI-compatible endpoint unless converted
                          # from another SDK: then its model is its SDK's, unnamed here)
                          "gen_ai.provider.name": "openai" if p.get("model") else "unknown",
                          "gen_ai.agent.name": str(tool or "").removeprefix("agent:")})
            if self.tracing.capture_content:  # (the request rebuilt, as every reader does)
                frame = self.frames[step_id] = p.get("frame") or self.frames.get(step_id, {})
                self._content(attrs, "gen_ai.input.messages", turn_request(
                    self.state, ev, frame).get("messages"))
            self.open[("attempt", step_id, attempt)] = Pending(
                f"chat {model}", self._agent_span(step_id), ev.ts, attrs, SpanKind.CLIENT)
            return
        call = self._call_of(step_id)
        self._content(attrs, "gen_ai.tool.call.arguments" if call else "chainlab.args", args)
        if call is not None:  # a call the model asked for
            agent_step, call_id, name = call
            attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                          "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"})
            pending = Pending(f"execute_tool {name}", self._agent_span(agent_step), ev.ts,
                              attrs)
        else:
            pending = Pending(f"step {step_id}", self.root, ev.ts, attrs)
        self.open[("attempt", step_id, attempt)] = pending

    def _content(self, attrs: dict[str, Any], key: str, value: Any) -> None:
        text = self.tracing.content(value)
        if text is not None:
            attrs[key] = text

    def _attempt_ended(self, ev: Event) -> None:
        step_id, p = str(ev.step_id), ev.payload
        pending = self.open.pop(("attempt", step_id, int(ev.attempt or 0)), None)
        if pending is not None:
            ok = ev.kind in (K.STEP_SUCCEEDED, K.STEPS_ADDED)
            if ev.kind == K.STEPS_ADDED or "answer" in p:  # a model turn's answer
                self._answer(pending.attrs, p)
            elif ok:
                key = "gen_ai.tool.call.result" if self._call_of(step_id) else "chainlab.output"
                self._content(pending.attrs, key, p.get("output"))
            self._close(pending, ev, ok)
        if ev.kind in _STEP_ENDS and self._is_agent(step_id):
            self._end_agent(step_id, ev)

    def _answer(self, attrs: dict[str, Any], p: Mapping[str, Any]) -> None:
        answer, usage = p.get("answer") or {}, p.get("usage") or {}
        for key, name in (("input_tokens", "gen_ai.usage.input_tokens"),
                          ("output_tokens", "gen_ai.usage.output_tokens")):
            if isinstance(usage.get(key), int):
                attrs[name] = usage[key]
        if usage.get("model"):
            attrs["gen_ai.response.model"] = str(usage["model"])
        if answer.get("finish_reason"):
            attrs["gen_ai.response.finish_reasons"] = (str(answer["finish_reason"]),)
        self._content(attrs, "gen_ai.output.messages", answer)

    def _close(self, pending: Pending, ev: Event, ok: bool, span_id: int | None = None
               ) -> None:
        """Make the span ``pending`` describes, ended by ``ev`` (``span_id``: a durable
        span's)."""
        error = None
        if not ok:
            p = ev.payload
            kind = p.get("error_kind") or str(ev.kind)
            pending.attrs["error.type"] = str(kind)
            pending.attrs["chainlab.outcome"] = str(ev.kind)
            error = str(p.get("error") or kind)[:_DESCRIPTION]
        self.tracing.emit(pending, self.trace.trace_id, span_id, ev.ts, error)

    def _timed_out(self, ev: Event) -> None:
        pending = self.open.get(("attempt", str(ev.step_id), int(ev.attempt or 0)))
        if pending is not None:
            pending.events.append(("chainlab.timed_out", ev.ts, {}))

    # ------------------------------------------------------------------ compensations
    def _compensation_started(self, ev: Event) -> None:
        step_id = str(ev.step_id)
        attrs = {"chainlab.run.id": self.run_id, "chainlab.step.id": step_id,
                 "chainlab.tool": str(ev.payload.get("tool") or ""),
                 "chainlab.attempt": int(ev.attempt or 0)}
        self.open[("compensation", step_id, int(ev.attempt or 0))] = Pending(
            f"compensate {step_id}", self.root, ev.ts, attrs)

    def _compensation_ended(self, ev: Event) -> None:
        pending = self.open.pop(("compensation", str(ev.step_id), int(ev.attempt or 0)), None)
        if pending is not None:
            self._close(pending, ev, ev.kind == K.COMPENSATION_SUCCEEDED)

    # ------------------------------------------------------------------ agents
    def _is_agent(self, step_id: str) -> bool:
        if step_id in self.agents:
            return True
        if self.state.growth and turns_of(self.state, step_id):
            self.agents.add(step_id)  # (its turns were taken by an earlier process)
            return True
        return False

    def _agent_span(self, step_id: str) -> SpanContext:
        return SpanContext(self.trace.trace_id, self.trace.span_id(f"step/{step_id}"),
                           is_remote=True, trace_flags=_SAMPLED)

    def _call_of(self, step_id: str) -> tuple[str, str, str] | None:
        """(agent step, the model's call id, tool) when ``step_id`` is a call the model of
        an agent step asked for, read from the recorded turn."""
        st = self.state.steps.get(step_id)
        parent = st.parent if st is not None else None
        if parent is None:
            return None
        for turn in reversed(turns_of(self.state, parent)):
            for made in turn.made:
                if made.step_id == step_id:
                    calls = turn.answer.calls
                    call_id = calls[made.index].call_id if made.index < len(calls) else ""
                    return parent, str(call_id), made.tool
        return None

    def _end_agent(self, step_id: str, ev: Event) -> None:
        first = next((a for a in self.state.attempts
                      if a.step_id == step_id and a.kind == "call"), None)
        st = self.state.steps.get(step_id)
        name = str(first.tool if first is not None and first.tool else step_id)
        name = name.removeprefix("agent:")
        attrs = {"gen_ai.operation.name": "invoke_agent", "chainlab.run.id": self.run_id,
                 "chainlab.step.id": step_id,
                 "chainlab.turns": len(turns_of(self.state, step_id)) + (
                     1 if ev.kind == K.STEP_SUCCEEDED else 0)}
        usage = (st.usage if st is not None else None) or {}
        for key in ("input_tokens", "output_tokens"):
            if isinstance(usage.get(key), int):
                attrs[f"gen_ai.usage.{key}"] = usage[key]
        attrs["gen_ai.agent.name"] = name
        pending = Pending(f"invoke_agent {name}", self.root,
                          first.started_at if first is not None else ev.ts, attrs)
        self._close(pending, ev, ev.kind == K.STEP_SUCCEEDED,
                    self.trace.span_id(f"step/{step_id}"))

    # ------------------------------------------------------------------ the root
    def _end_run(self, ev: Event) -> None:
        if self.ended:
            return
        self.ended = True
        attrs = {"chainlab.run.id": self.run_id, "chainlab.chain": self.record.chain_name,
                 "chainlab.run.status": str(ev.kind).removeprefix("run_")}
        usage = self.state.usage if isinstance(self.state.usage, dict) else {}
        for key in ("input_tokens", "output_tokens"):
            if isinstance(usage.get(key), int):
                attrs[f"gen_ai.usage.{key}"] = usage[key]
        pending = Pending(f"run {self.record.chain_name}", self.parent, self.record.created_at,
                          attrs, events=[*self._earlier_marks(), *self.marks])
        self._close(pending, ev, ev.kind == K.RUN_SUCCEEDED, self.trace.root_span_id)

    def _earlier_marks(self) -> list[tuple[str, float, dict[str, Any]]]:
        """The root's span events from the part of the run earlier processes drove (read
        from the log once, at the end: they committed it before this process took over)."""
        if not self.earlier:
            return []
        try:
            events = self.store.load_events(self.run_id)
        except Exception as exc:  # (a trace is not worth failing a run for)
            log.warning("run %s: its earlier events could not be read for its trace (%s)",
                        self.run_id, exc)
            return []
        return [m for e in events if e.seq <= self.earlier
                for m in (_mark(e),) if m is not None]


#: the kinds that end a step (an agent step's ``invoke_agent`` span ends with it)
_STEP_ENDS = frozenset({K.STEP_SUCCEEDED, K.STEP_FAILED, K.STEP_CANCELLED, K.STEP_IN_DOUBT,
                        K.STEP_SKIPPED, K.STEP_REJECTED})

#: the kinds :func:`_mark` may make a span event of (besides a person's resolution)
_MARKED = frozenset({K.STEP_APPROVED, K.STEP_REJECTED, K.STEP_IN_DOUBT,
                     K.COMPENSATION_SUCCEEDED, K.COMPENSATION_FAILED,
                     K.STEP_WAITING_CONFIRMATION})

_HANDLERS: dict[EventKind, Callable[[RunTracer, Event], None]] = {
    K.STEP_STARTED: RunTracer._step_started,
    K.STEP_SUCCEEDED: RunTracer._attempt_ended,
    K.STEP_FAILED: RunTracer._attempt_ended,
    K.STEP_RETRY_SCHEDULED: RunTracer._attempt_ended,
    K.STEP_IN_DOUBT: RunTracer._attempt_ended,
    K.STEP_CANCELLED: RunTracer._attempt_ended,
    K.STEP_REJECTED: RunTracer._attempt_ended,  # (no attempt open: an agent step's end)
    K.STEP_SKIPPED: RunTracer._attempt_ended,
    K.STEPS_ADDED: RunTracer._attempt_ended,
    K.STEP_TIMED_OUT: RunTracer._timed_out,
    K.COMPENSATION_STARTED: RunTracer._compensation_started,
    K.COMPENSATION_SUCCEEDED: RunTracer._compensation_ended,
    K.COMPENSATION_FAILED: RunTracer._compensation_ended,
}


def _mark(ev: Event) -> tuple[str, float, dict[str, Any]] | None:
    """The root's span event for ``ev``, if it is one: a decision (who made it), a step in
    doubt, a compensation's outcome, a budget stop, a person's resolution."""
    p, where = ev.payload, {"chainlab.step.id": str(ev.step_id)}
    kind = ev.kind
    if kind in (K.STEP_APPROVED, K.STEP_REJECTED):
        return "chainlab.decision", ev.ts, {
            **where, "chainlab.decision": "approved" if kind == K.STEP_APPROVED else "rejected",
            "chainlab.decision.by": str(p.get("by") or "unknown")}
    if p.get("resolved") and kind in (K.STEP_SUCCEEDED, K.STEP_FAILED, K.STEP_READY):
        return "chainlab.decision", ev.ts, {
            **where, "chainlab.decision": f"resolved:{kind.removeprefix('step_')}",
            "chainlab.decision.by": str(p.get("by") or "unknown")}
    if kind == K.STEP_IN_DOUBT:
        return "chainlab.in_doubt", ev.ts, {**where, "error.type": str(
            p.get("error_kind") or ""), "chainlab.reason": str(p.get("reason") or "")}
    if kind in (K.COMPENSATION_SUCCEEDED, K.COMPENSATION_FAILED):
        return "chainlab.compensation", ev.ts, {
            **where, "chainlab.outcome": kind.removeprefix("compensation_")}
    if kind == K.STEP_WAITING_CONFIRMATION and p.get("reason") == "budget_exceeded":
        return "chainlab.budget_stop", ev.ts, where
    return None


def attach(tracing: Tracing, run_id: str, record: RunRecord, state: RunState, store: Store,
           subscribers: list[Callable[[Event], None]], *, taken_up: bool = False) -> None:
    """Trace run ``run_id`` with ``tracing`` from its next event on: a :class:`RunTracer`
    among its ``subscribers`` (once per drive: a second attach does nothing). ``taken_up``:
    the run was driven by another process before (resumed, taken over)."""
    if any(isinstance(cb, RunTracer) for cb in subscribers):
        return
    subscribers.append(RunTracer(tracing, run_id, record, state, store, taken_up=taken_up))
