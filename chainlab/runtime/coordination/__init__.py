"""Many processes, one store (DESIGN §13, §19): driver heartbeats and the decision mailbox
(:mod:`.liveness`), decisions sent to a run's driver through the store (:mod:`.routing`),
following a run another process drives (:mod:`.watching`), the cross-run inbox of what
waits for a person (:mod:`.inbox`), and the worker fleet: what an enqueue checks
(:mod:`.queue`) and the worker that claims and drives queued runs (:mod:`.workers`).

This code sees a runtime only as a :class:`Host`: the few members it needs, which
:class:`~chainlab.runtime.Runtime` has. It never touches a runtime's private state."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chainlab.events import RunState
    from chainlab.runtime.coordination.liveness import Liveness
    from chainlab.runtime.engine.executors import Executor
    from chainlab.runtime.run import Run
    from chainlab.store.base import Store
    from chainlab.store.queue import Claim

__all__ = ["Host"]


class Host(Protocol):
    """What coordination code needs of the runtime it works for."""

    store: Store
    liveness: Liveness
    executor: Executor

    async def run_io(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a store method (in a worker thread when the store blocks)."""

    def spawn(self, coro_fn: Callable[[], Any]) -> None:
        """Run a coroutine function in the background, in the runtime's lifetime."""

    def driven(self, run_id: str) -> Run | None:
        """The run's handle if this runtime drives it now, else None."""

    async def resume(self, run_id: str, *, check: Callable[[RunState], None] | None = None,
                     force: bool = False) -> Run:
        """Take the run over in this process (check-and-claim)."""

    async def claimed(self, claim: Claim) -> Run:
        """Drive a run a fleet worker's claim took (the epoch is already the claimant's)."""

    def release(self, run_id: str) -> bool:
        """Stop driving a suspended run here, leaving it in the store (True when it was)."""

    async def aclose(self) -> None:
        """Stop driving every run here (they stay in the store for the next driver)."""
