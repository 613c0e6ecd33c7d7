"""The fold's handlers for what a person decides (part of the fold,
:mod:`chainlab.events.fold`, which dispatches every event kind to one handler).

A step waits for a person (its tool asks, a fork asks first, or the run's budget ran out),
then is approved (perhaps with edited args, perhaps raising the run's budget) or rejected;
a step in doubt is resolved by a person through the step events (see
:mod:`chainlab.events.fold_steps`), which record that decision with
:func:`record_decision` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab.events.event import Event, EventKind
from chainlab.events.status import StepStatus

if TYPE_CHECKING:
    from chainlab.events.fold_state import FoldState, Handler, StepState

__all__ = ["HANDLERS", "decided_by", "grant_status", "grants_of", "record_decision"]

S = StepStatus


def record_decision(st: StepState, ev: Event, action: str) -> None:
    """Keep the last decision on step ``st``: ``action``, who or what (``by``: a principal,
    ``policy:ID``, ``grant:ID``) and when."""
    st.decided = {"action": action, "by": ev.payload.get("by"), "ts": ev.ts}


def decided_by(state: FoldState, step_id: str) -> str | None:
    """Who or what decided step ``step_id``, for a reader: ``policy small-refunds: why``,
    ``grant g2 by alice, run scope``, or the principal (None: nobody decided it). The one
    wording the CLI, the JSON view, the timeline and the widgets show."""
    st = state.steps.get(step_id)
    by = (st.decided or {}).get("by") if st is not None else None
    if not by:
        return None
    if by.startswith("policy:"):
        reason = (st.approval or {}).get("reason") if st is not None and st.approval else None
        reason = reason or (st.reason if st is not None and st.status == S.REJECTED else None)
        return f"policy {by[7:]}" + (f": {reason}" if reason else "")
    if by.startswith("grant:"):
        g = state.grants.get(by[6:])
        return f"grant {by[6:]}" + (f" by {g['by']}, {g['scope']} scope" if g else "")
    return str(by)


def grant_status(g: Mapping[str, Any], now: float, rules: str | None) -> str:
    """``active``, ``revoked``, ``expired`` or ``stale`` (the rules changed since; not
    told when ``rules`` is None)."""
    if g.get("revoked"):
        return "revoked"
    if g.get("expires_at") is not None and now >= g["expires_at"]:
        return "expired"
    if rules is not None and g.get("rules") != rules:
        return "stale"
    return "active"


def grants_of(state: FoldState, now: float, rules: str | None) -> list[dict[str, Any]]:
    """The run's grants with their status (``active``, ``revoked``, ``expired``,
    ``stale``) and the calls each decided."""
    decided: dict[str, list[str]] = {}
    for sid, st in state.steps.items():
        by = (st.decided or {}).get("by") or ""
        if by.startswith("grant:"):
            decided.setdefault(by[6:], []).append(sid)
    return [{**g, "status": grant_status(g, now, rules), "decided": decided.get(gid, [])}
            for gid, g in state.grants.items()]


def _on_waiting(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.set_status(st, S.WAITING_CONFIRMATION)
    p = ev.payload
    st.args = p.get("args")
    st.args_hash = p.get("args_hash")
    st.preview = p.get("preview")
    st.approved_hash = None
    st.waiting_since = ev.ts
    st.reason = p.get("reason")  # budget_exceeded, or None: the tool asks


def _on_approved(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.set_status(st, S.READY)
    st.reason = None
    p = ev.payload
    if p.get("args") is not None:
        st.args = p["args"]
    st.args_hash = p.get("args_hash", st.args_hash)
    st.approved_hash = st.args_hash
    st.approval = {"note": p.get("note"), "edited": p.get("args") is not None, "ts": ev.ts,
                   "by": p.get("by"), "over_budget": bool(p.get("over_budget")),
                   "reason": p.get("reason")}
    if p.get("budget") is not None:  # a person raised the run's budget
        state.budget = dict(p["budget"])
    grant = p.get("grant")
    if grant is not None:  # a person's approval that decides more calls (DESIGN §21)
        state.grants[grant["id"]] = {**grant, "step_id": st.step_id, "by": p.get("by"),
                                     "ts": ev.ts, "revoked": None}
    record_decision(st, ev, "approved")


def _on_grant_revoked(state: FoldState, ev: Event) -> None:
    grant = state.grants.get(ev.payload.get("grant_id") or "")
    if grant is not None and grant["revoked"] is None:
        state.grants[grant["id"]] = {**grant, "revoked": {"by": ev.payload.get("by"),
                                                          "ts": ev.ts}}


def _on_rejected(state: FoldState, ev: Event) -> None:
    st = state.step(ev.step_id or "")
    state.set_status(st, S.REJECTED)
    st.reason = ev.payload.get("reason")
    st.ended_at = ev.ts
    record_decision(st, ev, "rejected")


HANDLERS: dict[str, Handler] = {
    EventKind.STEP_WAITING_CONFIRMATION: _on_waiting,
    EventKind.STEP_APPROVED: _on_approved,
    EventKind.STEP_REJECTED: _on_rejected,
    EventKind.GRANT_REVOKED: _on_grant_revoked,
}
