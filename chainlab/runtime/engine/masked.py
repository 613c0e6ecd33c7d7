"""A resumed run never runs with a mask (DESIGN §24).

With a redactor, the log holds some values masked (``"redacted": [keys]`` on the events
that carry them: :mod:`chainlab.redaction`); the process that wrote them kept the real ones,
a process that resumes the run (after a crash, a takeover) has only the masks. A step that
would now run with one -- its own recorded args, an output or a context value its args or
condition read, the args a model gave an agent's call -- waits for a person instead
(``step_waiting_confirmation``, reason :data:`REASON`, naming what was redacted), who
approves it with the real args (an approval without new args is not enough) or rejects it.

:func:`tracking` records what a step's references read (only when the folded log has a mask
at all: the live process never has one); :func:`masked_inputs` says what a step would take
masked; :func:`gate` in :mod:`.attempt.call` asks it, for every kind, on every path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chainlab.events import EventKind
from chainlab.plan.parts import INDEX_NAME
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.events.fold import StepState
    from chainlab.plan.refs import Ref
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["CONTEXT", "REASON", "masked_inputs", "person_gave_args", "tracking",
           "wait_for_real_values"]

#: why a step waits for a person: it would run with a value its log holds redacted
REASON = "redacted"
#: the mark ``run_started`` carries when the run's context was stored redacted
CONTEXT = "context"


def tracking(k: RunCore, node: Node, resolve: Callable[[Ref], Any]) -> Callable[[Ref], Any]:
    """``resolve``, noting in ``k.masked[node.id]`` each value it reads that the log holds
    redacted (the caller wraps only when the folded log has a mask)."""
    marks = k.state.redacted
    ns = node.ns

    def read(ref: Ref) -> Any:
        root, target = ref.root, ref.target or ""
        source: str | None = None
        if root == "context" and ns.group is None:
            if CONTEXT in marks.get("", ()):
                source = "the run's context"
        elif root in ("steps", "memory"):
            if root == "steps":
                step_id: str | None = ns.prefix + target
            elif node.index is not None and target in (node.step.item_name, INDEX_NAME):
                step_id = None  # an instance's own item (checked with its parent's args)
            else:
                step_id = ns.save_as.get(target)
            if step_id is not None and "output" in marks.get(step_id, ()):
                source = f"the output of step {step_id!r}"
        if source is not None:
            seen = k.masked.setdefault(node.id, [])
            if source not in seen:
                seen.append(source)
        return resolve(ref)

    return read


def masked_inputs(k: RunCore, node: Node) -> list[str]:
    """What step ``node`` would run with masked (empty: nothing; always empty in the process
    that recorded the values)."""
    marks = k.state.redacted
    if not marks:
        return []
    out = list(k.masked.get(node.id, ()))
    if "args" in marks.get(node.id, ()):
        out.append(f"the args of step {node.id!r}")
    group = node.group
    if group is not None and "calls" in marks.get(group, ()) and node.static_args is not None:
        out.append(f"the args the model of step {group!r} gave this call")
    return out


def person_gave_args(st: StepState, args: dict[str, Any]) -> bool:
    """A person approved the step with args of their own, and these are they."""
    approval = st.approval
    return bool(approval and approval.get("edited")) and st.approved_hash == args_hash(args)


def wait_for_real_values(k: RunCore, node: Node, args: dict[str, Any],
                         masked: list[str]) -> None:
    """The step waits for a person, naming what the log holds redacted."""
    what = "; ".join(masked)
    k.emit(EventKind.STEP_WAITING_CONFIRMATION, node.id, payload={
        "args": args, "args_hash": args_hash(args), "tool": node.step.tool,
        "reason": REASON, "masked": masked,
        "preview": f"this run was resumed, and its log holds values redacted that step "
                   f"{node.id!r} needs ({what}): the real ones did not survive the restart. "
                   "Approve it with the real args (run.approve(step_id, args={...})) or "
                   "reject it; an approval without args would run it with the masks, so it "
                   "waits again."})
