"""The ``agent`` kind: a step whose model chooses tool calls turn by turn (DESIGN §18).

Each model turn is an attempt of the agent step, through the same gate as any call (its
confirmation, the run's budget), then the agent's own limit (``max_turns``, raised in its
args by a person). The turn's request is rebuilt from the log (:mod:`chainlab.agent.turns`)
and recorded in ``step_started`` by its hash, with its frame (instructions, tools, schema)
only when that changed since the step's last turn: a turn stores what it adds, never the
conversation again (:func:`~chainlab.agent.turns.turn_requests` rebuilds it); the model is
asked (holding a slot, like a
call); then

* a final answer ends the step: ``step_succeeded`` with the answer as output (the JSON it
  holds, checked against the agent's ``output_schema``); an answer that does not fit is
  recorded as a turn with ``feedback`` and sent back;
* tool calls are recorded by ONE ``steps_added``, a
  :class:`~chainlab.agent.turns.TurnRecorded` (the answer, the calls that became steps, the
  calls refused to the model, the usage: the fold closes the turn's attempt with it), and
  the calls start as the agent step's children (:mod:`.calls`); it holds no slot while they
  run, and when the last has settled (succeeded, failed, rejected: all go back to the model)
  the next turn is readied (``step_ready``);
* a failed request (server down, busy, slow) is retried by the step's retry policy, counted
  per turn (:data:`chainlab.agent.definition.MODEL_RETRY` by default), then fails the step
  naming the endpoint.

Three turns in a row that make no step (every call refused, or an answer that does not fit)
fail the step. A step past its ``max_turns`` waits for a person (reason ``limit_reached``):
approve to let it take one more turn, approve with ``max_turns`` raised in its args to go on,
or reject to stop.

After a restart a recorded turn is never asked again: a model request in flight is simply
asked again (it changed nothing); the calls recover by their own kinds; the agent step waits
for them, then goes on from the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.agent.conversation import Refused, check_calls, messages
from chainlab.agent.definition import AgentTool
from chainlab.agent.guardrails import Verdict
from chainlab.agent.model import ModelRequest, ModelTurn, RequestHasher
from chainlab.agent.turns import (
    CallMade,
    CallRefused,
    TurnRecorded,
    request_frame,
    turn_records,
    turns_of,
)
from chainlab.errors import GuardrailError
from chainlab.events import ErrorKind, EventKind, StepStatus
from chainlab.runtime.engine.attempt.agent.calls import (
    call_step_id,
    fork_confirm,
    grow_calls,
    refused_streak,
)
from chainlab.runtime.engine.attempt.agent.guarded import TurnGuard
from chainlab.runtime.engine.attempt.call import gate
from chainlab.runtime.engine.attempt.call.fate import record
from chainlab.runtime.engine.attempt.call.seam import Failure, Outcome, classify
from chainlab.runtime.engine.attempt.kind import Parent
from chainlab.runtime.engine.budget import turn_usage
from chainlab.runtime.engine.experiment import recorded_turn
from chainlab.runtime.engine.flow import finished, make_ready, start_children
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from collections.abc import Mapping

    from chainlab.agent.definition import Agent
    from chainlab.runtime.engine.compile import Graph, Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["FRUITLESS_TURNS", "LIMIT_REACHED", "AgentStep"]

K = EventKind
S = StepStatus
#: why an agent step waits for a person: it used its turns (``max_turns``)
LIMIT_REACHED = "limit_reached"
#: turns in a row that make no step before the agent step fails
FRUITLESS_TURNS = 3
#: the usage of a turn an experiment answered from its recording: no model was asked
_NOTHING_SPENT = {"input_tokens": 0, "output_tokens": 0, "tokens": 0}


class AgentStep(Parent):
    """A step run by an agent's model, turn by turn (``agent``)."""

    name = "agent"
    what = "agent step"

    async def run(self, k: RunCore, node: Node) -> None:
        """One model turn: the gate, the limit, the request recorded, the answer acted on."""
        opened = gate(k, node)
        if opened is None:
            return
        attempt, args, _ = opened
        agent = _agent(node)
        turns = turns_of(k.state, node.id)
        turn = len(turns) + 1
        if not self._within_limit(k, node, agent, args, turn):
            return
        try:
            offers = agent.offers(k.toolbox, k.graph.chains)
        except KeyError as exc:  # (validation says so first; a toolbox changed since)
            k.emit(K.STEP_FAILED, node.id, None, {
                "error_kind": ErrorKind.INVALID_INPUT,
                "error": f"agent {agent.name!r} cannot offer its tools: {exc}"})
            finished(k, node)
            return
        request = ModelRequest(
            messages(agent.instructions, str(args.get("request", "")),
                     turn_records(k.state, turns)),
            [offer.spec() for offer in offers.values()], agent.output_json_schema,
            agent.temperature, node.id, turn, agent.max_tokens, k.tell)
        guard = TurnGuard(agent, node.id, turn)
        try:  # (its verdicts are recorded with the attempt that follows)
            stop = await guard.input(str(args.get("request", "")))
        except GuardrailError as exc:
            self._guard_failed(k, node, None, exc)
            return
        started = _asked(k, node.id, agent, request, {
            "args": args, "tool": node.step.tool, "turn": turn,
            "code": node.tool.fingerprint if node.tool else None,
            "model": agent.endpoint.model,  # (what a trace's chat span names)
            **guard.input_checks()})
        replayed = recorded_turn(k, started["request_hash"])  # an experiment's same request
        if replayed is not None:
            started["answered_from"] = replayed["source_run"]
        k.emit(K.STEP_STARTED, node.id, attempt, started)
        if stop is not None:  # before the model is asked
            self._guard_failed(k, node, attempt, stop)
            return
        tries = attempt - (turns[-1].attempt if turns else 0)
        try:
            with anyio.move_on_after(node.timeout_s or float("inf")) as deadline:
                answer = (ModelTurn.from_dict(replayed["answer"], dict(_NOTHING_SPENT))
                          if replayed is not None else await agent.client.complete(request))
        except anyio.get_cancelled_exc_class():
            if k.stopping:  # run.cancel()/rollback(): record the attempt, then stop
                record(k, node, attempt, Outcome(failure=Failure(ErrorKind.CANCELLED,
                                                                 "cancelled")))
            raise
        except Exception as exc:  # the client's word: transient (asked again) or not
            record(k, node, attempt, Outcome(failure=classify(exc, tool_name=node.step.tool)),
                   tries)
            return
        if deadline.cancelled_caught:
            record(k, node, attempt, Outcome(failure=Failure(
                ErrorKind.TIMEOUT, f"the model at {agent.client.endpoint} gave no answer "
                f"within timeout_s={node.timeout_s}")), tries)
            return
        try:
            await self._answered(k, node, args, offers, turns, attempt, answer, guard)
        except GuardrailError as exc:  # (the answer's calls are not made)
            self._guard_failed(k, node, attempt, exc)

    async def _answered(self, k: RunCore, node: Node, args: dict[str, Any],
                        offers: Mapping[str, Any], turns: list[TurnRecorded], attempt: int,
                        answer: ModelTurn, guard: TurnGuard) -> None:
        """The model answered: its calls become steps (or are refused to it), or its final
        answer ends the step (or is sent back)."""
        agent, turn = _agent(node), len(turns) + 1
        limit = int(args.get("max_calls_per_turn") or agent.max_calls_per_turn)
        if answer.calls:
            verdicts = await guard.calls(answer, check_calls(answer.calls, offers, limit))
            answer = guard.recorded_answer(answer)
            self._grow(k, node, turns, TurnRecorded(
                turn, attempt, answer,
                made=tuple(CallMade(call_step_id(node.id, turn, v.index), v.index, v.tool,
                                    v.args) for v in verdicts if not isinstance(v, Refused)),
                refused=tuple(CallRefused(v.index, v.error) for v in verdicts
                              if isinstance(v, Refused)),
                **_usage(k, node, attempt, answer)))
            return
        try:
            output = agent.check_answer(answer.content)
        except ValueError as exc:  # sent back to the model with the next turn
            answer = guard.recorded_answer(answer)
            self._grow(k, node, turns, TurnRecorded(turn, attempt, answer, feedback=f"{exc}",
                                                    **_usage(k, node, attempt, answer)))
            return
        stop = await guard.output(answer, output)
        answer = guard.recorded_answer(answer)
        if stop is not None:  # the reason goes back to the model, as for a bad answer
            self._grow(k, node, turns, TurnRecorded(
                turn, attempt, answer,
                feedback=f"output guardrail {stop.guardrail!r}: {stop.reason}",
                **_usage(k, node, attempt, answer)))
            return
        self._succeed(k, node, attempt, turn, answer, output)

    @staticmethod
    def _guard_failed(k: RunCore, node: Node, attempt: int | None,
                      why: Verdict | GuardrailError) -> None:
        """An input guardrail tripped (its verdict is recorded with the attempt), or a
        guardrail failed (``attempt`` None: before any): the step fails naming it."""
        if isinstance(why, Verdict):
            error = f"input guardrail {why.guardrail!r} tripped: {why.reason}"
        else:
            error = str(why)
        k.emit(K.STEP_FAILED, node.id, attempt, {
            "error_kind": ErrorKind.PERMANENT, "error": error, "guardrail": why.guardrail})
        finished(k, node)

    # ------------------------------------------------------------------ outcomes
    def _grow(self, k: RunCore, node: Node, turns: list[TurnRecorded],
              recorded: TurnRecorded) -> None:
        """Record the turn (ONE ``steps_added``), then start its calls; the step holds no
        slot while they run. A third turn in a row that made no step fails the step."""
        nodes = grow_calls(k.graph, k.nodes, node, recorded)
        if k.state.forked_from is not None:  # a fork: what changes the world asks first
            confirm = fork_confirm(nodes, k.state.forked_from.get("forked_from"))
            if confirm:
                recorded = replace(recorded, confirm_first=confirm)
        k.emit(K.STEPS_ADDED, node.id, recorded.attempt, recorded.to_dict())
        ids = k.add_nodes(nodes)
        if refused_streak([*turns, recorded]) >= FRUITLESS_TURNS:
            why = [r.error for r in recorded.refused] or [str(recorded.feedback)]
            k.emit(K.STEP_FAILED, node.id, recorded.attempt, {
                "error_kind": ErrorKind.INVALID_INPUT,
                "error": f"the model's last {FRUITLESS_TURNS} turns made no call that could "
                         f"run (the last: {'; '.join(why[:3])})"})
            finished(k, node)
            return
        k.sched.park(node.id)
        start_children(k, node, ids[:len(recorded.made)])

    @staticmethod
    def _succeed(k: RunCore, node: Node, attempt: int, turn: int, answer: ModelTurn,
                 output: Any) -> None:
        payload: dict[str, Any] = {"output": output, "turn": turn, "answer": answer.to_dict(),
                                   **_usage(k, node, attempt, answer)}
        k.emit(K.STEP_SUCCEEDED, node.id, attempt, payload)
        finished(k, node)

    @staticmethod
    def _within_limit(k: RunCore, node: Node, agent: Agent, args: dict[str, Any],
                      turn: int) -> bool:
        """True when the step may take turn ``turn``; else it now waits for a person."""
        limit = int(args.get("max_turns") or agent.max_turns)
        if turn <= limit or _approved_since_last_turn(k, node, args):
            return True
        k.emit(K.STEP_WAITING_CONFIRMATION, node.id, payload={
            "args": args, "args_hash": args_hash(args), "tool": node.step.tool,
            "reason": LIMIT_REACHED, "limit": {"max_turns": limit},
            "preview": f"agent {agent.name!r} has taken its {limit} turns (max_turns="
                       f"{limit}). Approve to let it take one more turn, approve with "
                       "args {..., \"max_turns\": N} to let it go on to N, or reject to "
                       "stop it."})
        k.sched.park(node.id)
        return False

    # ------------------------------------------------------------------ the protocol
    def child_settled(self, k: RunCore, node: Node) -> None:
        """The turn's calls have all settled: the next turn is ready (unless the run is
        stopping: then nothing new starts and the step is cancelled with the rest)."""
        st = k.steps[node.id]
        if st.status != S.RUNNING or k.stopping:
            return
        k.emit(K.STEP_READY, node.id, None, {"turn": len(turns_of(k.state, node.id)) + 1})
        make_ready(k, node)

    def recover(self, k: RunCore, node: Node) -> bool:
        """A model request in flight is asked again (it changed nothing); else its calls
        recover one by one and it waits for them (:meth:`recount` settles it)."""
        st = k.steps[node.id]
        if k.state.open_attempt(node.id) is None:
            return super().recover(k, node)
        k.args[node.id] = dict(st.args or {})
        k.emit(K.STEP_READY, node.id, st.attempts, {"recovery": "rerun"})
        make_ready(k, node)
        return False

    def regrow(self, graph: Graph, nodes: Mapping[str, Node], parent: Node,
               payload: Mapping[str, Any]) -> list[Node]:
        return grow_calls(graph, nodes, parent, TurnRecorded.from_dict(payload))

    def cancel(self, k: RunCore, node: Node) -> None:
        """The run stops: the step is cancelled whatever its calls did (a call that failed
        or was rejected was the model's to read, not the step's failure)."""
        st = k.steps[node.id]
        if st.status in (S.PENDING, S.READY, S.WAITING_CONFIRMATION, S.RETRY_WAIT, S.RUNNING):
            k.emit(K.STEP_CANCELLED, node.id, st.attempts or None,
                   {"reason": k.stop_reason or str(k.stopping)})


