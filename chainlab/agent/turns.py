"""An agent step's turns as its run recorded them: the read side of the ``agent`` kind
(DESIGN §18), for the kind itself (the conversation of the next turn) and for every view and
front end (the transcript, the JSON view, ``chainlab show``, the widget's drawing), which read
it here and never in the engine.

Each turn that asked for tool calls (or gave a final answer that did not fit) is ONE
``steps_added`` event of the agent step, its payload a :class:`TurnRecorded`: the engine
writes it through that type and every reader reads it back through it (no reader looks up
the payload's keys). A call's step is ``AGENT/TURN.N`` (``help/2.1``: turn 2, first call);
the engine grows it (``chainlab.runtime.engine.attempt.agent``).

Everything here reads run state and nothing else: the next turn's conversation
(:func:`turn_records`), the transcript (:func:`transcript`, :func:`turns_by_step`), the
calls' tools (:func:`call_tools`), a drawing's turns (:func:`turn_shapes`). A request is
never stored whole: ``step_started`` keeps its ``request_hash`` and, when it changed, its
:func:`request_frame`; ONE :func:`turn_request` rebuilds it for every reader (a replay's
diff, export-test, experiments, a trace's content). A log written before keeps ``request``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from chainlab.agent.conversation import PastTurn, messages, result_text
from chainlab.agent.model import ModelRequest, ModelTurn
from chainlab.errors import StoreError
from chainlab.events.status import STEP_TERMINAL, StepStatus
from chainlab.plan.parts import Step, names_an_agent

if TYPE_CHECKING:
    from chainlab.events import AttemptRecord, Event, RunState, StepState

__all__ = ["CallMade", "CallRefused", "TurnRecorded", "TurnShape", "agent_step_ids",
           "call_plan_step", "call_tools", "recorded_turns", "request_frame", "transcript",
           "turn_records", "turn_request", "turn_requests", "turn_shapes", "turns_by_step",
           "turns_of"]

#: ``kind`` of a turn's ``steps_added`` payload: the kind of the step that grew
AGENT_KIND = "agent"


@dataclass(frozen=True, slots=True)
class CallMade:
    """A call of the model's answer that became a step: the step's id, the call's position
    in the answer (``index``), the tool (``chain:NAME`` for a sub-chain) and its args."""

    step_id: str
    index: int
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallRefused:
    """A call of the model's answer refused to the model (no step was made): its position in
    the answer and why (the text the model is told)."""

    index: int
    error: str


@dataclass(frozen=True, slots=True)
class TurnRecorded:
    """One model turn of an agent step that did not end it, as its run records it: ONE
    ``steps_added`` event of the agent step (:meth:`to_dict` is its payload, written by the
    engine; :meth:`from_dict` reads it back, for the engine and every reader alike).

    ``turn`` (1, 2, ...), the ``attempt`` that asked, the model's ``answer``, the calls that
    became steps (``made``, in the model's order) and those refused to the model
    (``refused``), the ``feedback`` on a final answer that did not fit the agent's output
    schema (a turn with no call: it is sent back), the turn's ``usage`` as counted (the
    server's; or, with ``usage_unknown`` saying why the server's could not be taken, the
    step's expected usage), and, in a fork, the calls that wait for a person first
    (``confirm_first``: ``{step_id: card}``, read by the fold as for any growth).

    The stored shape, version 1 (every log written so far)::

        {"kind": "agent", "turn": 2, "attempt": 2,
         "answer": {"content", "calls": [{"id", "function", "arguments"}], "finish_reason"},
         "ids": ["help/2.1"], "calls": [{"index": 0, "tool": "label", "args": {...}}],
         "refused": [{"index": 1, "error": "..."}],
         "feedback": "..." (a turn sent back),
         "usage_unknown": "..." (the server's usage could not be taken),
         "usage": {...} (the server's, or counted as expected), "confirm_first": {...} (in a
         fork)}

    A version 1 payload carries no version key; a later version writes ``"v": N`` and a
    reader that does not know it refuses the log (StoreError) rather than misread it.
    """

    #: the version this chainlab writes (and the newest it reads)
    VERSION: ClassVar[int] = 1

    turn: int
    attempt: int
    answer: ModelTurn
    made: tuple[CallMade, ...] = ()
    refused: tuple[CallRefused, ...] = ()
    feedback: str | None = None
    usage: Mapping[str, Any] | None = None
    usage_unknown: str | None = None
    confirm_first: Mapping[str, Any] | None = None

    @property
    def ids(self) -> list[str]:
        """The steps the turn's calls became, in the model's order."""
        return [call.step_id for call in self.made]

    @property
    def fruitless(self) -> bool:
        """The turn made no step: every call was refused, or its final answer did not fit."""
        return not self.made

    def to_dict(self) -> dict[str, Any]:
        """The ``steps_added`` payload (JSON data; the shape above)."""
        out: dict[str, Any] = {
            "kind": AGENT_KIND, "turn": self.turn, "attempt": self.attempt,
            "answer": self.answer.to_dict(), "ids": self.ids,
            "calls": [{"index": c.index, "tool": c.tool, "args": c.args} for c in self.made],
            "refused": [{"index": r.index, "error": r.error} for r in self.refused]}
        if self.feedback is not None:
            out["feedback"] = self.feedback
        if self.usage_unknown is not None:
            out["usage_unknown"] = self.usage_unknown
        if self.usage:
            out["usage"] = dict(self.usage)
        if self.confirm_first:
            out["confirm_first"] = dict(self.confirm_first)
        return out

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> TurnRecorded:
        """A recorded turn read back from its payload. Raises StoreError for a version this
        chainlab does not know (a log written by a newer one)."""
        version = payload.get("v", 1)
        if version != cls.VERSION:
            raise StoreError(f"an agent turn recorded in version {version!r} of its record: "
                             f"this chainlab reads version {cls.VERSION}; upgrade chainlab "
                             "to read this run")
        usage, unknown = payload.get("usage"), payload.get("usage_unknown")
        return cls(
            payload["turn"], payload["attempt"],
            ModelTurn.from_dict(payload["answer"], usage, unknown),
            tuple(CallMade(step_id, spec["index"], spec["tool"], spec["args"])
                  for step_id, spec in zip(payload["ids"], payload["calls"], strict=True)),
            tuple(CallRefused(r["index"], r["error"]) for r in payload.get("refused", ())),
            payload.get("feedback"), usage, unknown, payload.get("confirm_first"))

    @staticmethod
    def is_turn(payload: Mapping[str, Any]) -> bool:
        """Whether a ``steps_added`` payload records an agent's turn (not a for_each step's
        instances)."""
        return "turn" in payload


#: what was read once from a run's state, by its object and a stamp (not made every turn)
_KEPT: dict[tuple[str, int], tuple[Any, Any, Any]] = {}


def _kept(what: str, obj: Any, stamp: Any, make: Any) -> Any:
    known = _KEPT.get((what, id(obj)))
    if known is not None and known[0] is obj and known[1] == stamp:
        return known[2]
    if len(_KEPT) >= 40_000:
        _KEPT.clear()
    value = make()
    _KEPT[what, id(obj)] = obj, stamp, value
    return value


def _read(payload: Mapping[str, Any]) -> TurnRecorded:
    turn: TurnRecorded = _kept("turn", payload, None, lambda: TurnRecorded.from_dict(payload))
    return turn


def recorded_turns(state: RunState) -> Iterator[tuple[str, TurnRecorded]]:
    """``(agent step id, turn)`` of every turn the run recorded, in the order recorded."""
    for parent, payload in state.growth:
        if TurnRecorded.is_turn(payload):
            yield parent, _read(payload)


def turns_of(state: RunState, step_id: str) -> list[TurnRecorded]:
    """The recorded turns of agent step ``step_id``, in order."""
    return [_read(payload) for parent, payload in state.growth if parent == step_id]


def turn_records(state: RunState, turns: Iterable[TurnRecorded]) -> list[PastTurn]:
    """The recorded turns as the next request needs them: each call's result read from its
    step (or its refusal), in the model's call order."""
    out = []
    for turn in turns:
        results = [""] * len(turn.answer.calls)
        for refused in turn.refused:
            results[refused.index] = f"error: {refused.error}"
        for made in turn.made:
            results[made.index] = _result(state.steps[made.step_id])
        out.append(PastTurn(turn.answer, results, turn.feedback))
    return out


def request_frame(instructions: str, request: ModelRequest) -> dict[str, Any]:
    """What a turn's request holds besides its conversation: the agent's ``instructions``
    and the body's other keys (``tools``, ``output_schema``, ``temperature``,
    ``max_tokens``); a turn's ``step_started`` records it (``frame``) when it changed."""
    frame = {key: value for key, value in request.body().items() if key != "messages"}
    return {"instructions": instructions, **frame}


def turn_requests(state: RunState, events: Iterable[Event]
                  ) -> Iterator[tuple[Event, dict[str, Any]]]:
    """Every model turn's ``step_started`` in ``events`` (the run's log, in order) with the
    request body it asked (:func:`turn_request`, each step's last recorded frame kept)."""
    frames: dict[str, Mapping[str, Any]] = {}
    grown: dict[str, list[TurnRecorded]] = {}  # (each step's turns read once)
    for ev in events:
        if ev.kind == "step_started" and "turn" in ev.payload and ev.step_id is not None:
            frame = frames[ev.step_id] = ev.payload.get("frame") or frames.get(ev.step_id, {})
            if ev.step_id not in grown:
                grown[ev.step_id] = turns_of(state, ev.step_id)
            yield ev, turn_request(state, ev, frame, grown[ev.step_id])


def turn_request(state: RunState, ev: Event, frame: Mapping[str, Any],
                 turns: list[TurnRecorded] | None = None) -> dict[str, Any]:
    """The request a turn's ``step_started`` asked, from ``frame`` (the step's last recorded
    frame), its args' request and the turns before it (``turns``, else ``state``'s): it
    hashes to the recorded ``request_hash`` unless the calls' results changed since."""
    p = ev.payload
    if "request" in p:  # written before: the whole request
        return p["request"]  # type: ignore[no-any-return]
    turns = turns_of(state, str(ev.step_id)) if turns is None else turns
    past = turn_records(state, turns[:int(p["turn"]) - 1])
    body = {key: value for key, value in frame.items() if key != "instructions"}
    return {"messages": messages(str(frame.get("instructions", "")),
                                 str((p.get("args") or {}).get("request", "")), past), **body}


def _result(st: StepState) -> str:
    edited = st.args if st.approval is not None and st.approval.get("edited") else None
    stamp = (str(st.status), st.output, st.error, st.error_kind, st.reason, edited)
    return _kept("told", st, stamp, lambda: result_text(  # type: ignore[no-any-return]
        stamp[0], output=st.output, error=st.error, error_kind=st.error_kind,
        reason=st.reason, edited_args=edited))


@functools.lru_cache(maxsize=1024)
def call_plan_step(tool: str) -> Step:
    """The plan step a call of ``tool`` stands for: only its tool is read (its args are the
    node's, its id the node's); one per tool name (a pydantic model costs ~0.5 ms to make)."""
    return Step(id="call", tool=tool)


def transcript(state: RunState, step_id: str) -> list[dict[str, Any]]:
    """An agent step's turns as data, for a person: per turn its number, the model's text,
    its calls (function, tool, args as the model wrote them, the step each became and its
    status, or why it was refused, and what the model was told), the feedback on a final
    answer that did not fit, and the turn's usage (``usage_unknown``: why the server's could
    not be taken, ``usage`` then being what was counted in its stead); the last entry is the
    final answer when the step succeeded. Raises KeyError for a step the run does not
    have."""
    st = state.steps[step_id]
    out: list[dict[str, Any]] = []
    turns = turns_of(state, step_id)
    for turn, past in zip(turns, turn_records(state, turns), strict=True):
        made = {call.index: call for call in turn.made}
        refused = {r.index: r.error for r in turn.refused}
        calls = []
        for index, (call, told) in enumerate(zip(past.answer.calls, past.results,
                                                 strict=True)):
            entry: dict[str, Any] = {"call_id": call.call_id, "function": call.function,
                                     "arguments": call.arguments, "result": told}
            step = made.get(index)
            if step is not None:
                child = state.steps[step.step_id]
                entry.update(step_id=step.step_id, tool=step.tool, args=child.args
                             or step.args, status=str(child.status))
            else:
                entry.update(step_id=None, refused=refused.get(index))
            calls.append(entry)
        out.append({"turn": turn.turn, "content": past.answer.content,
                    "calls": calls, "feedback": turn.feedback, "usage": turn.usage,
                    "usage_unknown": turn.usage_unknown})
    if _answered(st):
        last = _final_attempt(state, step_id)
        out.append({"turn": len(turns) + 1, "content": st.output, "calls": [],
                    "feedback": None, "usage": last.usage if last is not None else None,
                    "usage_unknown": last.usage_unknown if last is not None else None,
                    "final": True})
    return out


def agent_step_ids(state: RunState) -> list[str]:
    """The run's agent steps that have asked their model (one of their attempts ran an agent,
    ``agent:NAME``), in the order they first did."""
    return list(dict.fromkeys(
        rec.step_id for rec in state.attempts
        if rec.kind == "call" and names_an_agent(rec.tool)))


def call_tools(state: RunState) -> dict[str, str]:
    """``{step_id: tool}`` of every call an agent's model made that became a step (``chain:NAME``
    for a sub-chain), also before the call was attempted: what a front end shows as the
    step's tool (the chain names only the agent)."""
    return {call.step_id: call.tool for _, turn in recorded_turns(state) for call in turn.made}


def turns_by_step(state: RunState) -> dict[str, list[dict[str, Any]]]:
    """Every agent step of the run with its turns, as the JSON view and ``chainlab show``
    list them: ``{step_id: [{"turn", "calls": [{"step_id", "tool", "status"}, or
    {"step_id": None, "function", "refused"} for a call refused to the model], "usage",
    "usage_unknown" (only when the server's usage could not be taken), "final"}]}``, in the
    order the steps first asked their model. A step is an agent step when one of its
    attempts ran an agent (``agent:NAME``): a prompt step is listed with its one turn; an
    agent step waiting before its first turn is not listed yet."""
    out: dict[str, list[dict[str, Any]]] = {}
    for step_id in agent_step_ids(state):
        out[step_id] = [
            {"turn": entry["turn"],
             "calls": [{"step_id": call["step_id"], "tool": call["tool"],
                        "status": call["status"]} if call["step_id"] is not None else
                       {"step_id": None, "function": call["function"],
                        "refused": call["refused"]} for call in entry["calls"]],
             "usage": entry["usage"], "final": bool(entry.get("final")),
             **({"usage_unknown": entry["usage_unknown"]} if entry["usage_unknown"] else {})}
            for entry in transcript(state, step_id)]
    return out


def _final_attempt(state: RunState, step_id: str) -> AttemptRecord | None:
    for rec in reversed(state.attempts):
        if rec.step_id == step_id and rec.kind == "call":
            return rec
    return None


@dataclass(frozen=True, slots=True)
class TurnShape:
    """One model turn of an agent step as a drawing lays it out (hashable: a layout is kept
    per shape): its number, the steps its calls became (``(step_id, tool)``, in the model's
    order), how many calls were refused to the model, whether its answer was sent back
    (``feedback``: it did not fit), its tokens; ``final``: the final answer; ``next``: the
    turn the step takes next (its model not answered yet)."""

    turn: int
    calls: tuple[tuple[str, str], ...] = ()
    refused: int = 0
    feedback: bool = False
    tokens: int | None = None
    final: bool = False
    next: bool = False


_ACTIVE = frozenset({StepStatus.READY, StepStatus.RUNNING, StepStatus.RETRY_WAIT,
                     StepStatus.WAITING_CONFIRMATION})
#: an agent step that gave its final answer (and was perhaps undone since)
_ANSWERED = frozenset({StepStatus.SUCCEEDED, StepStatus.COMPENSATED,
                       StepStatus.COMPENSATING, StepStatus.COMPENSATION_FAILED})


def _answered(st: StepState) -> bool:
    """The step's model gave its final answer (the one rule for the transcript and the
    drawing: the step succeeded, and may have been undone since)."""
    return st.status in _ANSWERED and st.output is not None


def turn_shapes(state: RunState) -> dict[str, tuple[TurnShape, ...]]:
    """``{agent step id: its turns}`` of every agent step whose model has asked for calls
    (one that answered in its first turn, a prompt step, has no turn to draw): the recorded
    turns, then the final answer once the step succeeded, or the next turn while the step
    goes on and every call of its last turn has settled. Reads only the recorded growth (no
    conversation is rebuilt): a front end calls it on every redraw."""
    grown: dict[str, list[TurnRecorded]] = {}
    for parent, turn in recorded_turns(state):
        grown.setdefault(parent, []).append(turn)
    out: dict[str, tuple[TurnShape, ...]] = {}
    steps = state.steps
    for step_id, turns in grown.items():
        shapes = [TurnShape(t.turn, tuple((c.step_id, c.tool) for c in t.made), len(t.refused),
                            bool(t.feedback), _tokens(t.usage)) for t in turns]
        st = steps.get(step_id)
        status = st.status if st is not None else StepStatus.PENDING
        after = shapes[-1].turn + 1
        if st is not None and _answered(st):
            last = _final_attempt(state, step_id)
            shapes.append(TurnShape(after, tokens=_tokens(last.usage if last else None),
                                    final=True))
        elif status in _ACTIVE and all(
                c in steps and steps[c].status in STEP_TERMINAL for c, _ in shapes[-1].calls):
            shapes.append(TurnShape(after, next=True))
        out[step_id] = tuple(shapes)
    return out


def _tokens(usage: Mapping[str, Any] | None) -> int | None:
    tokens = (usage or {}).get("tokens")
    return int(tokens) if isinstance(tokens, int | float) else None
