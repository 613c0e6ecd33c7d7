"""The fold's handlers for a step's remote job (part of the fold,
:mod:`chainlab.events.fold`, which dispatches every event kind to one handler).

A job tool's step keeps one record of its job in :attr:`StepState.job
<chainlab.events.fold.StepState.job>`: reserved (``job_submitting``, before the submit call
could take effect), submitted or attached to (``job_submitted``, with its handle), polled
(``job_progress``) and completed by a stored callback (``job_completed``). The call's
attempt itself is folded by the step events (:mod:`chainlab.events.fold_steps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.events.event import Event, EventKind

if TYPE_CHECKING:
    from chainlab.events.fold_state import FoldState, Handler

__all__ = ["HANDLERS"]


def _on_job_submitting(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    st.job = {"attempt": ev.attempt, "key": ev.payload.get("key"), "phase": "submitting",
              "handle": None, "how": None, "reserved_at": ev.ts, "submitted_at": None,
              "state": None, "progress": None, "note": None, "polls": 0,
              "poll_errors": 0, "error": None, "completion": None, "updated_at": ev.ts}


def _on_job_submitted(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    job = st.job
    if job is None:  # attached without a reservation (a fork attaching to a handle)
        _on_job_submitting(state, ev)
        job = st.job
        assert job is not None
    p = ev.payload
    job.update(phase="waiting", handle=p.get("handle"), how=p.get("how", "submitted"),
               submitted_at=p.get("submitted_at", ev.ts), state="pending", updated_at=ev.ts)
    if ev.attempt is not None:  # (an attach: the attempt that waits on it now)
        job["attempt"] = ev.attempt
    if p.get("key"):
        job["key"] = p["key"]


def _on_job_progress(state: FoldState, ev: Event) -> None:
    job = state.step(ev.step_id or "").job
    if job is None:
        return
    p = ev.payload
    for k in ("state", "progress", "note", "polls", "poll_errors", "error"):
        if k in p:
            job[k] = p[k]
    job["updated_at"] = ev.ts
    if p.get("ended"):
        job["phase"] = "ended"


def _on_job_completed(state: FoldState, ev: Event) -> None:
    job = state.step(ev.step_id or "").job
    if job is not None:
        job["completion"] = dict(ev.payload)


HANDLERS: dict[str, Handler] = {
    EventKind.JOB_SUBMITTING: _on_job_submitting,
    EventKind.JOB_SUBMITTED: _on_job_submitted,
    EventKind.JOB_PROGRESS: _on_job_progress,
    EventKind.JOB_COMPLETED: _on_job_completed,
}
