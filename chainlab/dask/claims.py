"""One attempt, one start, on a Dask cluster (DESIGN §20; the executor is
:class:`chainlab.dask.DaskExecutor`).

Dask starts a task again when its worker died or lost the result (``allowed-failures``, 3 by
default). A tool body must not run twice for one attempt, so the task claims its attempt
(run, step, kind, attempt number, epoch) on the scheduler before the tool is called
(:func:`claim_on_worker`); :class:`AttemptClaims`, a scheduler plugin, answers each claim in
one step of the scheduler's event loop, so of two starts only one can win, and a start under
an epoch older than one already seen for the run is refused (a fenced driver's late task).
The executor claims an attempt itself when it stops waiting for a task (a timeout, the run
cancelled, ``KilledWorker``): a body that had not started then never starts, and the answer
says whether one had.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from typing import TYPE_CHECKING, Any

import distributed
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.utils import sync as _dask_sync

from chainlab.errors import TransientError

if TYPE_CHECKING:
    from chainlab.tools import CallContext

__all__ = ["AttemptClaims", "AttemptRefused", "attempt_id", "claim_on_worker"]


class AttemptRefused(TransientError):
    """Raised by a task body whose attempt was already claimed (by an earlier start of the
    same task, or by the executor), or whose epoch is older than one seen for its run: the
    tool was not called by THIS start."""


class AttemptClaims(SchedulerPlugin):
    """The scheduler's record of which attempts a task body has started (one claim per
    run, step, kind, attempt and epoch; the highest epoch seen per run). :meth:`claim` runs
    in one step of the scheduler's event loop, so two starts can never both win. A claim is
    kept while its task lives (Dask may start it again), and after that among the last
    ``keep`` ended ones (a late second submission of the same attempt is refused too);
    the registry's memory is bounded by the live tasks plus ``keep``."""

    name = "chainlab-attempt-claims"
    idempotent = True

    def __init__(self, keep: int = 100_000) -> None:
        self.keep = keep
        self.claims: dict[str, str] = {}  # attempt -> who claimed it
        self.live: dict[str, list[str]] = {}  # task key -> attempts claimed under it
        self.ended: deque[str] = deque()  # claims whose task is forgotten, oldest first
        self.epochs: dict[str, int] = {}  # run id -> highest epoch seen (last `keep` runs)

    # sync on purpose: the scheduler checks "already registered?" and registers in the
    # same loop step only when start() returns no awaitable (two executors, one registry)
    def start(self, scheduler: Any) -> None:  # type: ignore[override]
        self.scheduler = scheduler
        scheduler.handlers["chainlab_claim_attempt"] = self.claim

    def claim(self, attempt: str, run_id: str, epoch: int, by: str, task: str
              ) -> dict[str, Any]:
        """Claim ``attempt`` for ``by``: ``{"ok": True}``, or ``{"ok": False, "why": ...}``
        when it was claimed before or ``epoch`` is stale (no await: atomic)."""
        newest = self.epochs.get(run_id, epoch)
        if epoch < newest:
            return {"ok": False, "why": f"epoch {epoch} is stale (the run is at {newest})"}
        held = self.claims.get(attempt)
        if held is not None:
            return {"ok": False, "why": f"attempt already claimed by {held}"}
        self.claims[attempt] = by
        self.epochs.pop(run_id, None)  # most recent last
        self.epochs[run_id] = epoch
        if len(self.epochs) > self.keep:
            del self.epochs[next(iter(self.epochs))]
        if task in self.scheduler.tasks:
            self.live.setdefault(task, []).append(attempt)
        else:  # forgotten already: nothing can start it again
            self._ended(attempt)
        return {"ok": True}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "forgotten" and key in self.live:
            for attempt in self.live.pop(key):
                self._ended(attempt)

    def _ended(self, attempt: str) -> None:
        self.ended.append(attempt)
        while len(self.ended) > self.keep:
            self.claims.pop(self.ended.popleft(), None)


def attempt_id(ctx: CallContext) -> str:
    return json.dumps([ctx.run_id, ctx.step_id, ctx.kind, ctx.attempt, ctx.epoch])


def claim_on_worker(claim: dict[str, Any], label: str) -> None:
    """Claim this task's attempt before its tool is called; raises AttemptRefused."""
    worker = distributed.get_worker()
    by = f"{worker.address} (start {secrets.token_hex(4)})"
    try:
        answer = _dask_sync(worker.loop, worker.scheduler.chainlab_claim_attempt, **claim,
                            by=by, task=str(worker.get_current_task()))
    except Exception as exc:
        raise AttemptRefused(f"{label}: cannot claim the attempt on the scheduler "
                             f"({type(exc).__name__}: {exc}); the tool was not called") from None
    if not answer.get("ok"):
        raise AttemptRefused(f"{label}: {answer.get('why')}; the tool was not called")
