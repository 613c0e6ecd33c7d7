"""The kernel: the one async driver of a run around its :class:`Scheduler`.

One step's life, in this file unless named::

    _unblocked    dependencies done (scheduler.done): condition, args, confirmation or ready
    _work         a worker takes it from the scheduler (slot, serial key, pool units)
    attempt.run   (:mod:`.attempt`) the attempt's whole life: step_started, the call
                  (write-ahead flush, timeout, classification), its fate (retry, in_doubt,
                  failed), the outcome event, parking or the back-off timer
    finished      a terminal state: the scheduler releases or skips its dependants
    emit          every change is an event: folded into the run state, appended to the
                  store, handed to subscribers (widgets, progress, tests)
    commit        the durability barrier (``store.flush``) for this run and epoch

* A fixed, lazily grown set of worker tasks (at most ``max_concurrency``) pulls from the
  scheduler; a worker that finishes a step picks the next one without a task switch. A step
  waiting for a serial key, a pool, a back-off or a person is not held by a worker.
* A person's decisions (:mod:`.decisions`) and recovery (:mod:`.recovery`) come in through
  :meth:`Kernel.apply` / :meth:`Kernel.finished` / :meth:`Kernel.make_ready`; the saga
  (:mod:`.saga`) runs when the run stops.
* The first error that must stop the driver (StaleEpochError, a StoreError, a chainlab bug)
  is kept as ``error`` and ``run.wait()`` raises it, never a group of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunStateError, StoreError, UnknownStepError
from chainlab.events import (
    RUN_END_KINDS,
    RUN_TERMINAL,
    ErrorKind,
    Event,
    EventKind,
    RunState,
    RunStatus,
    SkipReason,
    StepStatus,
)
from chainlab.events.status import (
    RELEASES_DEPENDANTS,
    UNSETTLED,
    DrivePhase,
    StopReason,
    releases,
)
from chainlab.plan.inputs import select_output
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.plan.schema import RunOptions
from chainlab.runtime.engine.attempt import run as run_attempt
from chainlab.runtime.engine.attempt import start_deferred_timers
from chainlab.runtime.engine.compile import Graph, Node
from chainlab.runtime.engine.recovery import finish_recovery
from chainlab.runtime.engine.saga import finish_stopped
from chainlab.runtime.engine.scheduler import Breakpoint, Scheduler
from chainlab.tools import args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.engine.clock import Clock
    from chainlab.runtime.engine.decisions import Decision
    from chainlab.runtime.engine.executors import Executor
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["Kernel"]

log = logging.getLogger("chainlab.runtime")
S = StepStatus
R = RunStatus
K = EventKind
_EMPTY: dict[str, Any] = {}
_new_event = tuple.__new__


class Kernel:
    """Drives one run. Created by :class:`chainlab.runtime.Runtime`; used through ``Run``."""

    def __init__(
        self,
        *,
        run_id: str,
        graph: Graph,
        state: RunState,
        options: RunOptions,
        context: dict[str, Any],
        store: Store,
        executor: Executor,
        clock: Clock,
        epoch: int,
        toolbox: Toolbox,
        priority: Callable[[str], float] | None = None,
    ):
        self.run_id = run_id
        self.graph = graph
        self.nodes = graph.nodes
        self.state = state
        self.steps = state.steps
        self.options = options
        self.context = context
        self.store = store
        self.executor = executor
        self.clock = clock
        self.epoch = epoch
        self.toolbox = toolbox
        self.seq = state.last_seq
        self.sched = Scheduler(
            graph.topology,
            max_concurrency=1 if options.mode == "sequential" else options.max_concurrency,
            pools=options.pools,
            breakpoints=options.breakpoints,
            priority=priority,
        )
        self.args: dict[str, dict[str, Any]] = {}
        self.workers = 0
        self.idle: list[anyio.Event] = []
        self.timers: dict[str, anyio.CancelScope] = {}
        self.jobs: dict[str, Any] = {}  # step id -> the waiter of a waiting remote job
        self.calls: dict[int, anyio.CancelScope] = {}  # worker scopes
        # one entry per timed-out body still running (a step retried twice has two)
        self.background: list[str] = []
        self.stopping: StopReason | None = None
        self.stop_reason: str = ""
        self.retry_failed = True  # a rollback retries compensations that failed before
        self.closing = False
        self.driving = False
        self.error: BaseException | None = None
        self.subscribers: list[Callable[[Event], None]] = []
        self.on_end: Callable[[], None] | None = None  # called once, when the run first ends
        self._changed = anyio.Event()
        self._settled = anyio.Event()
        self.settled_status: RunStatus | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self.drive_done = anyio.Event()
        self.drive_done.set()
        self.to_reconcile: list[Node] = []  # interrupted calls the driver reconciles
        self.deferred_timers: list[tuple[Node, float]] = []
        # what each step is expected to spend (cost, tokens, seconds), for options.budget
        self.budget_estimates: dict[str, dict[str, float]] = {}

    @property
    def paused(self) -> bool:
        return self.sched.paused

    # ================================================================== events
    def emit(
        self,
        kind: EventKind,
        step_id: str | None = None,
        attempt: int | None = None,
        payload: dict[str, Any] = _EMPTY,
        run_status: RunStatus | None = None,
    ) -> Event:
        """Record one change: fold it, append it to the store, tell subscribers."""
        if kind.__class__ is not EventKind:
            raise TypeError(f"emit takes an EventKind, got {kind!r}")
        self.seq = seq = self.seq + 1
        run_id, epoch = self.run_id, self.epoch
        # tuple.__new__ is Event._make without its Python frame (three events per step)
        ev = _new_event(Event, (run_id, seq, self.clock.now(), epoch, kind, step_id, attempt,
                                payload))
        self.state.apply(ev)
        self.store.append(run_id, epoch, (ev,), run_status)
        if self.subscribers:
            self._notify(ev)
        if kind in RUN_END_KINDS and self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end()
        return ev

    def _notify(self, ev: Event) -> None:
        for cb in list(self.subscribers):
            try:
                cb(ev)
            except Exception:  # a broken subscriber must not break the run
                log.exception("event subscriber %r failed on %s; removing it", cb, ev)
                self.subscribers.remove(cb)

    def poke(self) -> None:
        self._changed.set()

    # ================================================================== driving
    async def drive(self, phase: DrivePhase = DrivePhase.START) -> None:
        """Run until the run is terminal (or, for a suspended run, until closed). Callers
        call :meth:`prepare_drive` first, when they schedule it."""
        if not self.driving:
            self.prepare_drive()
        self.closing = False
        try:
            async with anyio.create_task_group() as tg:
                self.tg = tg
                if phase == DrivePhase.START:
                    for step_id in self.sched.start(self.graph.top):
                        self._unblocked(self.nodes[step_id])
                elif phase == DrivePhase.RECOVER:
                    start_deferred_timers(self)
                    await finish_recovery(self, self.to_reconcile)
                elif phase == DrivePhase.ROLLBACK:
                    self.stopping = StopReason.ROLLBACK
                    self.sched.stop()
                self.wake_workers(0)
                while True:
                    if self._quiescent() and await self._settle():
                        break
                    await self._changed.wait()
                    self._changed = anyio.Event()
                self.closing = True
                for ev in self.idle:
                    ev.set()
                if self.sched.running or self.timers:
                    # only what still runs needs cancelling: idle workers woken with
                    # closing set return by themselves (a cancel costs ~30 us per run)
                    tg.cancel_scope.cancel()
        except Exception as exc:
            self._crash(exc)
        finally:
            self.driving = False
            self.tg = None
            if self.error is not None:
                log.debug("run %s stopped: %r", self.run_id, self.error)
                self._signal_settled()
            self.drive_done.set()

    def _crash(self, exc: BaseException) -> None:
        """Keep the error that stops the driver (a store's word first: it says why the rest
        failed), and stop every worker."""
        leaves = list(_leaves(exc))
        best = next((e for e in leaves if isinstance(e, StoreError)), leaves[0])
        if self.error is None or (
            isinstance(best, StoreError) and not isinstance(self.error, StoreError)
        ):
            self.error = best
        if self.tg is not None:
            self.tg.cancel_scope.cancel()

    def prepare_drive(self) -> None:
        """Mark the run as driven from the moment a driver is scheduled (not when it first
        runs), so a control call in between never starts a second driver."""
        self.driving = True
        self.drive_done = anyio.Event()

    def _quiescent(self) -> bool:
        if self.sched.running > len(self.background) or self.timers:
            return False
        return not self.sched.is_active()

    async def _settle(self) -> bool:
        """Nothing can move by itself: end the run, suspend it, or wait for a person."""
        if self.stopping:
            await finish_stopped(self)
            await self.flush_and_signal()
            return True
        if self.sched.paused:
            await self.flush_and_signal()
            return False
        unfinished = [step_id for step_id, st in self.steps.items() if st.status in UNSETTLED]
        waiting = self.waiting()
        if not unfinished and not waiting:
            bad = {
                step_id: str(st.status)
                for step_id, st in self.steps.items()
                if st.status in (S.FAILED, S.REJECTED)
            }
            if bad:
                self.emit(K.RUN_FAILED, payload={"steps": bad}, run_status=R.FAILED)
            else:
                self.emit(K.RUN_SUCCEEDED, run_status=R.SUCCEEDED)
            await self.flush_and_signal()
            return True
        if not waiting:  # (a step held back by a timed-out body's key is not quiescent)
            raise RuntimeError(
                f"scheduler stalled with unfinished steps {unfinished}; "
                "this is a chainlab bug, please report it"
            )
        if self.state.status != R.SUSPENDED:
            self.emit(K.RUN_SUSPENDED, payload={"waiting": waiting}, run_status=R.SUSPENDED)
        await self.flush_and_signal()
        return False

    async def commit(self) -> None:
        """Wait until every event emitted so far is durable (DESIGN §7). Raises
        StaleEpochError when this driver was fenced, StoreError when the store failed."""
        await self.store.flush(self.run_id, self.epoch)

    def commit_inline(self) -> None:
        """:meth:`commit` without giving up the loop (the thread waits for the store's
        writer): for a caller that must not suspend, on a store read inline."""
        self.store.flush_sync(self.run_id, self.epoch)

    async def flush_and_signal(self) -> None:
        await self.store.flush(self.run_id, self.epoch)
        self._signal_settled()

    def _signal_settled(self) -> None:
        self.settled_status = self.state.status
        self._settled.set()
        self._settled = anyio.Event()

    async def wait_settled(self) -> None:
        await self._settled.wait()

    # ================================================================== a step's life
    def _unblocked(self, node: Node) -> None:
        """All dependencies are done: evaluate the condition, resolve args, then ready or
        wait for confirmation."""
        if self.stopping:
            return  # stays pending; the stop cancels it
        resolve = self.resolver(node)
        if node.when is not None:
            try:
                go = evaluate(node.when, resolve)
            except (LookupError, TypeError) as exc:
                self._fail_early(node, f"condition {node.step.when!r} failed: {exc}")
                return
            if not go:
                self.emit(K.STEP_SKIPPED, node.id, payload={"reason": SkipReason.CONDITION})
                self.finished(node)
                return
        if node.static_args is not None:
            args = node.static_args
        else:
            try:
                args = node.render_args(resolve)
            except (LookupError, TypeError) as exc:
                self._fail_early(node, f"cannot resolve args: {exc}")
                return
        confirm = node.fixed_confirm
        if confirm is None:
            confirm = node.needs_confirmation(args)
        confirm_first = self.state.confirm_first
        if confirm or (confirm_first and node.id in confirm_first):
            self.request_confirmation(node, args)
            self.sched.park(node.id)
            return
        self.emit(K.STEP_READY, node.id)
        self.make_ready(node, args)

    def make_ready(self, node: Node, args: dict[str, Any] | None = None) -> None:
        """Queue a step (unblocked or parked) for a slot, with the args it will run with.
        Wakes no worker: a worker that finishes a step looks again by itself (no task switch
        per step); callers outside a worker (decisions, timers, the start) wake them."""
        if args is not None:
            self.args[node.id] = args
        tool = node.tool
        key = None
        units: dict[str, int] = {}
        if tool is not None and (tool.serial_key is not None or tool.resources):
            key = tool.resolve_serial_key(self.args[node.id])
            units = tool.resources
        self.sched.ready(node.id, key, units)

    def request_confirmation(self, node: Node, args: dict[str, Any]) -> None:
        """Ask a person: the resolved args (and their hash, which an approval is bound to)
        and the preview are recorded with ``step_waiting_confirmation``."""
        try:
            preview = node.tool.make_preview(args) if node.tool else args
            preview = to_json_value(preview)
        except Exception as exc:
            preview = f"(preview failed: {type(exc).__name__}: {exc})"
        self.emit(
            K.STEP_WAITING_CONFIRMATION,
            node.id,
            payload={
                "args": args,
                "args_hash": args_hash(args),
                "preview": preview,
                "tool": node.step.tool,
                **self.state.confirm_first.get(node.id, {}),
            },
        )

    def _fail_early(self, node: Node, message: str) -> None:
        """A step fails before any attempt (bad reference at run time)."""
        self.emit(
            K.STEP_FAILED,
            node.id,
            payload={"error_kind": ErrorKind.INVALID_INPUT, "error": message},
        )
        self.finished(node)

    def resolver(self, node: Node) -> Callable[[Ref], Any]:
        ns = node.ns
        steps = self.steps

        def resolve(ref: Ref) -> Any:
            root = ref.root
            if root == "steps":
                value = steps[ns.prefix + (ref.target or "")].output
            elif root == "memory":
                value = steps[ns.save_as[ref.target or ""]].output
            elif root == "context":
                value = self.context if ns.group is None else steps[ns.group].args
            else:
                raise LookupError(f"{ref.source!r}: '{root}' is only available in rollback args")
            return walk_path(value, ref.path, ref.source) if ref.path else value

        return resolve

    def finished(self, node: Node) -> None:
        """A step reached a terminal state: release or skip its dependants."""
        st = self.steps[node.id]
        if node.group is not None:
            self._child_done(self.nodes[node.group])
        ok = releases(st.status, st.reason)
        if node.is_group:  # children of a sub-chain step that never started never run
            why = SkipReason.CONDITION if ok else (st.reason or SkipReason.UPSTREAM_FAILED)
            self._skip_children(node, why)
        released = self.sched.done(node.id, ok)
        if ok:
            for step_id in released:
                self._unblocked(self.nodes[step_id])
            return
        status = st.status
        rejected = status == S.REJECTED or (
            status == S.SKIPPED and st.reason == SkipReason.REJECTED
        )
        reason = SkipReason.REJECTED if rejected else SkipReason.UPSTREAM_FAILED
        for step_id in released:
            if self.steps[step_id].status == S.PENDING:
                self.emit(K.STEP_SKIPPED, step_id, payload={"reason": reason, "because": node.id})
                self.finished(self.nodes[step_id])
        if status in (S.FAILED, S.REJECTED) and self.options.on_failure == "fail_fast":
            self.start_stopping(StopReason.FAILED, f"step {node.id!r} {status}")

    def apply(self, decision: Decision) -> None:
        """Record a person's decision (and ``run_resumed`` when it moves a suspended run
        on) before its effects, then let the scheduler act on it."""
        if self.state.status == R.SUSPENDED:
            self.emit(K.RUN_RESUMED, payload={"reason": "decision"}, run_status=R.RUNNING)
        for kind, attempt, payload in decision.events:
            self.emit(kind, decision.step_id, attempt, payload)
        node = self.nodes[decision.step_id]
        if decision.then == "ready":
            self.make_ready(node, decision.args)
        else:
            self.finished(node)
        self.wake_workers(0)  # no worker is about to look: wake one for what became ready
        self.poke()

    # ================================================================== sub-chains
    def _start_group(self, node: Node) -> None:
        st = self.steps[node.id]
        self.emit(
            K.STEP_STARTED,
            node.id,
            st.attempts + 1,
            {"args": self.args[node.id], "tool": node.step.tool, "subchain": True},
        )
        self.sched.park(node.id)  # holds no slot while its children run
        for step_id in self.sched.start(node.children):
            if self.steps[step_id].status == S.PENDING:
                self._unblocked(self.nodes[step_id])
        if not node.children:
            self._child_done(node)

    def _child_done(self, group: Node) -> None:
        st = self.steps[group.id]
        if st.status != S.RUNNING:
            return
        kids = [self.steps[c] for c in group.children]
        if any(k.status in UNSETTLED or k.status == S.IN_DOUBT for k in kids):
            return
        bad = [
            k.step_id
            for k in kids
            if k.status in (S.FAILED, S.REJECTED, S.CANCELLED)
            or (k.status == S.SKIPPED and k.reason != SkipReason.CONDITION)
        ]
        if bad:
            self.emit(
                K.STEP_FAILED,
                group.id,
                st.attempts,
                {
                    "error_kind": ErrorKind.EXECUTION_FAILED,
                    "error": f"sub-chain steps did not succeed: {', '.join(bad)}",
                },
            )
        else:
            prefix = group.id + "/"
            output = {k.step_id[len(prefix) :]: k.output for k in kids
                      if k.status in RELEASES_DEPENDANTS}
            if group.subchain is not None and group.subchain.output is not None:
                output = select_output(group.subchain, output, st.args or {})
            self.emit(K.STEP_SUCCEEDED, group.id, st.attempts, {"output": output})
        self.finished(group)

    def _skip_children(self, group: Node, reason: str) -> None:
        """A sub-chain step that never started: its children never run either."""
        for step_id in group.children:
            if self.steps[step_id].status == S.PENDING:
                self.emit(K.STEP_SKIPPED, step_id, payload={"reason": reason, "because": group.id})
                child = self.nodes[step_id]
                if child.is_group:
                    self._skip_children(child, reason)
                self.sched.done(step_id, False)

    # ================================================================== dispatch
    def wake_workers(self, reserve: int) -> None:
        """Make sure enough workers look at the scheduler (``reserve``: workers already
        about to look, e.g. the caller)."""
        sched = self.sched
        want = sched.n_ready - reserve
        if want <= 0 or self.tg is None or not sched.is_active():
            return
        while want > 0 and self.idle:
            self.idle.pop().set()
            want -= 1
        while want > 0 and self.workers < self.sched.max_concurrency:
            self.workers += 1
            self.tg.start_soon(self._worker)
            want -= 1

    async def _worker(self) -> None:
        scope = anyio.CancelScope()
        self.calls[id(scope)] = scope  # cancel() cancels every worker (and its call)
        try:
            with scope:
                await self._work()
        except Exception as exc:
            self._crash(exc)
        finally:
            self.calls.pop(id(scope), None)
            self.workers -= 1
            self.poke()  # a cancelled worker ends without looking for work again

    async def _work(self) -> None:
        while not self.closing:
            got = self.sched.take()
            if isinstance(got, Breakpoint):
                self.emit(
                    K.RUN_PAUSED,
                    payload={"reason": "breakpoint", "step_id": got.step_id},
                    run_status=R.PAUSED,
                )
                self.poke()
                continue
            if got is None:
                if self.sched.running <= len(self.background):
                    self.poke()
                ev = anyio.Event()
                self.idle.append(ev)
                await ev.wait()
                continue
            node = self.nodes[got]
            try:
                if node.is_group:
                    self._start_group(node)
                else:
                    await run_attempt(self, node)
            finally:
                self.sched.release(got)
            if self.sched.n_ready > 1:  # this worker takes one itself
                self.wake_workers(1)

    # ================================================================== control
    def start_stopping(self, why: StopReason, reason: str) -> None:
        """Release nothing new; cancel back-off timers; running steps finish."""
        if self.stopping:
            return
        self.stopping = why
        self.stop_reason = reason
        self.sched.stop()
        self.settled_status = None  # wait() must wait for the end of the stop, not return
        # the status (e.g. suspended) it had before
        for scope in list(self.timers.values()):
            scope.cancel()
        self.poke()

    async def begin_rollback(self) -> bool:
        """Ask for a rollback: a run still going stops first (running calls are cancelled)
        and rolls back as it ends (returns False: the current driver does it); a finished
        run needs a new drive in the ROLLBACK phase (returns True, once its previous drive
        has unwound)."""
        if self.driving and self.state.status not in RUN_TERMINAL:
            self.start_stopping(StopReason.ROLLBACK, "rollback requested")
            for scope in list(self.calls.values()):
                scope.cancel()
            return False
        # set first, so a wait() that starts now waits for the rollback's end
        self.stopping = StopReason.ROLLBACK
        self.sched.stop()
        self.stop_reason = "rollback requested"
        self.retry_failed = True
        self.settled_status = None
        await self.drive_done.wait()  # a finished run's driver may still be winding down
        return True

    def pause_now(self, reason: str = "user") -> None:
        self.sched.pause()
        if self.state.status in (R.RUNNING, R.SUSPENDED):
            self.emit(K.RUN_PAUSED, payload={"reason": reason}, run_status=R.PAUSED)
        self.poke()

    def unpause(self) -> None:
        if not self.sched.paused:
            return
        self.sched.unpause()
        if self.state.status == R.PAUSED:
            self.emit(K.RUN_RESUMED, payload={"reason": "unpause"}, run_status=R.RUNNING)
        self.wake_workers(0)
        self.poke()

    def step_once(self, step_id: str | None) -> str:
        ready = self.ready_steps()
        if step_id is not None:
            self.require_step(step_id)
            if step_id not in ready:
                raise RunStateError(
                    f"step {step_id!r} is {self.steps[step_id].status}, not ready; "
                    f"ready now: {', '.join(ready) or 'none'}",
                    run_id=self.run_id,
                )
        elif not ready:
            raise RunStateError(
                f"no step is ready to run (waiting: {', '.join(self.waiting()) or 'none'})",
                run_id=self.run_id,
            )
        if not self.sched.paused:
            self.pause_now()
        target = step_id or ready[0]
        self.sched.step(target)
        self.wake_workers(0)
        self.poke()
        return target

    def cancel(self) -> None:
        if self.state.status in RUN_TERMINAL:
            raise RunStateError(
                f"run is already {self.state.status}",
                run_id=self.run_id,
                status=str(self.state.status),
            )
        self.start_stopping(StopReason.CANCELLED, "cancelled by a person")
        for scope in list(self.calls.values()):
            scope.cancel()

    # ================================================================== queries
    def require_step(self, step_id: str) -> Node:
        node = self.nodes.get(step_id)
        if node is None:
            raise UnknownStepError(step_id, self.nodes, run_id=self.run_id)
        return node

    def ready_steps(self) -> list[str]:
        return self.sched.get_ready()

    def waiting(self) -> dict[str, str]:
        return self.state.waiting()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]
