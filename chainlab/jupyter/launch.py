"""Starting a run from the notebook and giving it its one widget: what ``%chain run`` and
the designer's **Run** share (neither imports the other).

:func:`start` validates the chain, chooses the run's id, builds the run's widget and shows it
(the DAG laid out, every panel made: :mod:`chainlab.jupyter.run_widget.starting`), and only
then creates the run with that id on the loop runs are driven on, so nothing of the widget
delays the run's first step. It hands the Run back at once, remembered by the session with
its :class:`~chainlab.jupyter.run_widget.RunWidget`; :func:`widget` is the one widget of a
run in this kernel.
:func:`enqueue` (``%chain run --enqueue``) stores the run for the worker fleet instead
and gives it the widget of a run driven elsewhere (it follows the run live; its approvals go
to the fleet).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chainlab.jupyter.run_widget.starting import Unstarted
from chainlab.jupyter.run_widget.widget import RunWidget
from chainlab.jupyter.session import NotebookSession
from chainlab.plan.inputs import check_context
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.preparing import toolbox_of
from chainlab.runtime.runtime import Run
from chainlab.tools import Toolbox

__all__ = ["enqueue", "start", "widget"]


def start(session: NotebookSession, chain: Chain, toolbox: Toolbox, db: str | None,
          context: dict[str, Any] | None, options: RunOptions, *, paused: bool,
          show: Callable[[RunWidget], None], queue: str | None = None,
          meta: dict[str, Any] | None = None) -> Run:
    """Show the run's widget (``show(widget)``), then start the run and return its handle
    at once (with ``queue``: enqueue it for the worker fleet, show the widget that follows
    it, :func:`enqueue`, and return its handle); ``meta`` is kept with the run (an ad-hoc
    agent's definition). Raises PlanError (before anything is shown), StoreError."""
    if queue is not None:
        follows = enqueue(session, chain, toolbox, db, context, options, queue=queue,
                          paused=paused)
        show(follows)
        return follows.run
    runtime = session.runtime(toolbox, db)
    planning, planned = _planning_record(session, chain)
    meta = {**planned, **(meta or {})}
    merged = chain.options.merged(options)
    raise_for_problems(chain.model_copy(update={"options": merged}),
                       toolbox_of(toolbox, meta), context=context or {},
                       chains=runtime.chains)
    check_context(chain, context or {})  # the declared inputs, refused before a widget shows
    run_id = runtime.id_factory()  # chosen here: the widget is shown before the run exists
    shown = RunWidget(Unstarted(runtime, chain, run_id, context, merged, meta), session=session)
    session.widgets[run_id] = shown
    show(shown)

    async def create() -> Run:
        run = await runtime.start(chain, context, options, run_id=run_id, paused=paused,
                                  meta=meta, planning=planning)
        shown.attach(run, fresh=True)  # subscribed before the run's loop turns again
        return run

    try:
        run = session.run_now(create(), "runtime.start")
    except Exception:
        session.widgets.pop(run_id, None)
        shown.withdraw()  # no run: no widget and no picture of one
        raise
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
            session.on_loop(existing.attach, run)
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
    run_id = session.run_now(runtime.enqueue(chain, context, queue=queue, options=options,
                                             paused=paused), "runtime.enqueue")
    return watch_widget(session, str(run_id), db, toolbox)
