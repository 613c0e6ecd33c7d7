"""``%chain fault RUN FAULT [STEP]``: inject a fault into a run this kernel drives (issue 19),
through the same :func:`~chainlab.jupyter.run_widget.faults.run_fault` as the run widget's
"Faults" section, recorded ``by="magic"``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chainlab.jupyter.magics.commands import control
from chainlab.jupyter.run_widget.faults import run_fault
from chainlab.jupyter.session import SessionError
from chainlab.runtime.faults import Fault

if TYPE_CHECKING:
    from chainlab.jupyter.session import NotebookSession
    from chainlab.runtime.run import Run

__all__ = ["magic_fault"]


def magic_fault(session: NotebookSession, run: Run, fault: str, step_id: str | None, *,
                error_kind: str, effect: bool | None) -> str:
    """``%chain fault``: inject now; returns the line to print. A mistake (unknown fault,
    step or error kind; a run not driven here) raises SessionError/ChainlabError, which the
    magic shows as a UsageError."""
    options: dict[str, Any] = {"effect": effect} if effect is not None else {}
    if str(fault).replace("-", "_") == Fault.RAISE:
        options["error_kind"] = error_kind
    try:
        control(session, run, run_fault(run, fault, step_id, by="magic", session=session,
                                        widget=session.widgets.get(run.run_id), **options))
    except ValueError as exc:
        raise SessionError(str(exc)) from None
    if str(fault).replace("-", "_") == Fault.SECOND_DRIVER:
        return (f"a second driver takes run {run.run_id} over (next epoch); the first one is "
                "fenced at its next write")
    return f"injected {fault} into step {step_id!r} of run {run.run_id} (by magic)"
