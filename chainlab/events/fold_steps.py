"""The fold's handlers for a step's calls and compensations (part of the fold,
:mod:`chainlab.events.fold`, which dispatches every event kind to one handler).

A call's life: ready, started, then one end (succeeded, failed, a retry scheduled, timed
out, in doubt, cancelled); a step copied by a fork (reused) or skipped makes no call; a
compensation (the saga's undo) is an attempt of its own kind. Each handler opens or closes
the step's attempt record and moves the step through the transition table, both through
the primitives of :class:`~chainlab.events.fold_state.FoldState`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.events.event import Event, EventKind
from chainlab.events.fold_decisions import record_decision
from chainlab.events.status import (
    STEP_NEXT,
    AttemptStatus,
    ErrorKind,
    StepStatus,
    check_reuse,
    check_step,
    step_exists,
)

if TYPE_CHECKING:
    from chainlab.events.fold_state import FoldState, Handler

__all__ = ["HANDLERS"]

S = StepStatus


# the three events of every step's life (ready, started, succeeded) look the step up and
# check the transition inline: the same table as FoldState.set_status, without two calls per
# event
def _on_ready(state: FoldState, ev: Event) -> None:
    st = state.steps.get(ev.step_id) or state.step(ev.step_id or "")  # type: ignore[arg-type]
    if st.status == S.RUNNING:  # recovery of a safe call interrupted by a crash
        state.end_attempt(ev, "call", AttemptStatus.INTERRUPTED)
    if S.READY not in STEP_NEXT[st.status]:
        check_step(st.step_id, st.status, S.READY)
    st.status = S.READY
    st.ready_at = ev.ts
    st.due_at = None
    if ev.payload.get("resolved"):
        record_decision(st, ev, "resolved (retry)")


def _on_started(state: FoldState, ev: Event) -> None:
    st = state.steps.get(ev.step_id) or state.step(ev.step_id or "")  # type: ignore[arg-type]
    if S.RUNNING not in STEP_NEXT[st.status]:
        check_step(st.step_id, st.status, S.RUNNING)
    st.status = S.RUNNING
    p = ev.payload
    st.attempts = ev.attempt or st.attempts + 1
    st.args = p.get("args", st.args)
    st.idempotency_key = p.get("idempotency_key")
    if st.started_at is None:
        st.started_at = ev.ts
    state.begin_attempt(st, "call", st.attempts, ev, st.idempotency_key, code=p.get("code"))


def _on_succeeded(state: FoldState, ev: Event) -> None:
    st = state.steps.get(ev.step_id) or state.step(ev.step_id or "")  # type: ignore[arg-type]
    status = AttemptStatus.SUCCEEDED
    if st.status == S.RUNNING and ev.payload.get("reconciled"):
        status = AttemptStatus.INTERRUPTED
    state.end_attempt(ev, "call", status)
    if S.SUCCEEDED not in STEP_NEXT[st.status]:
        check_step(st.step_id, st.status, S.SUCCEEDED)
    st.status = S.SUCCEEDED
    st.output = ev.payload.get("output")
    st.error = st.error_kind = None
    if ev.payload.get("resolved"):
        st.reason = "resolved by a person"
        record_decision(st, ev, "resolved (it took effect)")
    else:
        st.reason = None
    st.ended_at = ev.ts
    state.completion.append(st.step_id)


def _on_reused(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    check_reuse(st.step_id, st.status)
    st.status = S.SUCCEEDED
    p = ev.payload
    st.output = p.get("output")
    st.args = p.get("args")
    st.reason = p.get("reason")
    st.reused = {
        k: p.get(k)
        for k in ("decision", "source_run", "source_attempt", "code", "tool", "origin")
    }
    st.started_at = st.ended_at = ev.ts
    state.completion.append(st.step_id)


def _on_steps_added(state: FoldState, ev: Event) -> None:
    """A parent grew steps (a for_each step's instances, an agent's calls): one event, all
    or nothing; ``ids`` names them in order (the rest of the payload is the parent kind's:
    a for_each step's ``items``). Each new step is pending, except one a fork reused
    (``reused``: {id: its recorded output, as ``step_reused`` would copy it});
    ``confirm_first`` ({id: card}) marks one that waits for a person even if its tool does
    not ask (a fork's changed effect; a grown sub-chain's steps included)."""
    parent = ev.step_id or ""
    p = ev.payload
    owner = state.step(parent)
    if owner.status == S.READY:  # a for_each step grows as it starts (it makes no call)
        state.set_status(owner, S.RUNNING)
        owner.attempts += 1
        owner.started_at = owner.started_at or ev.ts
    elif owner.status == S.RUNNING:  # an agent's model turn asked for these calls: the
        state.end_attempt(ev, "call", AttemptStatus.SUCCEEDED)  # turn ends (with its usage)
    added = state.children.setdefault(parent, [])
    steps = state.steps
    reuse = p.get("reused") or {}
    for step_id in p["ids"]:
        if step_id in steps:
            raise step_exists(step_id)
        st = state.step(step_id)
        st.parent = parent
        added.append(step_id)
        reused = reuse.get(step_id) if reuse else None
        if reused is not None:
            st.status = S.SUCCEEDED
            st.output = reused.get("output")
            st.args = reused.get("args")
            st.reason = f"reused from run {reused.get('source_run')}"
            st.reused = {k: reused.get(k) for k in
                         ("decision", "source_run", "source_attempt", "code", "tool", "origin")}
            st.started_at = st.ended_at = ev.ts
            state.completion.append(step_id)
    confirm = p.get("confirm_first")
    if confirm:
        state.confirm_first = {**state.confirm_first, **confirm}
    state.growth.append((parent, p))


def _on_failed(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.end_attempt(ev, "call", AttemptStatus.FAILED)
    state.set_status(st, S.FAILED)
    st.reason = "resolved by a person" if ev.payload.get("resolved") else None
    if st.reason:
        record_decision(st, ev, "resolved (failed)")
    st.error_kind = ev.payload.get("error_kind")
    st.error = ev.payload.get("error")
    st.ended_at = ev.ts


def _on_retry(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.end_attempt(ev, "call", AttemptStatus.FAILED)
    state.set_status(st, S.RETRY_WAIT)
    st.error_kind = ev.payload.get("error_kind")
    st.error = ev.payload.get("error")
    st.due_at = ev.payload.get("due_at")


def _on_timed_out(state: FoldState, ev: Event) -> None:
    state.end_attempt(ev, "call", AttemptStatus.TIMED_OUT)
    if ev.payload.get("still_running"):
        state.step(ev.step_id or "").background = True


def _on_call_returned(state: FoldState, ev: Event) -> None:
    state.step(ev.step_id or "").background = False


def _on_skipped(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.set_status(st, S.SKIPPED)
    st.reason = ev.payload.get("reason")
    call = ev.payload.get("call")
    if call is not None:  # an experiment's call not made (needs_live_effect): what it was
        st.preview, st.args = call, call.get("args")


def _on_in_doubt(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    interrupted = ev.payload.get("reason") == ErrorKind.INTERRUPTED
    state.end_attempt(ev, "call",
                      AttemptStatus.INTERRUPTED if interrupted else AttemptStatus.FAILED)
    state.set_status(st, S.IN_DOUBT)
    st.reason = ev.payload.get("reason")
    st.error_kind = ev.payload.get("error_kind", st.error_kind)
    st.error = ev.payload.get("error", st.error)


def _on_cancelled(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.end_attempt(ev, "call", AttemptStatus.CANCELLED)
    state.set_status(st, S.CANCELLED)
    st.reason = ev.payload.get("reason")


def _on_comp_started(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.set_status(st, S.COMPENSATING)
    st.compensations = ev.attempt or st.compensations + 1
    state.begin_attempt(st, "compensation", st.compensations, ev,
                        ev.payload.get("idempotency_key"))


def _on_comp_succeeded(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.end_attempt(ev, "compensation", AttemptStatus.SUCCEEDED)
    state.set_status(st, S.COMPENSATED)


def _on_comp_failed(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    status = (
        AttemptStatus.INTERRUPTED
        if ev.payload.get("error_kind") == ErrorKind.INTERRUPTED
        else AttemptStatus.FAILED
    )
    if ev.payload.get("error_kind") == ErrorKind.TIMEOUT:
        status = AttemptStatus.TIMED_OUT
    state.end_attempt(ev, "compensation", status)
    if not ev.payload.get("will_retry"):
        state.set_status(st, S.COMPENSATION_FAILED)
        st.error = ev.payload.get("error")


HANDLERS: dict[str, Handler] = {
    EventKind.STEP_READY: _on_ready,
    EventKind.STEP_STARTED: _on_started,
    EventKind.STEP_SUCCEEDED: _on_succeeded,
    EventKind.STEP_FAILED: _on_failed,
    EventKind.STEP_RETRY_SCHEDULED: _on_retry,
    EventKind.STEP_TIMED_OUT: _on_timed_out,
    EventKind.STEP_CALL_RETURNED: _on_call_returned,
    EventKind.STEP_SKIPPED: _on_skipped,
    EventKind.STEP_IN_DOUBT: _on_in_doubt,
    EventKind.STEP_CANCELLED: _on_cancelled,
    EventKind.STEP_REUSED: _on_reused,
    EventKind.STEPS_ADDED: _on_steps_added,
    EventKind.COMPENSATION_STARTED: _on_comp_started,
    EventKind.COMPENSATION_SUCCEEDED: _on_comp_succeeded,
    EventKind.COMPENSATION_FAILED: _on_comp_failed,
}
