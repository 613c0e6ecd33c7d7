"""An agent step's turns as its run recorded them, and the steps its model's calls become.

Each turn that asked for tool calls is ONE ``steps_added`` event of the agent step (payload
``kind: agent``): the turn's number, the attempt that asked, the model's ``answer`` (its
text and calls, as :meth:`~chainlab.agent.model.ModelTurn.to_dict` writes them), the steps
the calls became (``ids``) and, in the same order, what each is (``calls``: ``{index, tool,
args}``, ``index`` being the call's position in the answer), the calls refused to the
model (``refused``: ``{index, error}``), the ``feedback`` on a final answer that did not fit
(a turn with no call), and the turn's ``usage`` (with ``usage_unknown`` when the server's
could not be taken). Everything here reads that record back:
the conversation of the next turn (:func:`turn_records`), the steps after a restart
(:func:`grow_calls`), and the transcript front ends show (:func:`transcript`).

A call's step is ``AGENT/TURN.N`` (``help/2.1``: turn 2, first call): an ordinary step of its
tool for every rule (attempts, retry safety, in_doubt, confirmation bound to its own args,
compensation), its kind the tool's (a call, a remote job, an agent) or ``chain`` for a
sub-chain, compiled under it as a sub-chain step's are. It is ``contained``: what becomes of
it (a failure, a rejection) is the model's to read, never a failure of the run by itself.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chainlab.agent.agent import AGENT_PREFIX
from chainlab.agent.conversation import TurnRecord, result_text
from chainlab.agent.model import ModelTurn
from chainlab.events.status import STEP_TERMINAL, StepStatus
from chainlab.plan.parts import Step
from chainlab.runtime.engine.compile import DEFAULT_RETRY, Node, compile_level

if TYPE_CHECKING:
    from chainlab.events import AttemptRecord, RunState, StepState
    from chainlab.runtime.engine.compile import Graph

__all__ = ["TurnShape", "agent_step_ids", "call_plan_step", "call_step_id", "call_tools",
           "fork_confirm", "grow_calls", "refused_streak", "transcript", "turn_records",
           "turn_shapes", "turns_by_step", "turns_of"]

_CHAIN = "chain:"


def call_step_id(agent_id: str, turn: int, index: int) -> str:
    """The step id of call ``index`` (0-based) of turn ``turn`` of agent step ``agent_id``."""
    return f"{agent_id}/{turn}.{index + 1}"


def turns_of(state: RunState, step_id: str) -> list[Mapping[str, Any]]:
    """The recorded turns (``steps_added`` payloads) of agent step ``step_id``, in order."""
    return [payload for parent, payload in state.growth if parent == step_id]


def turn_records(state: RunState, turns: Iterable[Mapping[str, Any]]) -> list[TurnRecord]:
    """The recorded turns as the next request needs them: each call's result read from its
    step (or its refusal), in the model's call order."""
    out = []
    for payload in turns:
        answer = ModelTurn.from_dict(payload["answer"])
        results = [""] * len(answer.calls)
        for refused in payload.get("refused", ()):
            results[refused["index"]] = f"error: {refused['error']}"
        for step_id, spec in zip(payload["ids"], payload["calls"], strict=True):
            results[spec["index"]] = _result(state.steps[step_id])
        out.append(TurnRecord(answer, results, payload.get("feedback")))
    return out


def _result(st: StepState) -> str:
    edited = st.args if st.approval is not None and st.approval.get("edited") else None
    return result_text(str(st.status), output=st.output, error=st.error,
                       error_kind=st.error_kind, reason=st.reason, edited_args=edited)


def grow_calls(graph: Graph, nodes: Mapping[str, Node], parent: Node,
               payload: Mapping[str, Any]) -> list[Node]:
    """The nodes a recorded turn adds: its calls in the model's order, then (a sub-chain
    called as a tool) the sub-chain's steps under each such call."""
    options = graph.options
    turn = payload["turn"]
    out: list[Node] = []
    inner: dict[str, Node] = {}
    for step_id, spec in zip(payload["ids"], payload["calls"], strict=True):
        name, args = spec["tool"], spec["args"]
        chain = graph.chains[name[len(_CHAIN):]] if name.startswith(_CHAIN) else None
        tool = None if chain is not None else graph.toolbox.get(name)
        node = Node(
            id=step_id, step=call_plan_step(name),
            tool=tool, order=(*parent.order, turn, spec["index"]), deps=(), ns=parent.ns,
            render_args=_given(args), static_args=args, when=None,
            retry=(tool.retry if tool else None) or options.default_retry or DEFAULT_RETRY,
            timeout_s=(tool.timeout_s if tool else None) or options.default_timeout_s,
            rollback=tool.compensate if tool is not None else None,
            kind="chain" if chain is not None else tool.kind,  # type: ignore[union-attr]
            group=parent.id, subchain=chain,
            units=tool.resources if tool is not None and tool.resources else None,
            contained=True)
        out.append(node)
        if chain is not None:
            node.children = compile_level(graph, chain, inner, prefix=node.id + "/",
                                          group=node.id, order=node.order)
    for below in inner.values():  # a sub-chain the model called: its steps are the call's
        below.contained = True
    out.extend(inner.values())
    return out


@functools.lru_cache(maxsize=1024)
def call_plan_step(tool: str) -> Step:
    """The plan step a call of ``tool`` stands for: only its tool is read (its args are the
    node's, its id the node's); one per tool name (a pydantic model costs ~0.5 ms to make)."""
    return Step(id="call", tool=tool)


