"""Starting a run from the notebook and giving it its one widget: what ``%chain run`` and
the designer's **Run** share (neither imports the other).

:func:`start` validates the chain, lays its DAG out, starts the run on the kernel's loop
(:func:`chainlab.jupyter._loop.eager`) and hands the Run back at once, remembered by the
session with its :class:`~chainlab.jupyter.run_widget.RunWidget`; :func:`widget` is the one
widget of a run in this kernel. :func:`enqueue` (``%chain run --enqueue``) stores the run
for the worker fleet instead and gives it the widget of a run driven elsewhere (it follows
the run live; its approvals go to the fleet).
"""

from __future__ import annotations

from typing import Any

from chainlab.jupyter._loop import eager
from chainlab.jupyter.run_widget.deferred import Prelaid
from chainlab.jupyter.run_widget.widget import RunWidget
from chainlab.jupyter.session import NotebookSession
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.runtime import Run
from chainlab.tools import Toolbox

__all__ = ["enqueue", "start", "widget"]


def start(session: NotebookSession, chain: Chain, toolbox: Toolbox, db: str | None,
          context: dict[str, Any] | None, options: RunOptions, *, paused: bool,
          queue: str | None = None) -> Run:
    """Start a run on the kernel's loop and return its handle at once (with ``queue``:
    enqueue it for the worker fleet and return the handle that follows it, :func:`enqueue`).
    Raises PlanError."""
    if queue is not None:
        return enqueue(session, chain, toolbox, db, context, options, queue=queue,
                       paused=paused).run  # type: ignore[return-value]
    runtime = session.runtime(toolbox, db)
    planning, meta = _planning_record(session, chain)
    raise_for_problems(chain.model_copy(update={"options": chain.options.merged(options)}),
                       toolbox, context=context or {}, chains=runtime.chains)
    # lay the DAG out first: Graphviz blocks the loop for a moment, and after the start that
    # moment would show up as a gap before the first step in the timeline
    prelaid = Prelaid(chain, toolbox, runtime.chains)
    started = eager(runtime.start(chain, context, options, paused=paused, meta=meta,
                                  planning=planning))
    if not started.done:  # pragma: no cover - the session's stores never block
        raise RuntimeError("runtime.start suspended; chainlab.jupyter needs inline stores")
    run: Run = started.value  # type: ignore[assignment]
    # its panels are built once the first steps started (issue 29: a run waited 40-260 ms
    # for them); the widget catches up from the run's log
    session.widgets[run.run_id] = RunWidget(run, session=session, prelaid=prelaid,
                                                defer=True)
    return session.remember(run, db)


def _planning_record(session: NotebookSession, chain: Chain
                     ) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """Planning events and run meta for a chain bound by ``%chain plan`` (the same record
    ``plan_and_start`` writes); nothing for any other chain, an edited copy included."""
    for planned, report in session.plans.values():
        if planned is chain:
            from chainlab.planner.base import planning_events

            meta = {"planning": {"request": report.request, "report": report.to_dict()}}
            return planning_events(report), meta
    return [], {}


def widget(session: NotebookSession, run: Run) -> RunWidget:
    """The (one) live widget of ``run``."""
    existing = session.widgets.get(run.run_id)
    if isinstance(existing, RunWidget):  # (what the session keeps: widgets that show a run)
        if run.active and existing.run is not run:
            existing.attach(run)
        return existing
    w = session.widgets[run.run_id] = RunWidget(run, session=session)
    return w


def enqueue(session: NotebookSession, chain: Chain, toolbox: Toolbox, db: str | None,
            context: dict[str, Any] | None, options: RunOptions, *, queue: str,
            paused: bool) -> RunWidget:
    """Enqueue a run in ``queue`` (a worker of the fleet drives it, DESIGN §19) and return
    the run's widget in this kernel, the one of a run driven elsewhere: it follows the run
    from the store (its status, its steps as the worker drives them) and its approval
    buttons' decisions are recorded for the fleet. Raises PlanError (the chain, context or
    queue name do not fit), StoreError (a store that keeps no queue)."""
    from chainlab.jupyter.remote import watch_widget

    runtime = session.runtime(toolbox, db)
    queued = eager(runtime.enqueue(chain, context, queue=queue, options=options,
                                   paused=paused))
    if not queued.done:  # pragma: no cover - the session's stores never block
        raise RuntimeError("runtime.enqueue suspended; chainlab.jupyter needs inline stores")
    return watch_widget(session, str(queued.value), db, toolbox)
