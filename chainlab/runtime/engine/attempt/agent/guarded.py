"""An agent turn's guardrails as the ``agent`` kind runs them (what they are, what a verdict
records: :mod:`chainlab.agent.guardrails`).

A turn's verdicts come from the recording when it holds them (a replay, an export-test: the
recorded model hands back the recorded answer with its checks; the input verdicts from the
recorded attempt's ``step_started``, before the model is asked), else from running the
guardrails. Output and call verdicts run now are added to the answer's checks; input
verdicts are recorded with the attempt's ``step_started`` (``checks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from chainlab.agent.conversation import Accepted, Refused
from chainlab.agent.guardrails import Verdict, recorded, tripped

if TYPE_CHECKING:
    from chainlab.agent.definition import Agent
    from chainlab.agent.model import ModelTurn

__all__ = ["TurnGuard"]


@dataclass
class TurnGuard:
    """One turn's guardrails: ``agent``'s, for step ``step_id``'s turn ``turn``; ``live``:
    the verdicts run now (added to the answer's checks by :meth:`recorded_answer`)."""

    agent: Agent
    step_id: str
    turn: int
    live: list[Verdict] = field(default_factory=list)
    inputs: list[Verdict] = field(default_factory=list)

    async def input(self, request: str) -> Verdict | None:
        """The input verdicts (first turn only, each attempt: recorded with its
        ``step_started``, :meth:`input_checks`); the one that tripped, if one did. Raises
        GuardrailError."""
        guards = self.agent.guardrails
        if self.turn != 1 or not guards.of("input"):
            return None
        asked = getattr(self.agent.client, "recorded_checks", None)
        checks = asked(self.step_id, self.turn) if asked is not None else None
        verdicts = recorded(checks, "input") if checks is not None else None
        if verdicts is None:
            verdicts = await guards.judge("input", request, step_id=self.step_id)
        self.inputs = verdicts
        return tripped(verdicts)

    def input_checks(self) -> dict[str, Any]:
        """What ``step_started`` records of the input verdicts (nothing without any)."""
        return {"checks": [v.to_dict() for v in self.inputs]} if self.inputs else {}

    async def output(self, answer: ModelTurn, output: Any) -> Verdict | None:
        """The output verdicts of a final answer; the one that tripped, if one did."""
        return tripped(await self._verdicts(answer, "output", output))

    async def calls(self, answer: ModelTurn, verdicts: list[Accepted | Refused]
                    ) -> list[Accepted | Refused]:
        """The calls the model asked for, a call a guardrail trips refused with its reason
        (it never runs; the model reads why)."""
        if not self.agent.guardrails.of("call"):
            return verdicts
        out: list[Accepted | Refused] = []
        for v in verdicts:
            if isinstance(v, Refused):
                out.append(v)
                continue
            said = tripped(await self._verdicts(answer, "call", {"tool": v.tool,
                                                                  "args": v.args}, v.index))
            out.append(v if said is None else Refused(
                v.index, f"refused by guardrail {said.guardrail!r}: {said.reason}"))
        return out

    def recorded_answer(self, answer: ModelTurn) -> ModelTurn:
        """``answer`` with the verdicts run now in its checks (what the turn records)."""
        if not self.live:
            return answer
        return replace(answer, checks=(*answer.checks, *(v.to_dict() for v in self.live)))

    async def _verdicts(self, answer: ModelTurn, stage: str, value: Any,
                        index: int | None = None) -> list[Verdict]:
        guards = self.agent.guardrails
        if not guards.of(stage):
            return []
        found = recorded(answer.checks, stage, index)
        if found is not None:  # recorded with the answer: never run again
            return found
        verdicts = await guards.judge(stage, value, step_id=self.step_id, index=index)
        self.live += verdicts
        return verdicts
