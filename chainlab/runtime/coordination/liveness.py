"""Driver liveness and the decision mailbox, runtime side (DESIGN §13).

While a runtime drives a run, :meth:`Liveness.attend` keeps one task beside the kernel
that

* heartbeats the run in the store (``store.heartbeat``, every ``heartbeat_s``; the first
  beat comes after ``first_beat_s`` or as soon as the run waits for a person, so a run of
  a few milliseconds costs no extra commit), and
* applies decision requests other processes post for the run (``store.pending_requests``),
  through the run's public methods ``run.approve`` / ``run.reject`` / ``run.resolve``, i.e.
  the same ``chainlab.runtime.engine.decisions`` checks as a click in the notebook, then answers
  each one ``applied``, or ``refused`` with the check's message. On PostgreSQL it waits for
  the NOTIFY of a new request; elsewhere it reads the mailbox every ``poll_s`` (a cheap
  indexed query).

A heartbeat or an answer from an epoch that was taken over is refused by the store
(StaleEpochError): the task then stops; the kernel learns it at its next flush. A driver
that stops cleanly while the run is not finished (the runtime closes) forgets its heartbeat,
so the next process does not wait for it to go stale.

A driver counts as LIVE for a run (:meth:`Liveness.live_driver`) when its last beat is
younger than ``stale_after_s``, it holds the run's current epoch, the run is not finished,
and it is not this runtime; on the same host (by host name), a driver whose pid no longer
exists is dead at once. Beat times are the beating host's clock: hosts sharing a
PostgreSQL store should keep their clocks in sync (NTP); ``stale_after_s`` absorbs a few
seconds of skew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import DriverAliveError, RunStateError, StaleEpochError, StoreError
from chainlab.events import RUN_TERMINAL, RunStatus
from chainlab.store.base import DecisionRequest, DriverInfo, Notifier, RunRecord

if TYPE_CHECKING:
    from chainlab.runtime.run import Run, RunOwner

__all__ = ["Liveness", "apply_request", "pid_alive"]

log = logging.getLogger(__name__)


class Liveness:
    """A runtime's identity as a driver and its liveness settings (``Runtime(heartbeat_s=,
    stale_after_s=, mailbox_poll_s=)``)."""

    def __init__(self, *, heartbeat_s: float = 2.0, stale_after_s: float = 10.0,
                 poll_s: float = 0.15):
        if not 0 < heartbeat_s < stale_after_s:
            raise ValueError(f"heartbeat_s must be > 0 and below stale_after_s, got "
                             f"heartbeat_s={heartbeat_s!r}, stale_after_s={stale_after_s!r}; "
                             "a driver beats several times before it counts as dead")
        if poll_s <= 0:
            raise ValueError(f"mailbox_poll_s must be > 0, got {poll_s!r}")
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.poll_s = poll_s
        self.first_beat_s = min(heartbeat_s, 0.25)
        self.driver_id = secrets.token_hex(8)
        self.host = socket.gethostname()
        self.worker: str | None = None  # this runtime's name when it is a fleet worker
        # a request the driver leaves in the mailbox for now (a fleet worker leaves the
        # decisions on its suspended runs to a claim, which checks the queue's limits)
        self.defer: Callable[[Run, DecisionRequest], bool] | None = None
        self._answering = 0  # decisions being applied and answered right now
        self._answered: anyio.Event | None = None

    async def answers_sent(self, timeout: float = 10.0) -> None:
        """Wait (at most ``timeout`` s) until no decision is being applied and answered: a
        runtime that closes must not leave a requester waiting for an answer it took."""
        with anyio.move_on_after(timeout):
            while self._answering:
                if self._answered is None:
                    self._answered = anyio.Event()
                await self._answered.wait()

    def identity(self) -> DriverInfo:
        """This runtime as a driver (the pid read now: a forked child is another driver)."""
        return DriverInfo(self.driver_id, self.host, os.getpid(), worker=self.worker)

    def signature(self) -> dict[str, Any]:
        """What a run's ``run_started`` / ``run_resumed`` records of a fleet worker that
        drives it (``{"worker": {"name", "host", "pid"}}``; nothing for other drivers), so
        the log says which worker drove each epoch."""
        if self.worker is None:
            return {}
        return {"worker": {"name": self.worker, "host": self.host, "pid": os.getpid()}}

    # ------------------------------------------------------------------ who drives
    def live_driver(self, driver: DriverInfo | None, record: RunRecord,
                    now: float | None = None) -> DriverInfo | None:
        """``driver`` when it is another process that drives ``record``'s run right now."""
        if driver is None or driver.driver_id == self.driver_id:
            return None
        if record.status in RUN_TERMINAL or driver.epoch != record.epoch:
            return None  # finished, or its driver was taken over since it beat
        age = driver.age(time.time() if now is None else now)
        if age >= self.stale_after_s:
            return None
        if driver.host == self.host and not pid_alive(driver.pid):
            return None  # on this host its process is gone: no need to wait for staleness
        return driver

    def refuse_live(self, driver: DriverInfo | None, record: RunRecord) -> None:
        """Raise DriverAliveError when ``driver`` (the stored driver of ``record``'s run) is
        another live process."""
        now = time.time()
        live = self.live_driver(driver, record, now)
        if live is not None:
            age = live.age(now)
            raise DriverAliveError(record.run_id, host=live.host, pid=live.pid,
                                   epoch=live.epoch, beat_age_s=age,
                                   stale_in_s=max(1.0, self.stale_after_s - age))

    # ------------------------------------------------------------------ attending a run
    @contextlib.asynccontextmanager
    async def attend(self, run: Run) -> AsyncIterator[None]:
        """Heartbeat ``run`` and serve its mailbox while the body (the kernel's drive) runs,
        through the runtime that drives it (``run.runtime``: its store, ``run_io`` and
        ``spawn``).

        The serving task starts only if the run is still driven after the first pause
        (``min(poll_s, first_beat_s)``): a run that ends sooner (short runs in a loop) costs
        no task, no cancel scope and no I/O; a timer, cancelled at the end, is all."""
        runtime = run.runtime
        store = runtime.store
        if not run.active:
            yield  # nothing to attend: the run is not driven here
            return
        scope = anyio.CancelScope()
        serving: list[bool] = []  # [False] once the drive ended; [True] while serve runs

        async def serve() -> None:
            if serving:
                return  # spawned, but the drive ended before it ran
            serving.append(True)
            with scope:
                try:
                    await self._serve(runtime, run)
                except Exception:  # the run goes on; only its liveness stops
                    log.exception("run %s: heartbeat and mailbox stopped", run.run_id)

        delay = min(self.poll_s, self.first_beat_s)
        try:
            timer = asyncio.get_running_loop().call_later(delay, _spawn_from_timer, runtime, serve)
        except RuntimeError:  # another anyio backend: a task that sleeps first
            timer = None

            async def serve_later() -> None:
                await anyio.sleep(delay)
                await serve()

            runtime.spawn(serve_later)
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
            if serving:  # (a cancel costs ~40 us in anyio: only when there is a task)
                scope.cancel()
            else:
                serving.append(False)
            if run.state.status not in RUN_TERMINAL:  # stopped early: say so at once
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await runtime.run_io(store.clear_driver, run.run_id, self.driver_id)
            elif not run.fenced:
                # the run ended: a decision still in the mailbox (the loser of a race, one
                # sent as the run ended) is answered now, never left to time out
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.answers_sent()  # the serving task's answer in flight first
                    for request in await runtime.run_io(store.pending_requests, run.run_id, 0):
                        if not await self.answer(run, request):
                            break
                    # then say this driver is gone: a request posted from now on is refused
                    # by its requester, who sees the run ended and nobody left to answer
                    await runtime.run_io(store.clear_driver, run.run_id, self.driver_id)

    async def _serve(self, runtime: RunOwner, run: Run) -> None:
        store = runtime.store
        start = time.monotonic() - min(self.poll_s, self.first_beat_s)  # (attend waited)
        next_beat = start + self.first_beat_s
        wait = store.wait_for_requests if isinstance(store, Notifier) else None
        if wait is not None:  # listen BEFORE the first read: no request falls in between
            await runtime.run_io(wait, run.run_id, 0, 0.0)
        after_id = 0
        unread = False  # the mailbox could not be read last time (say so once, not per poll)
        while True:
            now = time.monotonic()
            if now >= next_beat or (next_beat - start <= self.first_beat_s
                                    and run.state.status == RunStatus.SUSPENDED):
                if not await self._beat(runtime, run):
                    return
                next_beat = time.monotonic() + self.heartbeat_s
            try:
                pending = await runtime.run_io(store.pending_requests, run.run_id, after_id)
                unread = False
            except StoreError as exc:
                if not unread:
                    log.warning("run %s: cannot read decision requests: %s", run.run_id, exc)
                unread, pending = True, []
            for request in pending:
                after_id = request.request_id
                if self.defer is not None and self.defer(run, request):
                    continue
                # shielded: a decision that ends the run ends the drive, which cancels this
                # task; the answer must still reach the person waiting for it
                with anyio.CancelScope(shield=True):
                    answered = await self.answer(run, request)
                if not answered:
                    return
            left = max(0.0, next_beat - time.monotonic())
            if wait is not None and next_beat - start > self.first_beat_s:
                await anyio.to_thread.run_sync(wait, run.run_id, after_id, left,
                                               abandon_on_cancel=True)
            else:
                await anyio.sleep(min(self.poll_s, left))

    async def _beat(self, runtime: RunOwner, run: Run) -> bool:
        """One heartbeat; False once this driver was taken over (fenced)."""
        try:
            await runtime.run_io(runtime.store.heartbeat, run.run_id, run.epoch, self.identity())
        except StaleEpochError:
            return False
        except StoreError as exc:  # e.g. a dropped connection: the next beat tries again
            log.warning("run %s: heartbeat not recorded: %s", run.run_id, exc)
        return True

    async def answer(self, run: Run, request: DecisionRequest) -> bool:
        """Apply one request to a run this runtime drives and answer it (``applied``, or
        ``refused`` with the check's message); False once this driver was taken over."""
        self._answering += 1
        try:
            return await self._apply_and_answer(run.runtime, run, request)
        finally:
            self._answering -= 1
            if not self._answering and self._answered is not None:
                self._answered.set()
                self._answered = None

    async def _apply_and_answer(self, runtime: RunOwner, run: Run,
                                request: DecisionRequest) -> bool:
        if request.expires_at is not None and time.time() > request.expires_at:
            outcome, message = "refused", (
                f"expired: request {request.request_id} reached the driver after its "
                "requester stopped waiting; decide again")
        else:
            try:
                await apply_request(run, request)
                outcome, message = "applied", ""
            except StaleEpochError:
                return False
            except (RunStateError, ValueError, TypeError) as exc:
                outcome, message = "refused", str(exc)
        try:
            await runtime.run_io(runtime.store.answer_request, request.request_id, run.epoch,
                              outcome, message)
        except StaleEpochError:
            return False
        except StoreError as exc:
            log.warning("run %s: request %s not answered: %s", run.run_id,
                        request.request_id, exc)
        return True


