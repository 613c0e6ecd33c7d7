"""chainlab's Jupyter front end: the ``%chain`` / ``%%chain`` magics and the run widget.

``%load_ext chainlab`` registers the magics and makes a Run display as its live widget
(``run`` on the last line of a cell, or ``display(run)``). This is the only package of
chainlab that imports IPython or ipywidgets.

    %load_ext chainlab
    run = %chain run my_chain --db .chainlab/demo.db     # starts in the background
    await run.wait()                                     # the buttons keep working meanwhile

Without magics: ``display(RunWidget(run))``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from chainlab.jupyter.session import NotebookSession, get_session
from chainlab.jupyter.widgets import RunWidget
from chainlab.runtime.run import Run
from chainlab.runtime.status import RUN_TERMINAL, StepStatus

__all__ = [
    "NotebookSession",
    "RunWidget",
    "get_session",
    "load_ipython_extension",
    "unload_ipython_extension",
    "wait_for_decision",
    "widget",
]


def widget(run: Run) -> RunWidget:
    """The live widget of ``run`` (one per run in this kernel, reused when shown again)."""
    from chainlab.jupyter._commands import widget as _widget

    return _widget(get_session(), run)  # type: ignore[no-any-return]


async def wait_for_decision(run: Run, step_id: str) -> str:
    """Wait until nobody has to decide about ``step_id`` any more (approved, rejected,
    resolved) or the run ended; returns the step's status then.

    ``await run.wait()`` returns as soon as a run is suspended, which is right for scripts;
    in a tutorial cell that waits for a person's click, await this instead. The widget's
    buttons keep working while the cell waits (ipykernel >= 7.4).
    Raises UnknownStepError when the run has no such step.
    """
    waiting = (StepStatus.WAITING_CONFIRMATION, StepStatus.IN_DOUBT)
    if step_id not in run.steps:
        from chainlab.errors import UnknownStepError

        raise UnknownStepError(step_id, run.steps, run_id=run.run_id)
    changed = asyncio.Event()
    unsubscribe = run.subscribe(lambda ev: changed.set())
    try:
        while run.steps[step_id].status in waiting and run.status not in RUN_TERMINAL:
            changed.clear()
            await changed.wait()
    finally:
        unsubscribe()
    return str(run.steps[step_id].status)


def _run_bundle(session: NotebookSession) -> Any:
    def printer(run: Run) -> Any:
        from chainlab.jupyter._commands import widget as _widget

        return _widget(session, run)._repr_mimebundle_()

    return printer


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext chainlab``: register the magics; show runs as live widgets."""
    from chainlab.jupyter.magics import ChainMagics

    session = get_session(ipython)
    ipython.register_magics(ChainMagics(ipython, session))
    formatter = ipython.display_formatter.mimebundle_formatter
    formatter.for_type(Run, _run_bundle(session))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext chainlab``: runs shown as static DAGs again; stores flushed."""
    formatter = ipython.display_formatter.mimebundle_formatter
    formatter.type_printers.pop(Run, None)
    get_session(ipython).close()
