"""What passes between the runtime and a tool's body at call time: the :class:`CallContext` a
tool receives when it declares a parameter annotated with it, and the :class:`Reconciliation`
its ``reconcile`` callable answers after an interrupted call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from chainlab.events.usage import normalize_usage, summed_usage

__all__ = ["CallContext", "Reconciliation", "response_usage"]


class CallContext(NamedTuple):
    """What a tool body may know about the call it is serving (immutable; a named tuple:
    one is built per call)."""

    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    epoch: int = 0
    kind: Literal["call", "compensation"] = "call"
    #: what the call consumed so far (filled by :meth:`report_usage`; recorded with the
    #: attempt's end event). None: this context records no usage (built outside a run)
    usage: dict[str, Any] | None = None

    def report_usage(self, *, input_tokens: int | None = None,
                     output_tokens: int | None = None, cost: float | None = None,
                     model: str | None = None, **numbers: float) -> None:
        """Record what this call consumed: tokens, cost (in your currency), the model, any
        other number (``cache_hits=2``). Several reports in one call add up. They are part
        of the attempt's end event, so the run's totals, the timeline and a budget see them.

        Raises ValueError for a value that is not a number from 0 to ``USAGE_MAX``
        (10**15; the call's reports summed, too): nothing of that report is recorded."""
        one = normalize_usage({"input_tokens": input_tokens, "output_tokens": output_tokens,
                               "cost": cost, "model": model, **numbers})
        if self.usage is not None and one:
            one.pop("tokens", None)  # derived again from the sums below
            total = summed_usage(self.usage, one)
            if "input_tokens" in total or "output_tokens" in total:
                total = normalize_usage(total)  # (tokens derived, and checked)
            self.usage.clear()
            self.usage.update(total)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """A ``reconcile`` callable's answer: did the interrupted call take effect?"""

    applied: bool
    output: Any = None

    @classmethod
    def took_effect(cls, output: Any = None) -> Reconciliation:
        """The call happened; ``output`` becomes the step's output."""
        return cls(True, output)

    @classmethod
    def no_effect(cls) -> Reconciliation:
        """The call never happened; running it again is safe."""
        return cls(False)


def response_usage(result: Any) -> dict[str, Any] | None:
    """The usage an OpenAI-style response carries (``.usage`` or ``["usage"]`` with
    ``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``, and its
    ``model``), as a usage dict; None for anything else. Reads attributes only of an object
    that has a ``usage`` attribute (a client's response model), never calls anything."""
    if result is None or isinstance(result, str | int | float | list | tuple):
        return None  # the common outputs: nothing to look at
    usage = result.get("usage") if isinstance(result, Mapping) else \
        getattr(result, "usage", None)
    if usage is None:
        return None

    def pick(*names: str) -> Any:
        for name in names:
            value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return value
        return None

    tokens_in = pick("input_tokens", "prompt_tokens")
    tokens_out = pick("output_tokens", "completion_tokens")
    if tokens_in is None and tokens_out is None:
        return None
    model = result.get("model") if isinstance(result, Mapping) else getattr(result, "model", None)
    found: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out,
                             "model": model if isinstance(model, str) else None}
    cost = pick("cost")
    if cost is not None:
        found["cost"] = cost
    try:
        return normalize_usage(found)
    except ValueError:
        return None