_from_timers: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references to tasks


def _spawn_from_timer(runtime: RunOwner, fn: Callable[[], Any]) -> None:
    """``runtime.spawn(fn)`` from a loop timer's callback. A callback runs outside any task,
    where anyio cannot tell which event loop it is on (sniffio finds none: no task, no
    ``anyio.run`` context, as under uvicorn), so the spawn happens in a small task."""

    async def spawn() -> None:
        runtime.spawn(fn)

    task = asyncio.get_running_loop().create_task(spawn())
    _from_timers.add(task)
    task.add_done_callback(_from_timers.discard)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (a zombie still counts: conservative)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or cannot tell: assume alive
    return True


async def apply_request(run: Run, request: DecisionRequest) -> None:
    """Apply a decision request to a run this process drives, through its public methods.
    Raises what they raise (RunStateError, DecisionError, UnknownStepError)."""
    p = request.payload
    if request.action == "approve":
        await run.approve(request.step_id, p.get("args"), p.get("note"), by=request.by,
                          budget=p.get("budget"), grant=p.get("grant"),
                          roles=p.get("roles"))
    elif request.action == "reject":
        await run.reject(request.step_id, p.get("reason") or "rejected", by=request.by)
    elif request.action == "resolve":
        await run.resolve(request.step_id, output=p.get("output"),
                          retry=bool(p.get("retry")), fail=bool(p.get("fail")),
                          note=p.get("note"), by=request.by)
    elif request.action == "revoke":  # (its step_id carries the grant id)
        await run.revoke(request.step_id, by=request.by)
    elif request.action == "complete_job":
        await run.complete_job(request.step_id, output=p.get("output"), error=p.get("error"),
                               by=request.by)
    else:
        raise ValueError(f"unknown decision {request.action!r}; expected approve, reject, "
                         "resolve, revoke or complete_job")
