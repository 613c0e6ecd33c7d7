"""The drive loop of one run (DESIGN §4): the driver task and its workers.

    drive      the phase's start (the top-level steps; a recovery's deferred timers and
               reconciliations; a rollback), then wait for changes until the run settles:
               it ends, is suspended for a person, or is paused
    worker     a fixed, lazily grown set of them (at most ``max_concurrency``) pulls from the
               scheduler; a worker that finishes a step picks the next one without a task
               switch. A step waiting for a serial key, a pool, a back-off or a person is
               not held by a worker
    _crash     the first error that must stop the driver (StaleEpochError, a StoreError, a
               chainlab bug) is kept as ``k.error`` and ``run.wait()`` raises it, never a
               group of them

:class:`.core.RunCore` holds the run's state; :class:`.kernel.Kernel` is what the Runtime
calls (its ``drive`` runs :func:`drive`, its ``wake_workers`` starts :func:`worker`); a step's
way through the graph is :mod:`.flow`, an attempt of each kind :mod:`.attempt`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from chainlab.errors import RedactionError, StoreError
from chainlab.events import STEP_TERMINAL, ErrorKind, EventKind, RunStatus, StepStatus
from chainlab.events.status import UNSETTLED, DrivePhase, StopReason
from chainlab.runtime.engine.attempt.call.fate import start_deferred_timers
from chainlab.runtime.engine.flow import finished, unblocked
from chainlab.runtime.engine.recovery import finish_recovery
from chainlab.runtime.engine.saga import finish_stopped
from chainlab.runtime.engine.scheduler import Breakpoint

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["drive", "worker"]

log = logging.getLogger("chainlab.runtime")
S = StepStatus
R = RunStatus
K = EventKind


async def drive(k: RunCore, phase: DrivePhase = DrivePhase.START) -> None:
    """Run until the run is terminal (or, for a suspended run, until closed). Callers
    call :meth:`.Kernel.prepare_drive` first, when they schedule it."""
    if not k.driving:
        k.prepare_drive()
    k.closing = False
    try:
        async with anyio.create_task_group() as tg:
            k.tg = tg
            if phase == DrivePhase.START:
                for step_id in k.sched.start(k.graph.top):
                    unblocked(k, k.nodes[step_id])
            elif phase == DrivePhase.RECOVER:
                start_deferred_timers(k)
                await finish_recovery(k, k.to_reconcile)
            elif phase == DrivePhase.ROLLBACK:
                k.stopping = StopReason.ROLLBACK
                k.sched.stop()
            k.wake_workers(0)
            while True:
                if _quiescent(k) and await _settle(k):
                    break
                await k.wait_changed()
            k.closing = True
            for ev in k.idle:
                ev.set()
            if k.sched.running or k.timers:
                # only what still runs needs cancelling: idle workers woken with
                # closing set return by themselves (a cancel costs ~30 us per run)
                tg.cancel_scope.cancel()
    except Exception as exc:
        _crash(k, exc)
    finally:
        k.driving = False
        k.tg = None
        if k.error is not None:
            log.debug("run %s stopped: %r", k.run_id, k.error)
            k.signal_settled()
        k.drive_done.set()


def _crash(k: RunCore, exc: BaseException) -> None:
    """Keep the error that stops the driver (a store's word first: it says why the rest
    failed), and stop every worker."""
    leaves = list(_leaves(exc))
    best = next((e for e in leaves if isinstance(e, StoreError)), leaves[0])
    if k.error is None or (
        isinstance(best, StoreError) and not isinstance(k.error, StoreError)
    ):
        k.error = best
    if k.tg is not None:
        k.tg.cancel_scope.cancel()


def _quiescent(k: RunCore) -> bool:
    """No call runs (but bodies that outlived their timeout), no timer is armed and
    nothing ready could start: only a person, or the run's end, moves it on."""
    if k.sched.running > len(k.background) or k.timers:
        return False
    return not k.sched.is_active()


async def _settle(k: RunCore) -> bool:
    """Nothing can move by itself: end the run, suspend it, or wait for a person."""
    if k.stopping:
        await finish_stopped(k)
        await k.flush_and_signal()
        return True
    if k.sched.paused:
        await k.flush_and_signal()
        return False
    unfinished = [step_id for step_id, st in k.steps.items() if st.status in UNSETTLED]
    waiting = k.waiting()
    if not unfinished and not waiting:
        bad = {
            step_id: str(st.status)
            for step_id, st in k.steps.items()
            if st.status in (S.FAILED, S.REJECTED) and not k.nodes[step_id].contained
        }
        if bad:
            k.emit(K.RUN_FAILED, payload={"steps": bad}, run_status=R.FAILED)
        else:
            k.emit(K.RUN_SUCCEEDED, run_status=R.SUCCEEDED)
        await k.flush_and_signal()
        return True
    if not waiting:  # (a step held back by a timed-out body's key is not quiescent)
        raise RuntimeError(
            f"scheduler stalled with unfinished steps {unfinished}; "
            "this is a chainlab bug, please report it"
        )
    if k.state.status != R.SUSPENDED:
        k.emit(K.RUN_SUSPENDED, payload={"waiting": waiting}, run_status=R.SUSPENDED)
    await k.flush_and_signal()
    return False


async def worker(k: RunCore) -> None:
    """One of the run's workers (started by :meth:`.Kernel.wake_workers`)."""
    scope = anyio.CancelScope()
    k.calls[id(scope)] = scope  # cancel() cancels every worker (and its call)
    try:
        with scope:
            await _work(k)
    except Exception as exc:
        _crash(k, exc)
    finally:
        k.calls.pop(id(scope), None)
        k.workers -= 1
        k.poke()  # a cancelled worker ends without looking for work again


async def _work(k: RunCore) -> None:
    """Take steps from the scheduler until the driver closes; idle when none is ready."""
    while not k.closing:
        got = k.sched.take()
        if isinstance(got, Breakpoint):
            k.emit(
                K.RUN_PAUSED,
                payload={"reason": "breakpoint", "step_id": got.step_id},
                run_status=R.PAUSED,
            )
            k.poke()
            continue
        if got is None:
            if k.sched.running <= len(k.background):
                k.poke()
            ev = anyio.Event()
            k.idle.append(ev)
            await ev.wait()
            continue
        node = k.nodes[got]
        try:
            # its kind (kind_of, without its frame): a call, a job, a sub-chain...
            await k.kinds[node.kind].run(k, node)
        except RedactionError as exc:  # a value its redactor could not mask: not stored
            _unredactable(k, node, exc)
        finally:
            k.sched.release(got)
        if k.sched.n_ready > 1 and (k.idle or k.workers < k.sched.max_concurrency):
            k.wake_workers(1)  # (this worker takes one itself; with every worker busy, none
            # is left to wake or start)


def _unredactable(k: RunCore, node: Node, exc: RedactionError) -> None:
    """A redactor failed on one of the step's values (DESIGN §24): nothing of that event was
    recorded; the step fails naming the redactor (chainlab's words only: no redactor sees
    them), its dependants are skipped as for any failure."""
    st = k.steps[node.id]
    if st.status in STEP_TERMINAL:  # (a later event of another step: stop the drive)
        raise exc
    k.emit(K.STEP_FAILED, node.id, st.attempts if st.status == S.RUNNING else None,
           {"error_kind": ErrorKind.INVALID_INPUT, "error": str(exc),
            "redactor": exc.redactor}, trusted=True)
    finished(k, node)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]
