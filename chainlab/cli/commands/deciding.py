"""``chainlab approve`` / ``reject`` / ``resolve``: a decision through ``Runtime.decide``.

If another live process (a notebook, a service) drives the run, the decision is sent to it
through the store and it applies the decision; this command prints its answer and the run
as stored, and exits 0. If nobody drives the run, this process takes it over, applies the
decision and follows the run to its next resting state, as ``chainlab resume`` does. A run
of a queue is never taken over here: the decision is recorded for the worker fleet, which
applies it (the answer is printed when a worker gives it within ``--timeout``).
"""

from __future__ import annotations

from typing import Any

import anyio

from chainlab.cli.common import CliError, ExitCode, trace_to
from chainlab.cli.driving import (
    Output,
    db_flag,
    interrupted,
    report,
    run_stall,
    stored_state,
)
from chainlab.cli.progress import follow
from chainlab.errors import RunStateError
from chainlab.events.fold import RunState
from chainlab.plan.schema import Chain
from chainlab.runtime import Executor
from chainlab.runtime.runtime import Runtime
from chainlab.store.base import Store
from chainlab.tools import Toolbox

__all__ = ["decide_run"]


def decide_run(io: Output, *, run_id: str, step_id: str, action: str, options: dict[str, Any],
               toolbox: Toolbox, store: Store, db: str, executor: Executor | None = None,
               timeout: float = 10.0, no_toolbox: CliError | None = None) -> ExitCode:
    """Decide ``action`` on ``step_id`` wherever the run is driven, then report the run.
    ``no_toolbox``: why the run's toolbox is unknown here (raised when the run would have to
    be taken over: only its live driver can then apply the decision). Raises what
    :meth:`Runtime.decide` raises."""

    asked: list[Any] = []  # the driver the decision went to (its row goes when the run ends)
    outcome: list[str] = []
    approved: list[str] = []  # approve --all: the steps approved, each with its own args
    queue = store.get_run(run_id).queue  # a queue's run: the decision goes to the fleet

    trace_to(None)  # (the OTEL_EXPORTER_OTLP_* variables)

    async def main() -> tuple[Chain, RunState] | None:
        async with Runtime(toolbox, store, executor=executor) as runtime:
            live = runtime.liveness.live_driver(store.driver_of(run_id), store.get_run(run_id))
            if no_toolbox is not None and live is None and queue is None:
                raise no_toolbox  # nobody else drives it and this process cannot
            asked.append(live)
            if action == "approve" and options.get("all"):  # every waiting instance
                ids = await runtime.approve_all(run_id, step_id, note=options.get("note"),
                                                timeout=timeout)
                if not ids:
                    raise _stalled(store, run_id, db, f"nothing waits for a confirmation at "
                                   f"or under step {step_id!r} of run {run_id}") or CliError(
                        f"nothing waits for a confirmation at or under step {step_id!r} of "
                        f"run {run_id}", hint=f"chainlab show {run_id} lists what waits")
                approved.extend(ids)
                outcome.append("applied")
            else:
                try:
                    outcome.append(await runtime.decide(run_id, step_id, action,
                                                        timeout=timeout, **options))
                except RunStateError as exc:
                    stalled = _stalled(store, run_id, db, str(exc)) \
                        if type(exc) is RunStateError else None  # (the step does not wait)
                    if stalled is None:
                        raise
                    raise stalled from None
            run = runtime.get_run(run_id)
            if not run.active:  # applied by the process that drives the run
                return None
            await follow(run, io.err, io.progress)
            return run.chain, run.state

    with interrupted([run_id], db):
        taken = anyio.run(main)
    if approved:
        shown = ", ".join(approved[:8]) + (f", … ({len(approved) - 8} more)"
                                           if len(approved) > 8 else "")
        io.err.print(f"approved {len(approved)} step{'s' if len(approved) != 1 else ''} "
                     f"under {step_id}, each with its own args: {shown}", markup=False,
                     soft_wrap=True)
    if taken is not None:
        return report(io, run_id, *taken, db, store)
    driver = store.driver_of(run_id) or (asked[0] if asked else None)
    if queue is not None and outcome == ["recorded"]:
        io.err.print(f"{action} {step_id}: recorded for the fleet; a worker of queue "
                     f"{queue!r} applies it when it takes run {run_id} (chainlab workers)",
                     markup=False, soft_wrap=True)
    elif queue is not None:
        worker = _last_worker(store, run_id)  # (its driver row may be gone: it ended)
        by = f" by worker {worker['name']!r} on host {worker['host']!r}" if worker else ""
        io.err.print(f"{action} {step_id}: applied{by}; run {run_id} goes on in the fleet",
                     markup=False, soft_wrap=True)
    else:
        by = f" by its driver, {driver.describe()}" if driver is not None else ""
        io.err.print(f"{action} {step_id}: applied{by}, which drives run {run_id} on",
                     markup=False)
    chain, state = stored_state(store, run_id)
    report(io, run_id, chain, state, db, store)
    return ExitCode.OK


def _stalled(store: Store, run_id: str, db: str, what: str) -> CliError | None:
    """The error to give when nothing waited for this decision and the run stands still
    (e.g. left running by a killed ``approve --all``): it names the move, not only that
    nothing waits. None when the run does not stand still."""
    stall = run_stall(store, run_id)
    if stall is None:
        return None
    return CliError(f"{what}: {stall.text}",
                    hint=f"{'take it over' if stall.kind == 'no_driver' else 'first'}: "
                         f"{stall.command(suffix=db_flag(db))}" if stall.action else None)


def _last_worker(store: Store, run_id: str) -> dict[str, Any] | None:
    """The fleet worker that took the run up last, as its log says (``run_started`` /
    ``run_resumed`` name it)."""
    named = [ev.payload["worker"] for ev in store.load_events(run_id)
             if isinstance(ev.payload.get("worker"), dict)]
    return named[-1] if named else None
