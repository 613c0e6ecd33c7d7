"""Guardrails: checks an agent runs around its model (DESIGN §24).

``Agent(input_guardrails=[...], output_guardrails=[...], call_guardrails=[...])``: each a
function (sync or async) of the step's request (a str) / the final answer (the step's output
as it would be) / one call the model asks for (``{"tool": NAME, "args": {...}}``), returning
None (it passes) or a reason (a str: it trips). The guardrails of a stage run in order; the
first that trips decides:

* ``input``: the step fails with the reason before the model is asked;
* ``output``: the reason goes back to the model as feedback (a turn that made no step: after
  three in a row the step fails, as for an answer that does not fit its schema);
* ``call``: that call is refused to the model with the reason (it never runs; recorded as
  refused, like a call to an unknown tool).

Each verdict is recorded with its turn (:class:`Verdict`'s dict: ``{"check": "guardrail",
"guardrail", "stage", "tripped", "reason", "index"}``): output and call verdicts in the
answer's ``checks``, input verdicts in the ``checks`` of the attempt's ``step_started``. A
replay and an export-test read the recorded verdicts and never run a guardrail again (the
recorded model hands back the recorded answer, checks included, and the recorded attempt's
input verdicts before the model is asked). A guardrail that raises, or returns anything
but None or a str, raises :class:`~chainlab.errors.GuardrailError` naming it: the step
fails, nothing is called.

A guardrail is Python code, like a tool: it is part of the Agent, registered in the toolbox
a process loads, so a resumed run, a worker's takeover and ``chainlab serve`` run the same
guardrails as long as they load the same toolbox (the run records verdicts, not code).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chainlab._text import safe_repr
from chainlab.errors import GuardrailError, ToolDefinitionError

__all__ = ["CHECK", "STAGES", "Guardrail", "Guardrails", "Verdict", "guardrail_name"]

#: a guardrail: None when the value passes, else the reason it trips
Guardrail = Callable[[Any], Any]
#: the ``check`` key of a verdict in an answer's checks (others come from another SDK)
CHECK = "guardrail"
#: the stages, in the order of a turn
STAGES = ("input", "output", "call")


def guardrail_name(fn: Any) -> str:
    """How a guardrail is named in its verdict and its errors."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one guardrail said: its name, its stage, whether it tripped and why, and for a
    call guardrail the call's position in the answer (``index``)."""

    guardrail: str
    stage: str
    reason: str | None = None
    index: int | None = None

    @property
    def tripped(self) -> bool:
        return self.reason is not None

    def to_dict(self) -> dict[str, Any]:
        """As recorded in the answer's checks."""
        out: dict[str, Any] = {"check": CHECK, "guardrail": self.guardrail,
                               "stage": self.stage, "tripped": self.tripped,
                               "reason": self.reason}
        if self.index is not None:
            out["index"] = self.index
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(data["guardrail"], data["stage"], data.get("reason"), data.get("index"))


class Guardrails:
    """An agent's guardrails by stage (checked when the agent is made: each callable)."""

    def __init__(self, agent: str, **stages: Sequence[Guardrail] | None):
        self.by_stage: dict[str, tuple[Guardrail, ...]] = {}
        for stage in STAGES:
            given = stages.get(stage) or ()
            if callable(given) or isinstance(given, str):
                raise ToolDefinitionError(f"agent {agent!r}: {stage}_guardrails must be a list "
                                          f"of functions, got {safe_repr(given)}")
            for fn in given:
                if not callable(fn):
                    raise ToolDefinitionError(
                        f"agent {agent!r}: {stage}_guardrails holds {safe_repr(fn)}, which is "
                        "not a function (a guardrail takes the value and returns None or a "
                        "reason)")
            self.by_stage[stage] = tuple(given)

    def __bool__(self) -> bool:
        return any(self.by_stage.values())

    def of(self, stage: str) -> tuple[Guardrail, ...]:
        return self.by_stage.get(stage, ())

    async def judge(self, stage: str, value: Any, *, step_id: str,
                    index: int | None = None) -> list[Verdict]:
        """Run the stage's guardrails on ``value`` in order, up to the first that trips.
        Raises GuardrailError naming one that raises or returns neither None nor a str."""
        out: list[Verdict] = []
        for fn in self.of(stage):
            name = guardrail_name(fn)
            try:
                said = fn(value)
                if inspect.isawaitable(said):
                    said = await said
            except Exception as exc:
                raise GuardrailError(
                    f"{stage} guardrail {name!r} of step {step_id!r} raised "
                    f"{type(exc).__name__}: {exc}; nothing was called (fix the guardrail: it "
                    "returns None to pass, or a reason to trip)",
                    guardrail=name, step_id=step_id) from None
            if said is not None and not isinstance(said, str):
                raise GuardrailError(
                    f"{stage} guardrail {name!r} of step {step_id!r} returned "
                    f"{safe_repr(said, 60)}: a guardrail returns None (it passes) or a "
                    "reason (a str: it trips); nothing was called",
                    guardrail=name, step_id=step_id)
            out.append(Verdict(name, stage, said, index))
            if said is not None:
                break
        return out


def recorded(checks: Iterable[Mapping[str, Any]], stage: str,
             index: int | None = None) -> list[Verdict] | None:
    """The verdicts of ``stage`` (and call ``index``) among recorded checks; None when the
    checks hold no guardrail verdict at all (recorded without guardrails: they run)."""
    mine = [c for c in checks if c.get("check") == CHECK]
    if not mine:
        return None
    return [Verdict.from_dict(c) for c in mine
            if c.get("stage") == stage and c.get("index") == index]


def tripped(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The verdict that tripped, if one did."""
    return next((v for v in verdicts if v.tripped), None)
