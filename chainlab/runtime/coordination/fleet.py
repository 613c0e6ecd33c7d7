"""A worker of the fleet with its own runtime (DESIGN §19): :func:`new_worker` builds the
:class:`~chainlab.runtime.runtime.Runtime` a worker process drives its claims on (the
worker's liveness settings, calls through a :class:`LeaseExecutor`) and the
:class:`~chainlab.runtime.coordination.workers.Worker` over it. ``chainlab worker`` and the
tests start workers this way::

    worker = new_worker(toolbox, open_store(url), name="w1", queues=["default"])
    await worker.run()          # until worker.drain() (SIGTERM, Ctrl-C)

It sits beside the worker it builds, and is the one module of coordination that names the
Runtime (it makes one): above the Runtime in the runtime's sub-layers
(``RUNTIME_SUBLAYERS`` in tests/test_layering.py). ``chainlab.runtime`` exports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chainlab.runtime.coordination.workers import (
    WORKER_HEARTBEAT_S,
    WORKER_STALE_AFTER_S,
    LeaseExecutor,
    Worker,
)
from chainlab.runtime.engine.executors import SubmittingExecutor
from chainlab.runtime.runtime import Runtime
from chainlab.store.queue import DEFAULT_QUEUE

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["new_worker"]


def new_worker(toolbox: Toolbox, store: Store, *, name: str | None = None,
               queues: Sequence[str] = (DEFAULT_QUEUE,), concurrency: int = 4,
               chains: Mapping[str, Chain] | None = None,
               executor: SubmittingExecutor | None = None,
               heartbeat_s: float = WORKER_HEARTBEAT_S,
               stale_after_s: float = WORKER_STALE_AFTER_S,
               policies: Sequence[Any] = (), **options: Any) -> Worker:
    """A :class:`Worker` of ``queues`` over a new runtime of ``toolbox`` and ``store`` (which
    must keep a queue: SQLite or PostgreSQL). Its runs beat every ``heartbeat_s`` and count
    as dead after ``stale_after_s`` without a beat; every call goes through a lease check
    (:class:`LeaseExecutor`, over ``executor``); ``policies``: the deployment's rules
    (DESIGN §21, as ``Runtime(policies=...)``). ``options``: the rest of
    :class:`Worker`'s (``poll_s``, ``drain_s``, ``same_host_check``)."""
    runtime = Runtime(toolbox, store, chains=chains, heartbeat_s=heartbeat_s,
                      stale_after_s=stale_after_s, policies=policies)
    # half the lapse: a worker confirms a run again before anyone could count it dead
    runtime.host.executor = LeaseExecutor(runtime.host, stale_after_s / 2, executor)
    return Worker(runtime, name=name, queues=tuple(queues), concurrency=concurrency,
                  **options)
