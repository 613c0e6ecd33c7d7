"""Fault injection for demos and tests: make the runtime's rules visibly happen.

    from chainlab.runtime.faults import inject

    await inject(run, "timeout", "load")       # load's next call runs, its answer is lost
    await inject(run, "raise", "load", error_kind="transient")  # load's tool raises once
    run2 = await inject(run, "second_driver")  # a second driver takes the run over; the
                                               # first one is fenced (its writes refused)
    await inject(run, "kill", "load")          # SIGKILL this process when load's call runs:
                                               # only in a disposable driver process

A function over a run, not a method of it (issue 44): injecting a fault wraps the run's
executor and may start a second Runtime, so the run's handle (below the Runtime) does not
reach up to it; nothing in the runtime imports this module. Call it on the loop that drives
the run (in a notebook, the run widget's Faults section and ``%chain fault`` hand it there).

Faults live beneath the one seam that calls a tool (``call.call_tool``): the run's
executor is wrapped, so an injected failure is classified, retried, put in doubt and
recorded exactly like a real one. Every injection is an event (``fault_injected``: the
fault, the step, who injected it); a stale driver's refused write is recorded by the new
owner (``write_refused``). Only runs this process drives can be faulted (RunNotActiveError
otherwise), and ``kill`` only in a process that declared itself disposable
(:func:`declare_disposable`, done by ``chainlab.testing.driver``): a notebook's kernel is
never killed by it.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import anyio

from chainlab._text import did_you_mean
from chainlab.errors import RunStateError, StaleEpochError, ToolError
from chainlab.events import RUN_TERMINAL, ErrorKind, Event, EventKind
from chainlab.runtime.engine.executors import SubmittingExecutor

if TYPE_CHECKING:
    from chainlab.runtime.engine.executors import Executor, Pending
    from chainlab.runtime.engine.kernel import Kernel
    from chainlab.runtime.run import Run
    from chainlab.tools import CallContext, Tool

__all__ = ["RAISABLE", "Fault", "FaultyExecutor", "declare_disposable", "inject",
           "is_disposable"]

_DISPOSABLE_ENV = "CHAINLAB_DISPOSABLE_DRIVER"


class Fault(StrEnum):
    """What :func:`inject` can do to a run."""

    TIMEOUT = "timeout"  # the step's next call runs (effect) but its answer is lost: timeout
    RAISE = "raise"  # the step's tool raises error_kind once (before its body, by default)
    KILL = "kill"  # SIGKILL the driving process when the step's call runs (or now)
    SECOND_DRIVER = "second_driver"  # another driver resumes the run: this one is fenced


#: error kinds a ``raise`` fault can raise (the others are the runtime's own findings)
RAISABLE = (ErrorKind.TRANSIENT, ErrorKind.EXECUTION_FAILED, ErrorKind.PERMANENT)


@dataclass(frozen=True, slots=True)
class Armed:
    """A fault waiting for the next call of its step."""

    fault: Fault
    step_id: str
    by: str
    effect: bool  # the tool's body runs (its effect happens) before the fault strikes
    error_kind: ErrorKind | None = None


def declare_disposable() -> None:
    """Let ``kill`` faults end THIS process (a driver started only to be killed)."""
    os.environ[_DISPOSABLE_ENV] = str(os.getpid())


def is_disposable() -> bool:
    """Whether ``kill`` faults may end this process (see :func:`declare_disposable`)."""
    return os.environ.get(_DISPOSABLE_ENV) == str(os.getpid())


async def inject(
    run: Run,
    fault: str,
    step_id: str | None = None,
    *,
    error_kind: str = ErrorKind.TRANSIENT,
    effect: bool | None = None,
    by: str = "python",
) -> Run | None:
    """Inject ``fault`` into ``run`` (driven by this process) and record it as an event.

    ``timeout``/``raise``/``kill`` hit the next call of ``step_id``; ``effect`` says whether
    the tool's body runs first (default: yes for timeout and kill, no for raise, which then
    promises ``before_effect``). ``kill`` without a step kills the driver now. ``by`` names
    who injected it (python, magic, widget, ...). Returns the second driver's Run for
    ``second_driver`` (the first one stops with StaleEpochError at its next write), else None.

    Raises RunNotActiveError (not driven here), ValueError (unknown fault or error kind, a
    kill in a process that is not disposable), UnknownStepError, RunStateError (the run or
    the step has finished)."""
    kind = _fault(fault)
    kernel = run._k()
    if kernel.state.status in RUN_TERMINAL:
        raise RunStateError(
            f"run {run.run_id!r} is {kernel.state.status}: faults hit runs that still move",
            run_id=run.run_id, status=str(kernel.state.status),
        )
    if kind == Fault.SECOND_DRIVER:
        return await _second_driver(run, kernel, by)
    if kind == Fault.KILL and not is_disposable():
        raise ValueError(
            f"fault 'kill' would SIGKILL this process (pid {os.getpid()}), which is not a "
            "disposable driver: drive the run in a subprocess (chainlab.testing.driver."
            "SubprocessDriver(..., kill_at=STEP)) and resume it here afterwards"
        )
    if kind == Fault.KILL and step_id is None:
        kernel.emit(EventKind.FAULT_INJECTED, payload={"fault": str(kind), "by": by})
        await kernel.store.flush(run.run_id, kernel.epoch)
        _die()
    if step_id is None:
        raise ValueError(f"fault {str(kind)!r} needs the step it hits: inject({str(kind)!r}, "
                         "STEP)")
    armed = _arm(kernel, kind, step_id, by, error_kind, effect)
    if kind != Fault.KILL:  # a kill is recorded when it strikes (the driver dies with it)
        kernel.emit(EventKind.FAULT_INJECTED, step_id, payload=_payload(armed))
        await kernel.store.flush(run.run_id, kernel.epoch)
    return None


def _fault(value: str) -> Fault:
    try:
        return Fault(str(value).replace("-", "_"))
    except ValueError:
        names = [f.value for f in Fault]
        raise ValueError(f"unknown fault {value!r}{did_you_mean(value, names)}; faults: "
                         f"{', '.join(names)}") from None


def _arm(kernel: Kernel, kind: Fault, step_id: str, by: str, error_kind: str,
         effect: bool | None) -> Armed:
    node = kernel.require_step(step_id)
    if node.tool is None:
        kids = ", ".join(node.children[:4])
        raise ValueError(f"step {step_id!r} is a sub-chain (no tool of its own): inject into "
                         f"one of its steps ({kids})")
    st = kernel.steps[step_id]
    if st.done:
        raise RunStateError(
            f"step {step_id!r} is already {st.status}: a fault hits a step's next call; pick "
            "a step that has not finished", run_id=kernel.run_id, status=str(st.status))
    ek: ErrorKind | None = None
    if kind == Fault.RAISE:
        ek = ErrorKind(error_kind) if error_kind in set(RAISABLE) else None
        if ek is None:
            raise ValueError(f"error_kind {error_kind!r} cannot be raised by a tool; use one "
                             f"of {', '.join(RAISABLE)}")
    armed = Armed(kind, step_id, by, kind != Fault.RAISE if effect is None else effect, ek)
    faulty = kernel.executor
    if not isinstance(faulty, FaultyExecutor):
        faulty = kernel.executor = _wrap(kernel.executor, kernel)
    faulty.armed[step_id] = armed
    return armed


def _payload(armed: Armed) -> dict[str, Any]:
    out: dict[str, Any] = {"fault": str(armed.fault), "by": armed.by, "effect": armed.effect}
    if armed.error_kind is not None:
        out["error_kind"] = str(armed.error_kind)
    return out


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# --------------------------------------------------------------------------- the executor
class FaultyExecutor:
    """Wraps a run's executor: a call of a step with an armed fault runs a faulty copy of
    the tool (once); every other call passes through unchanged."""

    def __init__(self, inner: Executor, kernel: Kernel):
        self.inner = inner
        self.kernel = kernel
        self.armed: dict[str, Armed] = {}

    async def call(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        armed = self._take(ctx)
        return await self.inner.call(tool if armed is None else self._faulty(tool, armed, ctx),
                                     kwargs, ctx)

    def _take(self, ctx: CallContext) -> Armed | None:
        return self.armed.pop(ctx.step_id, None) if ctx.kind == "call" else None

    def _faulty(self, tool: Tool, armed: Armed, ctx: CallContext) -> Tool:
        body = tool.fn
        loop = asyncio.get_running_loop()
        kernel = self.kernel

        async def record_kill() -> None:  # the kill is recorded, durably, as it strikes
            kernel.emit(EventKind.FAULT_INJECTED, ctx.step_id, ctx.attempt,
                        payload=_payload(armed))
            await kernel.store.flush(ctx.run_id, ctx.epoch)

        def strike(effect_done: bool) -> None:
            if armed.fault == Fault.RAISE:
                err = ToolError(f"injected fault: {armed.error_kind} raised by {armed.by}",
                                before_effect=not effect_done)
                err.kind = str(armed.error_kind)
                raise err
            if armed.fault == Fault.TIMEOUT:
                err = ToolError(f"injected fault: no answer (timed out; the call "
                                f"{'ran' if effect_done else 'never ran'})",
                                before_effect=not effect_done)
                err.kind = str(ErrorKind.TIMEOUT)
                raise err

        def die_from_thread() -> None:
            asyncio.run_coroutine_threadsafe(record_kill(), loop).result(60)
            _die()

        if tool.is_async:
            async def faulty_async(**kw: Any) -> Any:
                if armed.fault == Fault.KILL and not armed.effect:
                    await record_kill()
                    _die()
                if not armed.effect:
                    strike(False)
                out = await body(**kw)
                if armed.fault == Fault.KILL:
                    await record_kill()
                    _die()
                strike(True)
                return out

            fn: Any = faulty_async
        else:
            def faulty_sync(**kw: Any) -> Any:
                if armed.fault == Fault.KILL and not armed.effect:
                    die_from_thread()
                if not armed.effect:
                    strike(False)
                out = body(**kw)
                if armed.fault == Fault.KILL:
                    die_from_thread()
                strike(True)
                return out

            fn = faulty_sync
        faulty = copy.copy(tool)
        faulty.fn = fn
        return faulty


class _SubmittingFaultyExecutor(FaultyExecutor):
    """The same, for executors that can run a sync body in the background (``submit``)."""

    def submit(self, tool: Tool, kwargs: dict[str, Any], ctx: CallContext) -> Pending:
        armed = self._take(ctx)
        assert isinstance(self.inner, SubmittingExecutor)
        submit = self.inner.submit
        pending: Pending = submit(tool if armed is None else self._faulty(tool, armed, ctx),
                                  kwargs, ctx)
        return pending


def _wrap(inner: Executor, kernel: Kernel) -> FaultyExecutor:
    cls = _SubmittingFaultyExecutor if isinstance(inner, SubmittingExecutor) else FaultyExecutor
    return cls(inner, kernel)


# --------------------------------------------------------------------------- second driver
async def _second_driver(run: Run, kernel: Kernel, by: str) -> Run:
    """Resume the run in a second Runtime of this process (same store, tools and clock):
    it claims the next epoch; the first driver's writes after the claim are refused, and
    the second driver records that refusal (``write_refused``) once the first one stops."""
    from chainlab.runtime.runtime import Runtime

    rt = run.runtime
    second = Runtime(rt.toolbox, rt.store, executor=rt.executor, clock=rt.clock,
                     chains=dict(rt.chains), id_factory=rt.id_factory)
    stale = kernel.epoch
    kernel.emit(EventKind.FAULT_INJECTED, payload={"fault": str(Fault.SECOND_DRIVER), "by": by,
                                                   "stale_epoch": stale})
    seen: list[Event] = []
    unsubscribe = run.subscribe(seen.append)
    claimed_at = [0]

    def note(state: Any) -> None:
        claimed_at[0] = state.last_seq

    for _ in range(50):  # the first driver may commit between the read and the claim
        await kernel.store.flush(run.run_id, stale)
        try:  # force: the first driver is alive and beating; taking over anyway IS the fault
            new = await second.resume(run.run_id, check=note, force=True)
            break
        except StaleEpochError as exc:
            if exc.moved_on is None:
                unsubscribe()
                raise
            await anyio.sleep(0.001)
    else:
        unsubscribe()
        raise RunStateError(f"run {run.run_id!r} kept moving: could not take it over",
                            run_id=run.run_id)

    old = kernel.executor
    if isinstance(old, FaultyExecutor) and old.armed:  # armed faults move to the new owner
        k2 = new._k()
        k2.executor = _wrap(k2.executor, k2)
        k2.executor.armed.update(old.armed)
        old.armed.clear()

    async def record_refusal() -> None:
        await kernel.drive_done.wait()
        unsubscribe()
        error = kernel.error
        if not isinstance(error, StaleEpochError):
            return
        k2 = new._k()
        refused = [_label(ev) for ev in seen if ev.epoch == stale and ev.seq > claimed_at[0]]
        k2.emit(EventKind.WRITE_REFUSED, payload={
            "stale_epoch": stale, "epoch": k2.epoch, "refused": refused, "error": str(error)})
        await k2.store.flush(new.run_id, k2.epoch)

    second.spawn(record_refusal)
    return new


def _label(ev: Event) -> str:
    return f"{ev.kind} {ev.step_id}" if ev.step_id else str(ev.kind)
