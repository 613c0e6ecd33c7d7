"""A run's attempts, compensations, waits and events as pandas DataFrames.

Everything here is built from the store only (``store.get_run`` + ``store.load_events``,
folded by :class:`chainlab.events.fold.RunState`, the fold the runtime itself uses), so it
works for a live run, a finished one and one written by another process.

Frames (all times are ``datetime64[ns, UTC]``; NaT/NaN while something is still open):

``attempts_frame`` - one row per tool call and per compensation call, in start order:
    run_id, step_id (``parent/child`` in sub-chains), tool, kind (``call`` |
    ``compensation``: one spelling in frames, the SQL ``attempts`` view and the CLI),
    attempt (1-based, per step and kind), epoch (writer epoch), status
    (``succeeded`` | ``failed`` | ``timed_out`` | ``cancelled`` | ``interrupted`` |
    ``running``), error_kind, error, started_at, ended_at, duration_s, retry_delay_s (the
    back-off scheduled after this attempt), idempotency_key (None for effect-free tools),
    code (fingerprint of the tool's code the attempt ran; None for compensations),
    input_tokens, output_tokens, tokens, cost (what the call reported it consumed:
    ``ctx.report_usage`` or an OpenAI-style response; NaN when it reported nothing),
    decided_by (who or what approved the call: ``policy ID``, ``grant g1 by alice, run
    scope``, a principal; None for a call nobody had to decide).
    A sub-chain step has one row (tool ``chain:NAME``) spanning its steps' rows.
``compensations_frame`` - the ``kind == "compensation"`` rows of ``attempts_frame``.
``waits_frame`` - time a step spent waiting between or instead of attempts: step_id, kind
    (``backoff`` | ``confirmation`` | ``in_doubt`` | ``job``: a remote job waited on, holding
    no slot), started_at, ended_at, duration_s,
    outcome (``retried``, ``approved``, ``rejected``, ``resolved``, ``cancelled``, or None
    while waiting).
``decisions_frame`` - the audit of who decided what (DESIGN §21), one row per decided step
    in the order decided: step_id, tool, args, action (``approved`` | ``rejected`` |
    ``resolved: ...``), by (a principal, ``policy:ID``, ``grant:ID``), decided_by (its
    wording), decided_at.
``events_frame`` - the event log: run_id, seq, ts, elapsed_s (since the first event), epoch,
    kind, step_id, attempt (nullable Int64), payload (dict).
``runs_frame`` - one row per run, newest first: run_id, chain_name, status, epoch,
    created_at, updated_at, duration_s (updated - created), steps (top-level step count),
    forked_from (the parent's run id for a fork, else None).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from chainlab.events import Event
from chainlab.events.fold import RunState, read_run
from chainlab.events.fold_decisions import decided_by

if TYPE_CHECKING:
    from chainlab.store.base import RunRecord, Store

__all__ = [
    "ATTEMPT_COLUMNS",
    "DECISION_COLUMNS",
    "EVENT_COLUMNS",
    "RUN_COLUMNS",
    "WAIT_COLUMNS",
    "attempts_frame",
    "compensations_frame",
    "decisions_frame",
    "estimates_frame",
    "events_frame",
    "fork_plan_frame",
    "load",
    "runs_frame",
    "wait_spans",
    "waits_frame",
]


ATTEMPT_COLUMNS = ["run_id", "step_id", "tool", "kind", "attempt", "epoch", "status",
                   "error_kind", "error", "started_at", "ended_at", "duration_s",
                   "retry_delay_s", "idempotency_key", "code", "input_tokens",
                   "output_tokens", "tokens", "cost", "decided_by"]
DECISION_COLUMNS = ["step_id", "tool", "args", "action", "by", "decided_by", "decided_at"]
WAIT_COLUMNS = ["step_id", "kind", "started_at", "ended_at", "duration_s", "outcome"]
EVENT_COLUMNS = ["run_id", "seq", "ts", "elapsed_s", "epoch", "kind", "step_id", "attempt",
                 "payload"]
RUN_COLUMNS = ["run_id", "chain_name", "status", "epoch", "created_at", "updated_at",
               "duration_s", "steps", "forked_from"]


def _times(values: Iterable[float | None]) -> pd.Series:
    return pd.to_datetime(pd.Series([float("nan") if v is None else v for v in values],
                                    dtype="float64"), unit="s", utc=True)


def load(store: Store, run_id: str) -> tuple[RunRecord, list[Event], RunState]:
    """``(record, events, state)`` of a stored run (:func:`chainlab.events.fold.read_run`, typed).

    Raises RunNotFoundError for an unknown run."""
    return read_run(store, run_id)  # type: ignore[no-any-return]


def attempts_frame(store: Store, run_id: str) -> pd.DataFrame:
    """Every attempt and compensation of a run (columns: see the module docstring).

    Raises RunNotFoundError for an unknown run.
    """
    _, _, state = load(store, run_id)
    recs = state.attempts
    frame = pd.DataFrame({
        "run_id": pd.Series([run_id] * len(recs), dtype="object"),
        "step_id": pd.Series([r.step_id for r in recs], dtype="object"),
        "tool": pd.Series([r.tool for r in recs], dtype="object"),
        "kind": pd.Series([r.kind for r in recs],
                          dtype="object"),
        "attempt": pd.Series([r.attempt for r in recs], dtype="int64"),
        "epoch": pd.Series([r.epoch for r in recs], dtype="int64"),
        "status": pd.Series([str(r.status) for r in recs], dtype="object"),
        "error_kind": pd.Series([r.error_kind for r in recs], dtype="object"),
        "error": pd.Series([r.error for r in recs], dtype="object"),
        "started_at": _times(r.started_at for r in recs),
        "ended_at": _times(r.ended_at for r in recs),
        "duration_s": pd.Series([r.duration_s for r in recs], dtype="float64"),
        "retry_delay_s": pd.Series([r.retry_delay_s for r in recs], dtype="float64"),
        "idempotency_key": pd.Series([r.idempotency_key for r in recs], dtype="object"),
        # which version of the tool's code the attempt ran (a fork reruns changed tools)
        "code": pd.Series([r.code for r in recs], dtype="object"),
        **{name: pd.Series([(r.usage or {}).get(name, float("nan")) for r in recs],
                           dtype="float64")
           for name in ("input_tokens", "output_tokens", "tokens", "cost")},
        # who or what decided the call (DESIGN §21): a person, a rule, a grant
        "decided_by": pd.Series([decided_by(state, r.step_id) if r.kind == "call" else None
                                 for r in recs], dtype="object"),
    }, columns=ATTEMPT_COLUMNS)
    return frame


def compensations_frame(store: Store, run_id: str) -> pd.DataFrame:
    """The compensation rows of :func:`attempts_frame` (same columns, renumbered index)."""
    frame = attempts_frame(store, run_id)
    return frame[frame["kind"] == "compensation"].reset_index(drop=True)


_WAIT_OPEN = {"step_retry_scheduled": "backoff", "step_waiting_confirmation": "confirmation",
              "step_in_doubt": "in_doubt", "job_submitted": "job"}
# a back-off ends when the step is due again (step_ready), not when a slot frees up
_WAIT_CLOSE: dict[str, dict[str, str | None]] = {
    "backoff": {"step_ready": "retried", "step_started": "retried", "step_cancelled": "cancelled",
                "step_skipped": "cancelled", "step_failed": "cancelled"},
    "confirmation": {"step_approved": "approved", "step_rejected": "rejected",
                     "step_skipped": "cancelled", "step_cancelled": "cancelled",
                     "step_waiting_confirmation": "asked again"},
    "in_doubt": {"step_succeeded": "resolved", "step_failed": "resolved",
                 "step_ready": "retried"},
    # a remote job's wait: from its recorded handle to the step's end (no slot held)
    "job": {"step_succeeded": "succeeded", "step_failed": "failed", "step_in_doubt": "in doubt",
            "step_cancelled": "cancelled", "step_retry_scheduled": "failed",
            "step_timed_out": "timed out", "step_ready": "resubmitted"},
}


def wait_spans(events: Iterable[Event]) -> list[tuple[str, str, float, float | None, str | None]]:
    """(step_id, kind, start, end, outcome) of every wait, in start order."""
    open_: dict[str, tuple[str, float, int]] = {}  # step -> (kind, start, row)
    rows: list[tuple[str, str, float, float | None, str | None]] = []
    for ev in events:
        step_id = ev.step_id
        if step_id is None:
            continue
        current = open_.get(step_id)
        if current is not None:
            kind, start, row = current
            closing = _WAIT_CLOSE[kind]
            outcome = closing.get(ev.kind)
            if outcome is not None:
                rows[row] = (step_id, kind, start, ev.ts, outcome)
                del open_[step_id]
        if ev.kind in _WAIT_OPEN:
            open_[step_id] = (_WAIT_OPEN[ev.kind], ev.ts, len(rows))
            rows.append((step_id, _WAIT_OPEN[ev.kind], ev.ts, None, None))
    return rows


def waits_frame(store: Store, run_id: str) -> pd.DataFrame:
    """Back-off, confirmation and in-doubt waits of a run (columns: module docstring)."""
    _, events, _ = load(store, run_id)
    rows = wait_spans(events)
    return pd.DataFrame({
        "step_id": pd.Series([r[0] for r in rows], dtype="object"),
        "kind": pd.Series([r[1] for r in rows], dtype="object"),
        "started_at": _times(r[2] for r in rows),
        "ended_at": _times(r[3] for r in rows),
        "duration_s": pd.Series([None if r[3] is None else r[3] - r[2] for r in rows],
                                dtype="float64"),
        "outcome": pd.Series([r[4] for r in rows], dtype="object"),
    }, columns=WAIT_COLUMNS)


def decisions_frame(store: Store, run_id: str) -> pd.DataFrame:
    """Who decided what in a run, in the order decided (columns: module docstring).
    Raises RunNotFoundError for an unknown run."""
    _, _, state = load(store, run_id)
    decided = sorted((st for st in state.steps.values() if st.decided),
                     key=lambda st: (st.decided or {}).get("ts") or 0.0)
    tools: dict[str, Any] = {rec.step_id: rec.tool for rec in state.attempts}
    return pd.DataFrame([{
        "step_id": st.step_id, "tool": tools.get(st.step_id), "args": st.args,
        "action": (st.decided or {})["action"], "by": (st.decided or {}).get("by"),
        "decided_by": decided_by(state, st.step_id),
        "decided_at": pd.Timestamp((st.decided or {}).get("ts") or 0.0, unit="s", tz="UTC"),
    } for st in decided], columns=DECISION_COLUMNS)


def events_frame(store: Store, run_id: str) -> pd.DataFrame:
    """The run's event log, one row per event in ``seq`` order (columns: module docstring)."""
    events = store.load_events(run_id)
    if not events:
        store.get_run(run_id)  # raises RunNotFoundError for an unknown run
    t0 = events[0].ts if events else 0.0
    return pd.DataFrame({
        "run_id": pd.Series([e.run_id for e in events], dtype="object"),
        "seq": pd.Series([e.seq for e in events], dtype="int64"),
        "ts": _times(e.ts for e in events),
        "elapsed_s": pd.Series([e.ts - t0 for e in events], dtype="float64"),
        "epoch": pd.Series([e.epoch for e in events], dtype="int64"),
        "kind": pd.Series([e.kind for e in events], dtype="object"),
        "step_id": pd.Series([e.step_id for e in events], dtype="object"),
        "attempt": pd.Series([e.attempt for e in events], dtype="Int64"),
        "payload": pd.Series([dict(e.payload) for e in events], dtype="object"),
    }, columns=EVENT_COLUMNS)