def _agent(node: Node) -> Agent:
    tool = node.tool
    assert isinstance(tool, AgentTool), f"step {node.id!r} of kind agent has no agent"
    return tool.agent


@dataclass(slots=True)
class _Asked:
    """What an agent step keeps between its turns in one drive: the request frame it last
    recorded and its request hash's state (a turn hashes only what it adds)."""

    frame: dict[str, Any] | None = None
    hasher: RequestHasher = field(default_factory=RequestHasher)


def _asked(k: RunCore, step_id: str, agent: Agent, request: ModelRequest,
           started: dict[str, Any]) -> dict[str, Any]:
    """The turn's ``step_started`` payload: its request's hash, and its frame when it is not
    the one this step last recorded in this drive (the first turn a driver asks records it;
    :func:`~chainlab.agent.turns.turn_requests` rebuilds the request from them)."""
    asked = k.memo.get(step_id)
    if asked is None:
        asked = k.memo[step_id] = _Asked()
    started["request_hash"] = asked.hasher.hash(request.body())
    frame = request_frame(agent.instructions, request)
    if frame != asked.frame:
        started["frame"] = asked.frame = frame
    return started


def _usage(k: RunCore, node: Node, attempt: int, answer: ModelTurn) -> dict[str, Any]:
    """The turn's usage as recorded: the server's, or unknown and counted as expected."""
    return turn_usage(k, node.id, attempt, answer.usage, answer.usage_unknown)


def _approved_since_last_turn(k: RunCore, node: Node, args: dict[str, Any]) -> bool:
    """A person approved the step (not only past the budget) for these args since its last
    model turn started: it may take one more turn."""
    st = k.steps[node.id]
    approval = st.approval
    if approval is None or approval.get("over_budget") or st.approved_hash != args_hash(args):
        return False
    last = next((rec.started_at for rec in reversed(k.state.attempts)
                 if rec.step_id == node.id and rec.kind == "call"), None)
    return last is None or approval["ts"] >= last
