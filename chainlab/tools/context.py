"""What passes between the runtime and a tool's body at call time: the :class:`CallContext` a
tool receives when it declares a parameter annotated with it, and the :class:`Reconciliation`
its ``reconcile`` callable answers after an interrupted call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

__all__ = ["CallContext", "Reconciliation"]


class CallContext(NamedTuple):
    """What a tool body may know about the call it is serving (immutable; a named tuple:
    one is built per call)."""

    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    epoch: int = 0
    kind: Literal["call", "compensation"] = "call"


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
