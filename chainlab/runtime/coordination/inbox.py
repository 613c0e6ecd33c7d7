"""The team inbox: every step that waits for a person, across every unfinished run in a store.

One read path: each unfinished run is folded by :func:`chainlab.events.fold.read_run` (the
fold every front end uses); a step in ``waiting_confirmation`` or ``in_doubt`` is one
:class:`WaitingDecision`. ``chainlab approvals`` prints them, ``%chain approvals`` shows a
card for each; their buttons decide through :meth:`Runtime.decide`. :func:`follow_decisions`
reads them again whenever the store may have changed (issue 40: an inbox read once, when its
cell ran, said "0 decisions wait" while two runs above it waited).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio

from chainlab.errors import RunNotFoundError
from chainlab.events import RUN_TERMINAL, Event, EventKind, RunState, StepStatus, read_run
from chainlab.store.base import Notifier, RunRecord, Store

if TYPE_CHECKING:
    from chainlab.runtime.host import Host

__all__ = ["DecisionKind", "WaitingDecision", "follow_decisions", "waiting_decisions",
           "waiting_in"]

DecisionKind = Literal["confirm", "in_doubt"]

#: the step status that puts a step in the inbox, and the event that put it there
_WAITS: dict[StepStatus, tuple[DecisionKind, EventKind]] = {
    StepStatus.WAITING_CONFIRMATION: ("confirm", EventKind.STEP_WAITING_CONFIRMATION),
    StepStatus.IN_DOUBT: ("in_doubt", EventKind.STEP_IN_DOUBT),
}


@dataclass(frozen=True, slots=True)
class WaitingDecision:
    """One step that waits for a person's decision.

    ``kind``: ``confirm`` (approve or reject it) or ``in_doubt`` (resolve it: it took
    effect with an output, retry it, or fail it). ``preview``: what the approver sees (the
    tool's preview, else the resolved args) or, in doubt, the error. ``since``: the time of
    the event that put the step there. ``seq``: that event's seq."""

    run_id: str
    step_id: str
    tool: str | None
    kind: DecisionKind
    preview: Any
    since: float
    chain: str
    args: dict[str, Any] | None = None
    error: str | None = None
    attempt: int = 0
    seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (``chainlab approvals --json``)."""
        return asdict(self)


def waiting_in(record: RunRecord, events: list[Event], state: RunState
               ) -> list[WaitingDecision]:
    """The steps of one folded run that wait for a person, in step order."""
    if state.status in RUN_TERMINAL:
        return []
    tools = {s["id"]: s.get("tool") for s in record.chain.get("steps", [])}
    for rec in state.attempts:
        if rec.kind == "call" and rec.tool:
            tools.setdefault(rec.step_id, rec.tool)
    out = []
    for step_id, st in state.steps.items():
        wait = _WAITS.get(st.status)
        if wait is None:
            continue
        kind, event_kind = wait
        cause = next((ev for ev in reversed(events)
                      if ev.step_id == step_id and ev.kind == event_kind), None)
        tool = tools.get(step_id) or (cause.payload.get("tool") if cause else None)
        if kind == "confirm":
            preview = st.preview if st.preview is not None else st.args
            error = None
        else:
            error = f"{st.error_kind}: {st.error}" if st.error_kind else st.error
            preview = error
        out.append(WaitingDecision(
            run_id=record.run_id, step_id=step_id, tool=tool, kind=kind, preview=preview,
            since=cause.ts if cause is not None else (st.waiting_since or 0.0),
            chain=record.chain_name, args=st.args, error=error, attempt=st.attempts,
            seq=cause.seq if cause is not None else 0))
    return out


def waiting_decisions(store: Store, run_ids: Iterable[str] | None = None
                      ) -> list[WaitingDecision]:
    """Every waiting confirmation and in-doubt step of every unfinished run in ``store``
    (or of the runs ``run_ids``), oldest first. A run that ended (or vanished) between the
    listing and its read is left out.

    Raises StoreError if the store cannot be read."""
    if run_ids is None:
        run_ids = [r.run_id for r in store.list_runs(None) if r.status not in RUN_TERMINAL]
    out: list[WaitingDecision] = []
    for run_id in run_ids:
        try:
            record, events, state = read_run(store, run_id)
        except RunNotFoundError:
            continue
        out += waiting_in(record, events, state)
    out.sort(key=lambda d: (d.since, d.run_id, d.seq))
    return out


def _moved(store: Store) -> tuple[tuple[str, str, float], ...]:
    """What changes whenever a decision may have come or gone: every unfinished run with
    its status and the time of its last event (one read of the run list)."""
    return tuple((r.run_id, str(r.status), r.updated_at) for r in store.list_runs(None)
                 if r.status not in RUN_TERMINAL)


async def follow_decisions(host: Host, *, poll_s: float = 1.0
                           ) -> AsyncIterator[list[WaitingDecision]]:
    """The waiting decisions of ``host``'s store (a runtime's parts: ``runtime.host``) now,
    then again each time they changed, until the caller stops iterating. A store that
    notifies commits (PostgreSQL's NOTIFY, :class:`~chainlab.store.base.Notifier`) wakes the
    follower; any other store is polled:
    one read of the run list every ``poll_s`` seconds, the decisions read again only when a
    run moved. Raises StoreError when the store cannot be read."""
    store = host.store
    notifier = store if isinstance(store, Notifier) else None
    commits = -1
    if notifier is not None:  # listen BEFORE the first read: no commit falls in between
        commits = await host.run_io(notifier.wait_for_commit, commits, 0.0)
    seen: tuple[tuple[str, str, float], ...] | None = None
    shown: list[tuple[str, str, str, int, int]] | None = None
    while True:
        moved = await host.run_io(_moved, store)
        if moved != seen:  # a run moved: its decisions may have changed
            seen = moved
            items = await host.run_io(waiting_decisions, store, [r for r, *_ in moved])
            now = [(d.run_id, d.step_id, d.kind, d.seq, d.attempt) for d in items]
            if now != shown:
                shown = now
                yield items
        if notifier is not None:
            commits = await anyio.to_thread.run_sync(
                notifier.wait_for_commit, commits, max(poll_s, 5.0), abandon_on_cancel=True)
        else:
            await anyio.sleep(poll_s)