def _given(args: dict[str, Any]) -> Any:
    """The renderer of args the model gave (nothing in them is a reference)."""
    return lambda resolve: args


def fork_confirm(nodes: Iterable[Node], parent_run: str | None) -> dict[str, Any]:
    """In a fork (DESIGN §11), the calls a re-asked agent makes that would change the world
    (and such steps of a sub-chain it calls) wait for a person first: the agent of the run
    it forks may have made them already. ``{step_id: card}`` for ``confirm_first``."""
    card = {"fork": {
        "parent_run": parent_run, "reason": "an agent step asked again in a fork",
        "note": f"this run is a fork of run {parent_run}: the agent's model chose this call "
                "anew, and the parent run's agent may have made it already"}}
    return {node.id: card for node in nodes
            if node.tool is not None and node.tool.side_effects
            and not (node.tool.idempotent and node.tool.reconcile)}


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
    for payload, record in zip(turns, turn_records(state, turns), strict=True):
        steps = {spec["index"]: (made_id, spec)
                 for made_id, spec in zip(payload["ids"], payload["calls"], strict=True)}
        refused = {r["index"]: r["error"] for r in payload.get("refused", ())}
        calls = []
        for index, (call, told) in enumerate(zip(record.answer.calls, record.results,
                                                 strict=True)):
            made = steps.get(index)
            entry: dict[str, Any] = {"call_id": call.call_id, "function": call.function,
                                     "arguments": call.arguments, "result": told}
            if made is not None:
                made_id, spec = made
                child = state.steps[made_id]
                entry.update(step_id=made_id, tool=spec["tool"], args=child.args
                             or spec["args"], status=str(child.status))
            else:
                entry.update(step_id=None, refused=refused.get(index))
            calls.append(entry)
        out.append({"turn": payload["turn"], "content": record.answer.content,
                    "calls": calls, "feedback": payload.get("feedback"),
                    "usage": payload.get("usage"),
                    "usage_unknown": payload.get("usage_unknown")})
    if str(st.status) in ("succeeded", "compensated") and st.output is not None:
        last = _final_attempt(state, step_id)
        out.append({"turn": len(turns) + 1, "content": st.output, "calls": [],
                    "feedback": None, "usage": _final_usage(state, step_id),
                    "usage_unknown": last.usage_unknown if last is not None else None,
                    "final": True})
    return out


def agent_step_ids(state: RunState) -> list[str]:
    """The run's agent steps that have asked their model (one of their attempts ran an agent,
    ``agent:NAME``), in the order they first did."""
    return list(dict.fromkeys(
        rec.step_id for rec in state.attempts
        if rec.kind == "call" and (rec.tool or "").startswith(AGENT_PREFIX)))


def call_tools(state: RunState) -> dict[str, str]:
    """``{step_id: tool}`` of every call an agent's model made that became a step (``chain:NAME``
    for a sub-chain), also before the call was attempted: what a front end shows as the
    step's tool (the chain names only the agent)."""
    return {step_id: spec["tool"] for _, payload in state.growth if "turn" in payload
            for step_id, spec in zip(payload["ids"], payload["calls"], strict=True)}


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


def _final_usage(state: RunState, step_id: str) -> dict[str, Any] | None:
    last = _final_attempt(state, step_id)
    return last.usage if last is not None else None


def refused_streak(turns: Sequence[Mapping[str, Any]]) -> int:
    """How many of the last turns made no step (every call refused, or a final answer that
    did not fit): a model that keeps doing that is stopped."""
    n = 0
    for payload in reversed(turns):
        if payload["ids"]:
            break
        n += 1
    return n


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
_ENDED_WELL = frozenset({StepStatus.SUCCEEDED, StepStatus.COMPENSATED,
                         StepStatus.COMPENSATING, StepStatus.COMPENSATION_FAILED})


def turn_shapes(state: RunState) -> dict[str, tuple[TurnShape, ...]]:
    """``{agent step id: its turns}`` of every agent step whose model has asked for calls
    (one that answered in its first turn, a prompt step, has no turn to draw): the recorded
    turns, then the final answer once the step succeeded, or the next turn while the step
    goes on and every call of its last turn has settled. Reads only the recorded growth (no
    conversation is rebuilt): a front end calls it on every redraw."""
    grown: dict[str, list[Mapping[str, Any]]] = {}
    for parent, payload in state.growth:
        if "turn" in payload:
            grown.setdefault(parent, []).append(payload)
    out: dict[str, tuple[TurnShape, ...]] = {}
    steps = state.steps
    for step_id, payloads in grown.items():
        shapes = [TurnShape(
            p["turn"], tuple(zip(p["ids"], (c["tool"] for c in p["calls"]), strict=True)),
            len(p.get("refused", ())), bool(p.get("feedback")), _tokens(p.get("usage")))
            for p in payloads]
        st = steps.get(step_id)
        status = st.status if st is not None else StepStatus.PENDING
        after = shapes[-1].turn + 1
        if status in _ENDED_WELL and st is not None and st.output is not None:
            shapes.append(TurnShape(after, tokens=_tokens(_final_usage(state, step_id)),
                                    final=True))
        elif status in _ACTIVE and all(
                c in steps and steps[c].status in STEP_TERMINAL for c, _ in shapes[-1].calls):
            shapes.append(TurnShape(after, next=True))
        out[step_id] = tuple(shapes)
    return out


def _tokens(usage: Mapping[str, Any] | None) -> int | None:
    tokens = (usage or {}).get("tokens")
    return int(tokens) if isinstance(tokens, int | float) else None
