"""The fold's handlers for the run's own events (part of the fold,
:mod:`chainlab.events.fold`, which dispatches every event kind to one handler).

The run's status (started, paused, suspended on a person, resumed, ended, rolling back),
where it came from (forked), what was done to it (faults injected, stale writers refused)
and its planner's work (planning events, whose usage counts towards the run's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.events.event import Event, EventKind
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.events.usage import add_usage

if TYPE_CHECKING:
    from chainlab.events.fold_state import FoldState, Handler

__all__ = ["HANDLERS"]


def _on_run_started(state: FoldState, ev: Event) -> None:
    state.set_run_status(RunStatus.RUNNING)
    state.started_at = ev.ts
    state.priority = str(ev.payload.get("priority", "declaration"))
    state.estimates = dict(ev.payload.get("estimates") or {})


def _on_paused(state: FoldState, ev: Event) -> None:
    state.set_run_status(RunStatus.PAUSED)
    state.paused_at = ev.payload.get("step_id")


def _on_suspended(state: FoldState, ev: Event) -> None:
    state.set_run_status(RunStatus.SUSPENDED)
    state.suspended_on = dict(ev.payload.get("waiting", {}))


def _on_resumed(state: FoldState, ev: Event) -> None:
    reason = ev.payload.get("reason")
    if reason == "recovery" and state.status in (RunStatus.COMPENSATING,):
        return  # a rollback interrupted by a crash carries on as a rollback
    if reason == "recovery" and state.status is not None and state.status in RUN_TERMINAL:
        return  # resumed to roll back a finished run; status changes with the rollback
    state.set_run_status(RunStatus.RUNNING)
    state.paused_at = None
    state.suspended_on = {}


def _on_run_end(state: FoldState, status: RunStatus, ev: Event) -> None:
    state.set_run_status(status)
    state.ended_at = ev.ts
    if status in (RunStatus.FAILED, RunStatus.ROLLBACK_FAILED):
        state.failure = dict(ev.payload)


def _on_rollback_started(state: FoldState, ev: Event) -> None:
    state.set_run_status(RunStatus.COMPENSATING)
    state.ended_at = None


def _on_forked(state: FoldState, ev: Event) -> None:
    payload = dict(ev.payload)
    state.confirm_first = dict(payload.pop("confirm_first", None) or {})
    state.experiment = payload.pop("experiment", None)
    state.forked_from = payload


def _on_fault(state: FoldState, ev: Event) -> None:
    state.faults.append(
        {"seq": ev.seq, "ts": ev.ts, "epoch": ev.epoch, "step_id": ev.step_id, **ev.payload}
    )


def _on_refused(state: FoldState, ev: Event) -> None:
    state.fenced.append({"seq": ev.seq, "ts": ev.ts, "epoch": ev.epoch, **ev.payload})


def _on_planning(state: FoldState, ev: Event) -> None:
    state.planning.append({"kind": ev.kind, **ev.payload})
    add_usage(state.usage, ev.payload.get("usage"))


HANDLERS: dict[str, Handler] = {
    EventKind.RUN_STARTED: _on_run_started,
    EventKind.RUN_PAUSED: _on_paused,
    EventKind.RUN_SUSPENDED: _on_suspended,
    EventKind.RUN_RESUMED: _on_resumed,
    EventKind.RUN_SUCCEEDED: lambda s, e: _on_run_end(s, RunStatus.SUCCEEDED, e),
    EventKind.RUN_FAILED: lambda s, e: _on_run_end(s, RunStatus.FAILED, e),
    EventKind.RUN_CANCELLED: lambda s, e: _on_run_end(s, RunStatus.CANCELLED, e),
    EventKind.RUN_ROLLED_BACK: lambda s, e: _on_run_end(s, RunStatus.ROLLED_BACK, e),
    EventKind.RUN_ROLLBACK_FAILED: lambda s, e: _on_run_end(s, RunStatus.ROLLBACK_FAILED, e),
    EventKind.RUN_ROLLBACK_STARTED: _on_rollback_started,
    EventKind.RUN_FORKED: _on_forked,
    EventKind.FAULT_INJECTED: _on_fault,
    EventKind.WRITE_REFUSED: _on_refused,
    EventKind.PLANNING_STARTED: _on_planning,
    EventKind.PLANNING_COMPLETED: _on_planning,
    EventKind.PLANNING_FAILED: _on_planning,
}
