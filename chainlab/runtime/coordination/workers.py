"""A worker of the fleet (DESIGN §19): one process that claims the runs of its queues from the
store and drives them on its runtime's kernel (``chainlab worker`` runs one).

The loop (:meth:`Worker.run`):

* **claim** while a slot is free (``concurrency``): one :meth:`Queue.claim_next` per claim,
  the queues taken in turn (a fair share: a backlog in one queue never starves another;
  inside a queue the oldest run goes first). A claim is a queued run (driven from its
  start), a run whose driver's heartbeat lapsed (recovered: an unsafe call in flight at
  the old driver's death becomes in_doubt, never repeated), or a suspended run a person
  decided from anywhere (the decision waits in its mailbox; the liveness task applies it).
  A run this worker's toolbox cannot run is handed back untouched, skipped from then on,
  and named in the worker's ``note`` (``chainlab workers`` shows it).
* **release** every run that suspends: a suspended run holds no worker.
* **beat** every ``heartbeat_s``: its row in ``workers`` (state, note), and a look at the
  other workers of this host: one whose process is gone is forgotten at once, so its runs
  are claimed again without waiting for their heartbeats to lapse.
* **drain** on :meth:`Worker.drain` (SIGTERM, Ctrl-C): no new claims; runs go on to their
  next resting point (end or suspension) for at most ``drain_s``, then what still runs is
  handed back (its driver row goes: the next worker claims it at once).

Fencing makes a zombie harmless: the claim took the run's epoch, so a worker frozen past
its lapse (SIGSTOP) and continued commits nothing (every write is refused) and, through
:class:`LeaseExecutor`, starts no call: before a call, a run not confirmed within
``lease_s`` is confirmed by a heartbeat, a write fenced by the epoch, which also renews it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import ChainlabError, PlanError, StaleEpochError, ToolDefinitionError
from chainlab.events import RUN_TERMINAL, RunStatus
from chainlab.runtime.coordination.liveness import pid_alive
from chainlab.runtime.engine.executors import LocalExecutor, Pending, SubmittingExecutor
from chainlab.store.base import DecisionRequest, DriverInfo
from chainlab.store.queue import DEFAULT_QUEUE, Claim, Queue, WorkerInfo, check_queue_name

if TYPE_CHECKING:
    from chainlab.runtime.host import Host
    from chainlab.runtime.run import Run
    from chainlab.runtime.runtime import Runtime
    from chainlab.tools import CallContext, Tool

__all__ = ["LeaseExecutor", "Worker", "worker_settings"]

log = logging.getLogger(__name__)

#: a worker's runtime beats its runs every second and counts a driver dead after 5 s without
#: a beat (``Runtime(heartbeat_s=1, stale_after_s=5)``): a dead worker's runs move on in
#: about 5 s plus one claim poll (measured: docs/concepts/workers.md)
WORKER_HEARTBEAT_S = 1.0
WORKER_STALE_AFTER_S = 5.0


def worker_settings() -> dict[str, float]:
    """The liveness settings of a worker's runtime: ``Runtime(toolbox, store,
    **worker_settings())``."""
    return {"heartbeat_s": WORKER_HEARTBEAT_S, "stale_after_s": WORKER_STALE_AFTER_S}


class LeaseExecutor:
    """An executor that starts a call only for a run this worker still owns: a run not
    confirmed within ``lease_s`` (``mark``\\ ed at its claim) is confirmed first by a
    heartbeat, a write the store refuses once another worker took the epoch (then the call
    is refused with StaleEpochError and never starts). A worker frozen past its lease (a
    stopped process, a blocked loop, a lost connection) therefore re-confirms every run
    before its next call. Wraps ``inner`` (a LocalExecutor by default). ``host``: the
    worker's runtime's parts (its store and its identity as a driver)."""

    def __init__(self, host: Host, lease_s: float, inner: SubmittingExecutor | None = None):
        self.host = host
        self.lease_s = lease_s
        self.inner = inner or LocalExecutor()
        self._confirmed: dict[tuple[str, int], float] = {}  # (run, epoch) -> monotonic

    def mark(self, run_id: str, epoch: int) -> None:
        """The claim of ``run_id`` at ``epoch`` just happened: it confirms ownership now."""
        self._confirmed[(run_id, epoch)] = time.monotonic()

    def forget(self, run_id: str) -> None:
        for key in [k for k in self._confirmed if k[0] == run_id]:
            del self._confirmed[key]

    def _fresh(self, ctx: CallContext) -> bool:
        at = self._confirmed.get((ctx.run_id, ctx.epoch))
        return at is not None and time.monotonic() - at <= self.lease_s

    def _me(self, epoch: int) -> DriverInfo:
        return self.host.liveness.identity()

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        if not self._fresh(ctx):
            since = time.monotonic()
            await self.host.run_io(self.host.store.heartbeat, ctx.run_id, ctx.epoch,
                                   self._me(ctx.epoch))  # StaleEpochError: no call
            self._confirmed[(ctx.run_id, ctx.epoch)] = since
        return await self.inner.call(tool, kwargs, ctx)

    def submit(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Pending:
        """A sync body with a timeout (LocalExecutor keeps its slot until it returns): the
        confirmation, when due, is a short blocking write on the loop (rare: once a lease)."""
        if not self._fresh(ctx):
            since = time.monotonic()
            self.host.store.heartbeat(ctx.run_id, ctx.epoch, self._me(ctx.epoch))
            self._confirmed[(ctx.run_id, ctx.epoch)] = since
        return self.inner.submit(tool, kwargs, ctx)

    def close(self) -> None:
        """Let the inner executor's idle threads end (a LocalExecutor's)."""
        if isinstance(self.inner, LocalExecutor):
            self.inner.close()


class Worker:
    """One worker process of the fleet over ``runtime`` (built with
    :func:`worker_settings` and a :class:`LeaseExecutor`; see ``chainlab worker``).

    ``name`` labels it in views (default ``HOST-PID``; a restart may reuse it: the worker's
    identity is new at every start); ``queues`` it claims from, in turn; ``concurrency``
    runs at once; ``poll_s`` how often an idle worker looks for work; ``drain_s`` how long
    a drain lets runs go on before it hands them back; ``same_host_check`` whether a dead
    worker of this host is noticed by its pid (at once) besides its lapsed heartbeats."""

    def __init__(self, runtime: Runtime, *, name: str | None = None,
                 queues: tuple[str, ...] | list[str] = (DEFAULT_QUEUE,), concurrency: int = 4,
                 poll_s: float = 0.2, drain_s: float = 30.0, same_host_check: bool = True):
        if not isinstance(runtime.store, Queue):
            raise ChainlabError(f"{runtime.store!r} keeps no queue: a worker needs a SQLite "
                                "file or a PostgreSQL database")
        if concurrency < 1:
            raise ValueError(f"concurrency must be 1 or more, got {concurrency!r}")
        queues = tuple(dict.fromkeys(check_queue_name(q) for q in queues)) or (DEFAULT_QUEUE,)
        self.runtime = runtime
        self.store: Any = runtime.store
        host = socket.gethostname()
        self.info = WorkerInfo(runtime.liveness.driver_id, name or f"{host}-{os.getpid()}",
                               host, os.getpid(), queues, concurrency, time.time())
        runtime.liveness.worker = self.info.name  # its runs' logs say who drove them
        runtime.liveness.defer = _left_to_a_claim
        self.poll_s = poll_s
        self.drain_s = drain_s
        self.same_host_check = same_host_check
        self.running: dict[str, Run] = {}
        self.cannot: dict[str, str] = {}  # run id -> why this worker cannot run it
        self.claims = 0  # runs claimed so far (for views and benchmarks)
        self._turn = 0  # the queue to try first next time (fair share)
        self._draining = False
        self._handing_back = False
        self._wake = anyio.Event()
        executor = runtime.executor
        self.lease = executor if isinstance(executor, LeaseExecutor) else None

    # ------------------------------------------------------------------ control
    def drain(self) -> None:
        """Stop claiming; let the runs reach their next resting point, then exit (a second
        call hands back what still runs at once)."""
        if self._draining:
            self._handing_back = True
        self._draining = True
        self._wake.set()

    @property
    def draining(self) -> bool:
        return self._draining

    # ------------------------------------------------------------------ the loop
    async def run(self, *, ready: Callable[[], None] | None = None) -> None:
        """Claim and drive until drained (:meth:`drain`). ``ready`` is called once the
        worker is registered (before its first claim)."""
        await self._beat()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._beating)
            if ready is not None:
                ready()
            while not self._draining:
                await self._claim_what_fits(tg)
                self._wake = anyio.Event()
                with anyio.move_on_after(self.poll_s):
                    await self._wake.wait()
            with anyio.move_on_after(self.drain_s):
                while self.running and not self._handing_back:
                    self._wake = anyio.Event()
                    await self._wake.wait()
            tg.cancel_scope.cancel()
        await self._leave()

    async def _claim_what_fits(self, tg: anyio.abc.TaskGroup) -> None:
        queues = self.info.queues
        while len(self.running) < self.info.concurrency and not self._draining:
            claim = None
            for i in range(len(queues)):
                queue = queues[(self._turn + i) % len(queues)]
                try:
                    claim = await self.runtime.run_io(self._claim, queue)
                except ChainlabError as exc:  # e.g. the database is away: try again later
                    log.warning("worker %s: cannot claim from %r: %s", self.info.name,
                                queue, exc)
                    return
                if claim is not None:
                    self._turn = (self._turn + i + 1) % len(queues)
                    break
            if claim is None:
                return
            await self._take(claim, tg)

    def _claim(self, queue: str) -> Claim | None:
        # never its own runs: one whose beats lapsed here (a slow loop) goes to another
        # worker, or comes back to this one once its drive here has ended
        return self.store.claim_next(  # type: ignore[no-any-return]
            self.info, queue, stale_after_s=self.runtime.liveness.stale_after_s,
            skip={*self.cannot, *self.running})

    async def _take(self, claim: Claim, tg: anyio.abc.TaskGroup) -> None:
        run_id = claim.record.run_id
        if self.lease is not None:
            self.lease.mark(run_id, claim.epoch)
        try:
            run = await self.runtime.claimed(claim)
        except (PlanError, ToolDefinitionError) as exc:  # this toolbox cannot run it
            try:
                await self.runtime.run_io(self.store.release_claim, run_id, claim.epoch,
                                          claim.record.status, self.info.worker_id)
            except ChainlabError as lost:  # not handed back: its claim lapses instead
                log.warning("worker %s: run %s not handed back: %s", self.info.name,
                            run_id, lost)
            why = [p.message for p in exc.problems] if isinstance(exc, PlanError) else []
            self.cannot[run_id] = "; ".join(why[:2]) or str(exc).splitlines()[0]
            log.warning("worker %s: run %s left for another worker: %s", self.info.name,
                        run_id, self.cannot[run_id])
            await self._beat()  # say so now (chainlab workers shows the note)
            return
        except StaleEpochError:  # another worker took it meanwhile
            return
        except ChainlabError as exc:  # the store failed: its beats lapse, another takes it
            log.warning("worker %s: run %s not taken up: %s", self.info.name, run_id, exc)
            return
        self.claims += 1
        self.running[run_id] = run
        log.info("%s: claimed run %s (%s) of %r", self.info.name, run_id, claim.kind,
                 claim.record.queue)
        tg.start_soon(self._follow, run)

    async def _follow(self, run: Run) -> None:
        """Follow a claimed run until it ends, is released (suspended) or is fenced."""
        try:
            while True:
                try:
                    result = await run.wait()
                except ChainlabError as exc:  # fenced (StaleEpochError), or its store failed
                    log.info("worker %s: run %s stopped here: %s", self.info.name, run.run_id,
                             exc)
                    return
                if result.status in RUN_TERMINAL:
                    log.info("%s: run %s %s", self.info.name, run.run_id, result.status)
                    return
                # suspended: it waits for a person, holding no worker (a decision on it
                # is left in its mailbox: the claim that takes it back checks the limits)
                if self.runtime.release(run.run_id):
                    log.info("%s: run %s waits for a person (%s): released", self.info.name,
                             run.run_id, ", ".join(result.waiting))
                    return
                await anyio.sleep(self.runtime.liveness.poll_s)  # a body still returning
        finally:
            self.running.pop(run.run_id, None)
            if self.lease is not None:
                self.lease.forget(run.run_id)
            self._wake.set()

    # ------------------------------------------------------------------ beats
    async def _beating(self) -> None:
        while True:
            await anyio.sleep(self.runtime.liveness.heartbeat_s)
            await self._beat()

    async def _beat(self) -> None:
        """Record this worker's beat, state and note; forget dead workers of this host."""
        note = ""
        if self.cannot:
            first = next(iter(self.cannot.values()))
            note = f"cannot run {len(self.cannot)} queued run(s) (left for others): {first}"
        self.info = WorkerInfo(self.info.worker_id, self.info.name, self.info.host,
                               self.info.pid, self.info.queues, self.info.concurrency,
                               self.info.started_at, time.time(),
                               "draining" if self._draining else "running", note)
        try:
            await self.runtime.run_io(self.store.beat_worker, self.info)
            if self.same_host_check:
                await self._forget_the_dead()
        except ChainlabError as exc:  # e.g. a dropped connection: the next beat tries again
            log.warning("worker %s: beat not recorded: %s", self.info.name, exc)

    async def _forget_the_dead(self) -> None:
        """A worker of this host whose process is gone holds nothing any more: forget it, so
        its runs are claimed again at once (a restarted worker that reuses a name included)."""
        for other in await self.runtime.run_io(self.store.list_workers):
            if other.host == self.info.host and other.worker_id != self.info.worker_id \
                    and not pid_alive(other.pid):
                await self.runtime.run_io(self.store.forget_worker, other.worker_id)
                log.info("worker %s: worker %s (pid %s) is gone; its %d run(s) are free",
                         self.info.name, other.name, other.pid, len(other.claimed))

    async def _leave(self) -> None:
        """Hand back what still runs (the runtime stops driving it; its driver rows go) and
        leave the registry."""
        with anyio.CancelScope(shield=True):
            await self.runtime.aclose()
            if self.lease is not None:
                self.lease.close()
            try:
                await self.runtime.run_io(self.store.forget_worker, self.info.worker_id)
            except ChainlabError as exc:
                log.warning("worker %s: not unregistered: %s", self.info.name, exc)


def _left_to_a_claim(run: Run, request: DecisionRequest) -> bool:
    """A decision on a suspended run is not applied by the worker that still drives it (for
    the moment before it releases the run): suspended -> running would take a slot of the
    queue without a claim. It stays in the mailbox; the claim that takes the run back
    (``decided``) checks the queue's limit, then applies it."""
    return run.state.status == RunStatus.SUSPENDED
