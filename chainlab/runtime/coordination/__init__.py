"""Many processes, one store (DESIGN §13, §19): driver heartbeats and the decision mailbox
(:mod:`.liveness`), decisions sent to a run's driver through the store (:mod:`.routing`),
following a run another process drives (:mod:`.watching`), the cross-run inbox of what
waits for a person (:mod:`.inbox`) and of the runs that stand still with nothing to decide
(:mod:`.stalls`: nobody drives one, or its concurrency key is held), and the worker fleet:
what an enqueue checks (:mod:`.queue`) and the worker that claims and drives queued runs
(:mod:`.workers`).

This code sees a runtime only as a :class:`Host`: the few members it needs, which
:class:`~chainlab.runtime.Runtime` has. It never touches a runtime's private state. A
driver's liveness needs less, the runtime's parts
(:class:`~chainlab.runtime.run_view.RuntimeParts`): so ``Host`` names ``Liveness`` and
``Liveness`` never names ``Host``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from chainlab.runtime.run import RunOwner

if TYPE_CHECKING:
    from chainlab.events import Event
    from chainlab.runtime.coordination.liveness import Liveness
    from chainlab.runtime.run import Run
    from chainlab.store.queue import Claim

__all__ = ["Host"]


class Host(RunOwner, Protocol):
    """What coordination code needs of the runtime it works for: besides what a run's
    handle uses of it (:class:`~chainlab.runtime.run.RunOwner`), its liveness as a driver,
    the runs it drives, a fleet worker's claims, and reading and deciding runs."""

    liveness: Liveness

    def driven(self, run_id: str) -> Run | None:
        """The run's handle if this runtime drives it now, else None."""

    async def claimed(self, claim: Claim) -> Run:
        """Drive a run a fleet worker's claim took (the epoch is already the claimant's)."""

    def release(self, run_id: str) -> bool:
        """Stop driving a suspended run here, leaving it in the store (True when it was)."""

    async def aclose(self) -> None:
        """Stop driving every run here (they stay in the store for the next driver)."""

    def watch(self, run_id: str, *, after_seq: int = 0, follow: bool = False,
              poll_interval: float = 0.05) -> AsyncIterator[Event]:
        """The run's committed events after ``after_seq``, as they are committed."""

    async def approve_all(self, run_id: str, step_id: str, *, by: str | None = None,
                          note: str | None = None, timeout: float = 10.0) -> list[str]:
        """Approve every step waiting at or under ``step_id``, each with its own args."""
