"""``Runtime``: starts, enqueues, resumes, forks and lists runs (``Run``, the handle, is in
run.py).

The class is built in four layers, each a module: :class:`~chainlab.runtime.hosting.Hosting`
(its parts and lifetime: the constructor, ``spawn``, ``run_io``, ``driven``, ``aclose``, and
driving a run: ``_launch``, the one tail every run's drive begins with, and ``release``) <
:class:`~chainlab.runtime.launching.Launching` (every way a NEW run begins: a start, an
enqueue, a fork) < :class:`~chainlab.runtime.resuming.Resuming` (every way a STORED run is
taken up: a resume, a fleet worker's claim) < ``Runtime`` here: reading runs (``get_run``,
``runs``, ``watch``, the frames), the team inbox, decisions from anywhere (``decide``,
``complete_job``), the queue's views and limits, and the blocking entry points.

Nothing below this module names ``Runtime``: each part names, as a protocol, what it uses of
it, and ``Runtime`` satisfies them all. A run's handle holds a
:class:`~chainlab.runtime.run.RunOwner` (the runtime's parts,
:class:`~chainlab.runtime.run.RuntimeParts`, with ``decide``, ``resume``, ``get_run``
and ``_launch``); the coordination code (heartbeats, the mailbox, decisions from other
processes, watching, the worker fleet) a :class:`~chainlab.runtime.coordination.Host` (a
RunOwner with ``liveness``, ``driven``, ``claimed``, ``release``, ``aclose``, ``watch`` and
``approve_all``); a driver's liveness only the runtime's parts.

One async API. Scripts use ``runtime.run_sync(...)``; notebooks and widgets call the
coroutines on the kernel's running loop; there is no second, blocking copy of the methods.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.events import Event
from chainlab.plan.schema import Chain, RunOptions
from chainlab.runtime.engine.compile import compile_chain
from chainlab.runtime.history.estimates import estimate, history
from chainlab.runtime.hosting import new_run_id
from chainlab.runtime.resuming import Resuming
from chainlab.runtime.run import Run, RunResult
from chainlab.store.base import RunRecord

if TYPE_CHECKING:
    from chainlab.runtime.coordination.inbox import WaitingDecision
    from chainlab.runtime.coordination.watching import WatchedRun

__all__ = ["Run", "RunResult", "Runtime", "new_run_id"]


class Runtime(Resuming):
    """Starts, resumes and lists runs of chains built from one toolbox.

    ``store`` defaults to ``SQLiteStore(".chainlab/chainlab.db")``; pass ``MemoryStore()``
    for throwaway runs. ``executor`` defaults to :class:`LocalExecutor`.
    While it drives a run it heartbeats it every ``heartbeat_s`` and reads decisions other
    processes send it every ``mailbox_poll_s`` (PostgreSQL: on NOTIFY); another driver is
    dead after ``stale_after_s`` without a beat (DESIGN §13,
    ``chainlab.runtime.coordination.liveness``).
    """

    # ------------------------------------------------------------------ reading runs
    def get_run(self, run_id: str) -> Run:
        """The handle of a run: live if this runtime drives it, else a read-only view of the
        store (control methods then raise RunNotActiveError)."""
        live = self._active.get(run_id) or self._finished.get(run_id)
        if live is not None and not live.fenced:  # a fenced handle is nobody's live run
            return live
        record = self.store.get_run(run_id)
        return Run(self, Chain.from_dict(record.chain), None, record)

    async def watch(self, run_id: str, *, after_seq: int = 0, follow: bool = False,
                    poll_interval: float = 0.05) -> AsyncIterator[Event]:
        """The run's committed events after ``after_seq``, in order, each once, as they are
        committed, by this process or any other one using the same store (DESIGN §13).

        On PostgreSQL it waits for the commit's NOTIFY (``store.wait_for_events``); on other
        stores it polls the log by seq (``load_events(run_id, after_seq)``: only new events are
        read) every ``poll_interval`` seconds while events come, backing off to one poll a
        second while none do (a run that waits days for a person costs one read a second).
        Ends after an event that ends the run (``run_succeeded``, ``run_failed``, ...) unless
        ``follow`` (then it watches on, e.g. for a later ``run.rollback()``, until the caller
        stops iterating).

        Raises RunNotFoundError if the store has no such run, StoreError if it cannot be read.
        """
        from chainlab.runtime.coordination.watching import watch_events

        async for ev in watch_events(self, run_id, after_seq=after_seq, follow=follow,
                                     poll_interval=poll_interval):
            yield ev

    def estimates(self, chain: Chain) -> Any:
        """Expected duration of each step of ``chain`` (median, p90, samples, source: step
        history, tool history, the tool's hint, or the median of the known ones) as a pandas
        DataFrame (needs ``chainlab[jupyter]``); what ``priority="critical_path"`` ranks by."""
        from chainlab.timeline import estimates_frame

        if self._history is None:
            self._history = history(self.store)
        graph = compile_chain(chain, self.toolbox, self.chains, chain.options)
        return estimates_frame(estimate(graph.nodes, chain.name, self._history).values())

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs in the store, newest first."""
        return self.store.list_runs(limit)

    def waiting_decisions(self) -> list[WaitingDecision]:
        """The team inbox: every waiting confirmation and in-doubt step of every unfinished
        run in the store, oldest first (:mod:`chainlab.runtime.coordination.inbox`). Blocking
        read."""
        from chainlab.runtime.coordination.inbox import waiting_decisions

        return waiting_decisions(self.store)

    def watch_run(self, run_id: str) -> WatchedRun:
        """A handle of a run driven by another process, followed live through the store
        (a :class:`chainlab.runtime.coordination.watching.WatchedRun`). Raises RunNotFoundError."""
        from chainlab.runtime.coordination.watching import watch_run

        return watch_run(self, run_id)

    def runs_frame(self, limit: int | None = None) -> Any:
        """Runs as a pandas DataFrame (needs ``chainlab[jupyter]``)."""
        from chainlab.timeline import runs_frame

        return runs_frame(self.store, limit)

    # ------------------------------------------------------------------ decisions
    async def decide(
        self,
        run_id: str,
        step_id: str,
        action: str,
        *,
        by: str | None = None,
        note: str | None = None,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
        output: Any = None,
        retry: bool = False,
        fail: bool = False,
        timeout: float = 10.0,
        budget: dict[str, Any] | None = None,
    ) -> str:
        """``approve`` (``args``, ``note``, ``budget``: raise a run's budget), ``reject``
        (``reason``) or ``resolve`` (``output`` | ``retry`` | ``fail``, ``note``) step
        ``step_id`` of a run, wherever it is driven: by this runtime (applied here), by
        another live process (sent to it through the store; it applies the decision with the
        same checks and answers), or by nobody
        (this runtime takes the run over, applies it, and drives the run on). A run of a
        queue (DESIGN §19) is never taken over here: the decision is checked, recorded and
        left to the worker fleet, and the answer waited for up to ``timeout``. ``by`` says
        who decides (default ``user@host``). Returns ``"applied"``, or ``"recorded"`` for a
        queue's run no worker answered for yet (a worker applies it when one runs).

        Raises ValueError (unknown action, arguments of another action), RunNotFoundError,
        RunStateError / UnknownStepError / DecisionError (the step does not wait for this
        decision, or the args/output do not fit; from a remote driver: DecisionError with
        its message), DecisionTimeoutError (the live driver did not answer within
        ``timeout`` seconds), DriverAliveError (a driver appeared while taking over).
        """
        from chainlab.runtime.coordination.routing import decide, payload_for

        payload = payload_for(action, note=note, reason=reason, args=args, output=output,
                              retry=retry, fail=fail, budget=budget)
        return await decide(self, run_id, step_id, action, by=by, payload=payload,
                            timeout=timeout)

    async def approve_all(self, run_id: str, step_id: str, *, by: str | None = None,
                          note: str | None = None, timeout: float = 10.0) -> list[str]:
        """Approve every step that waits for a confirmation at or under ``step_id`` (the
        waiting instances of a ``for_each`` step, the steps of a sub-chain), wherever the run
        is driven, each with its OWN args (:meth:`decide` once per step, each recorded as
        its own approval). A step decided meanwhile by someone else is left out. Returns the
        ids this call approved, in order. Raises RunNotFoundError, UnknownStepError, and as
        :meth:`decide` does."""
        from chainlab.errors import RunStateError
        from chainlab.events import read_run
        from chainlab.runtime.engine.decisions import waiting_under

        state = (self._active[run_id].state if run_id in self._active
                 else (await self.run_io(read_run, self.store, run_id))[2])
        done: list[str] = []
        for sid in waiting_under(state, step_id):
            try:
                await self.decide(run_id, sid, "approve", by=by, note=note, timeout=timeout)
            except RunStateError:  # it stopped waiting since it was read: not ours to approve
                continue
            done.append(sid)
        return done

    async def complete_job(self, run_id: str, step_id: str, *, output: Any = None,
                           error: str | None = None, by: str | None = None,
                           timeout: float = 10.0) -> str:
        """Complete the waiting remote job ``step_id`` of a run from outside (a callback):
        ``output=`` or ``error=``, wherever the run is driven (here, by another live process
        through the store's mailbox, or by nobody: then this runtime takes it over), as
        :meth:`decide` does. A completion that arrives before the job's waiter is armed is
        stored (``job_completed``) and read when it arms. Returns ``"applied"``.

        Raises RunStateError (not a waiting job; a second completion is refused),
        DecisionError (an output that is not JSON data), RunNotFoundError,
        DecisionTimeoutError."""
        from chainlab.runtime.coordination.routing import decide
        from chainlab.runtime.engine.decisions import completion_payload

        payload = completion_payload(step_id, output=output, error=error, by=None)
        payload.pop("by")
        return await decide(self, run_id, step_id, "complete_job", by=by, payload=payload,
                            timeout=timeout)

    def decide_sync(self, run_id: str, step_id: str, action: str, **options: Any) -> str:
        """:meth:`decide` from synchronous code (a script, not a running event loop: there,
        ``await runtime.decide(...)``). When it takes the run over, it drives the run to its
        next resting state (ended or suspended) before returning, as :meth:`run_sync` does."""

        async def main() -> str:
            try:
                outcome = await self.decide(run_id, step_id, action, **options)
                run = self._active.get(run_id)
                if run is not None and run._kernel is not None:
                    await run.wait()
                return outcome
            finally:
                await self.aclose()

        return anyio.run(main)

    def run_sync(
        self,
        chain: Chain,
        context: Mapping[str, Any] | None = None,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Start a run and wait for it (terminal or suspended) from synchronous code."""

        async def main() -> RunResult:
            try:
                run = await self.start(chain, context, options)
                return await run.wait()
            finally:
                await self.aclose()

        return anyio.run(main)
