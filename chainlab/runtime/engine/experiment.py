"""How an experiment's replay decides each call (DESIGN §22): THE rule, in one place, read by
the plan before anything runs (:mod:`chainlab.runtime.history.experiment_plan`) and by the
gate every call of every kind goes through (:func:`chainlab.runtime.engine.attempt.call.gate`)
when the call's args are known.

==================  =========================================================================
live                effect-free: it runs (the plan may answer it from the recording instead,
                    with ``recorded=True``, as a fork's reuse)
recorded            side-effecting, and the recording has a successful call of the same tool
                    with the same args: the recording answers it (``step_reused`` naming the
                    recorded run); the call is NEVER made
needs_live_effect   side-effecting and new (no recording of those args): NOT made; the step
                    is skipped with that reason, naming the call, and the replay stops
ask                 side-effecting and new, its tool listed in ``live=``: it waits for a
                    person's approval, like any confirmation, and runs only once approved
==================  =========================================================================

A model turn whose request is byte-identical (same hash) to a recorded one is answered from
the recording (:func:`recorded_turn`); a changed request asks the model.

The experiment's part of the run is durable: it is in the run's ``run_forked`` event
(``experiment``: ``effects`` ``{tool: {args_hash: {...}}}``, ``turns`` ``{request_hash:
{...}}``, ``live``), so a resume, a takeover or a worker decides exactly as the first driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chainlab.events import EventKind, SkipReason
from chainlab.events.status import StopReason
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["CallDecision", "answered", "decide_call", "recorded_turn"]

K = EventKind


class CallDecision(StrEnum):
    """What an experiment's replay does with one call (the table above)."""

    LIVE = "live"  # effect-free: it runs
    RECORDED = "recorded"  # side-effecting, same tool and args recorded: answered, never made
    NEEDS_LIVE_EFFECT = "needs_live_effect"  # side-effecting and new: not made, replay stops
    ASK = "ask"  # side-effecting, new, its tool listed live: waits for a person's approval


def decide_call(spec: Mapping[str, Any], tool: str, side_effects: bool,
                args: Mapping[str, Any]) -> tuple[CallDecision, dict[str, Any] | None]:
    """The decision for a call of ``tool`` with ``args`` in the experiment ``spec``, and the
    recorded call that answers it (``recorded`` only)."""
    if not side_effects:
        return CallDecision.LIVE, None
    found = (spec.get("effects") or {}).get(tool, {}).get(args_hash(dict(args)))
    if found is not None:
        return CallDecision.RECORDED, found
    if tool in (spec.get("live") or ()):
        return CallDecision.ASK, None
    return CallDecision.NEEDS_LIVE_EFFECT, None


def answered(k: RunCore, node: Node, args: dict[str, Any]) -> bool | None:
    """The gate's question in an experiment's replay, for a call about to start with
    ``args``: True when the call is settled without being made (answered from the
    recording, or stopped as ``needs_live_effect``: the step is finished and the caller
    returns); False when it runs only after a person's approval (``ask``); None when the
    rule of an ordinary run applies (not an experiment, or the call changes nothing)."""
    spec = k.state.experiment
    tool = node.tool
    if spec is None or tool is None or not tool.side_effects:
        return None
    from chainlab.runtime.engine.flow import finished  # (flow imports the attempt kinds)

    decision, recorded = decide_call(spec, node.step.tool, True, args)
    if decision == CallDecision.ASK:
        return False
    if decision == CallDecision.RECORDED:
        assert recorded is not None
        k.emit(K.STEP_REUSED, node.id, payload={
            "decision": str(decision), "output": recorded.get("output"), "args": args,
            "source_run": recorded.get("source_run"),
            "source_attempt": recorded.get("source_attempt"), "code": recorded.get("code"),
            "tool": node.step.tool, "origin": "call",
            "reason": f"side effect answered from the recording of run "
                      f"{recorded.get('source_run')} (same tool and args): not made again"})
        finished(k, node)
        return True
    call = {"tool": node.step.tool, "args": args}
    k.emit(K.STEP_SKIPPED, node.id, payload={
        "reason": SkipReason.NEEDS_LIVE_EFFECT, "call": call,
        "note": f"side-effecting call {node.step.tool}({_short(args)}) is new in this "
                "experiment (no recording with these args): it was NOT made; list "
                f"{node.step.tool!r} in live=[...] to make it after a person approves it"})
    finished(k, node)
    k.start_stopping(StopReason.FAILED, f"step {node.id!r} needs a live effect "
                                        f"({node.step.tool}): not made in an experiment")
    return True


def recorded_turn(k: RunCore, request_hash: str) -> dict[str, Any] | None:
    """The recorded answer to a model request with this hash, in an experiment's replay
    (``{"answer": ..., "source_run": ..., "step_id": ...}``), or None (the model is asked)."""
    spec = k.state.experiment
    if spec is None:
        return None
    found = (spec.get("turns") or {}).get(request_hash)
    return dict(found) if found is not None else None


def _short(args: Mapping[str, Any], limit: int = 80) -> str:
    import json

    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"
