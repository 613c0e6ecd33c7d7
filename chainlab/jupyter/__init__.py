"""chainlab's Jupyter front end: the ``%chain`` / ``%%chain`` magics and the run widget.

``%load_ext chainlab`` registers the magics and makes a Run display as its live widget
(``run`` on the last line of a cell, or ``display(run)``). This is the only package of
chainlab that imports IPython or ipywidgets.

    %load_ext chainlab
    run = %chain run my_chain --db .chainlab/demo.db     # starts in the background
    await run.wait()                                     # the buttons keep working meanwhile

Without magics: ``display(RunWidget(run))``; draft a chain with ``ChainDesigner(toolbox)``
(or ``%chain design NAME``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from chainlab.events.status import RUN_TERMINAL, StepStatus
from chainlab.jupyter import launch
from chainlab.jupyter.designer.widget import ChainDesigner
from chainlab.jupyter.run_widget.widget import RunWidget
from chainlab.jupyter.runloop import RunLoop
from chainlab.jupyter.session import NotebookSession, get_session
from chainlab.runtime.runtime import Run

__all__ = [
    "ChainDesigner",
    "NotebookSession",
    "RunWidget",
    "get_session",
    "load_ipython_extension",
    "unload_ipython_extension",
    "wait_for_decision",
    "wait_until",
    "widget",
]


def widget(run: Run) -> RunWidget:
    """The live widget of ``run`` (one per run in this kernel, reused when shown again)."""
    return launch.widget(get_session(), run)


async def wait_until(run: Run, predicate: Callable[[Run], bool]) -> None:
    """Wait until ``predicate(run)`` is true (checked now and after every event of the run).

    For notebook cells that wait for something other than the end of a run: a breakpoint
    (``lambda r: r.paused``), a step's status, a person's decision. The widget's buttons keep
    working meanwhile (ipykernel >= 7.4). Needs a run driven by this kernel.
    """
    home = getattr(run.runtime, "home", None)
    if isinstance(home, RunLoop) and not home.here():
        # checked where the run is driven, between two of its steps' bookkeeping: read
        # from here, a step's success could be seen before the steps it releases were
        await home.hop(lambda: wait_until(run, predicate))
        return
    changed = asyncio.Event()
    unsubscribe = run.subscribe(lambda _: changed.set())
    try:
        while not predicate(run):
            changed.clear()
            await changed.wait()
    finally:
        unsubscribe()


async def wait_for_decision(run: Run, step_id: str) -> str:
    """Wait until nobody has to decide about ``step_id`` any more (approved, rejected,
    resolved) or the run ended; returns the step's status then.

    ``await run.wait()`` returns as soon as a run is suspended, which is right for scripts;
    in a tutorial cell that waits for a person's click, await this instead.
    Raises UnknownStepError when the run has no such step.
    """
    if step_id not in run.steps:
        from chainlab.errors import UnknownStepError

        raise UnknownStepError(step_id, run.steps, run_id=run.run_id)
    waiting = (StepStatus.WAITING_CONFIRMATION, StepStatus.IN_DOUBT)
    await wait_until(run, lambda r: r.steps[step_id].status not in waiting
                     or r.status in RUN_TERMINAL)
    return str(run.steps[step_id].status)


def _run_display(session: NotebookSession) -> Any:
    def show(run: Run) -> None:
        # the widget shows itself with a display id and a static fallback (text/html) that
        # is replaced when the run settles; a cell that already showed it (`%chain run NAME`
        # displays its widget, then IPython displays the Run it returns) shows it once
        w = launch.widget(session, run)
        from IPython import get_ipython

        count = getattr(get_ipython(), "execution_count", None)
        if count is not None and getattr(w, "shown_in_cell", None) == count:
            return
        w._ipython_display_()

    return show


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext chainlab``: register the magics; show runs as live widgets."""
    from chainlab.jupyter.magics import ChainMagics

    session = get_session(ipython)
    ipython.register_magics(ChainMagics(ipython, session))
    ipython.display_formatter.ipython_display_formatter.for_type(Run, _run_display(session))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext chainlab``: runs are shown as static DAGs again (runs started here go
    on; the magics are gone until the next ``%load_ext chainlab``)."""
    ipython.display_formatter.ipython_display_formatter.type_printers.pop(Run, None)
    ipython.display_formatter.mimebundle_formatter.type_printers.pop(Run, None)