def runs_frame(store: Store, limit: int | None = None) -> pd.DataFrame:
    """Runs in the store, newest first (columns: module docstring)."""
    runs = store.list_runs(limit)
    return pd.DataFrame({
        "run_id": pd.Series([r.run_id for r in runs], dtype="object"),
        "chain_name": pd.Series([r.chain_name for r in runs], dtype="object"),
        "status": pd.Series([str(r.status) for r in runs], dtype="object"),
        "epoch": pd.Series([r.epoch for r in runs], dtype="int64"),
        "created_at": _times(r.created_at for r in runs),
        "updated_at": _times(r.updated_at for r in runs),
        "duration_s": pd.Series([r.updated_at - r.created_at for r in runs], dtype="float64"),
        "steps": pd.Series([len(r.chain.get("steps", [])) for r in runs], dtype="int64"),
        # lineage: the run a fork was started from (None for a run started from a chain)
        "forked_from": pd.Series([r.meta.get("forked_from") for r in runs], dtype="object"),
    }, columns=RUN_COLUMNS)


def estimates_frame(estimates: Iterable[Any]) -> pd.DataFrame:
    """Duration estimates (:class:`chainlab.runtime.history.estimates.Estimate`) as a frame,
    with the median cost and tokens of one call (NaN when no call reported usage)."""
    cols = ["step_id", "tool", "median_s", "p90_s", "samples", "source", "cost", "tokens"]
    return pd.DataFrame([{c: getattr(e, c) for c in cols} for e in estimates], columns=cols)


class _WholeText(pd.DataFrame):
    """A frame whose cells print whole: pandas cuts a cell at ``display.max_colwidth`` (50
    characters), and a fork plan's reason puts its key words last ("...; side-effecting:
    needs approval"). Slicing it gives a plain frame."""

    def __repr__(self) -> str:
        with pd.option_context("display.max_colwidth", None):
            return super().__repr__()

    def _repr_html_(self) -> str | None:
        with pd.option_context("display.max_colwidth", None):
            return super()._repr_html_()


def fork_plan_frame(plan: Any) -> pd.DataFrame:
    """A fork plan (:class:`chainlab.runtime.history.fork.ForkPlan`) as a frame: step, tool,
    parent (its status in the parent run), decision, reason (shown uncut, issue 29)."""
    return _WholeText(plan.table(), columns=["step", "tool", "parent", "decision", "reason"])
