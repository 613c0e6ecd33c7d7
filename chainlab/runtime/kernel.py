"""The scheduler kernel: one ready-queue DAG scheduler for every front end.

* Steps are released by indegree counting; among ready steps the one declared first goes
  first (a heap keyed by declaration order). ``mode: sequential`` is concurrency 1.
* A fixed, lazily grown set of worker tasks (at most ``max_concurrency``) pulls from the
  ready queue; a worker that finishes a step picks the next one without a task switch, so
  the per-step cost is bookkeeping, not task creation. A step waiting for a serial key, a
  pool, a back-off or a person is not held by a worker, so it holds no slot.
* Serial keys and pool units are taken all-or-none at dispatch: no deadlock is possible.
* Every change is an event: applied to the run state (the fold), appended to the store,
  handed to subscribers. Side-effecting calls wait for the store's write-ahead flush.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunStateError, UnknownStepError
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.plan.schema import ErrorKind, RunOptions
from chainlab.runtime.call import run_attempt
from chainlab.runtime.events import Event
from chainlab.runtime.graph import Graph, Node
from chainlab.runtime.state import RunState
from chainlab.runtime.status import (
    RUN_TERMINAL,
    RunStatus,
    SkipReason,
    StepStatus,
)
from chainlab.tools import args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.clock import Clock
    from chainlab.runtime.executors import Executor
    from chainlab.store.base import Store
    from chainlab.tools import Toolbox

__all__ = ["Kernel"]

log = logging.getLogger("chainlab.runtime")
S = StepStatus
R = RunStatus
_EMPTY: dict[str, Any] = {}
_SATISFIED = (S.SUCCEEDED, S.COMPENSATED, S.COMPENSATING, S.COMPENSATION_FAILED)
_WAITING = (S.WAITING_CONFIRMATION, S.IN_DOUBT)
_UNSETTLED = (S.PENDING, S.READY, S.RUNNING, S.RETRY_WAIT, S.WAITING_CONFIRMATION)


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
        self.max_concurrency = 1 if options.mode == "sequential" else options.max_concurrency
        self.pools = dict(options.pools)
        self.indeg: dict[str, int] = {}
        self.args: dict[str, dict[str, Any]] = {}
        self.ready: list[tuple[tuple[int, ...], str]] = []
        self.running = 0
        self.workers = 0
        self.idle: list[anyio.Event] = []
        self.timers: dict[str, anyio.CancelScope] = {}
        self.calls: dict[int, anyio.CancelScope] = {}  # worker scopes
        self.keys_held: set[str] = set()
        self.pool_used: dict[str, int] = {}
        self.paused = False
        self.step_tokens: list[str | None] = []
        self.breakpoints: set[str] = set(options.breakpoints)
        self.bp_passed: set[str] = set()
        self.stopping: str | None = None  # "failed" | "cancelled" | "rollback"
        self.stop_reason: str = ""
        self.retry_failed = True  # a rollback retries compensations that failed before
        self.closing = False
        self.driving = False
        self.error: BaseException | None = None
        self.subscribers: list[Callable[[Event], None]] = []
        self._changed = anyio.Event()
        self._settled = anyio.Event()
        self.settled_status: RunStatus | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.drive_done = anyio.Event()
        self.drive_done.set()
        self.to_reconcile: list[Node] = []  # interrupted calls the driver reconciles
        self._deferred_timers: list[tuple[Node, float]] = []

    # ================================================================== events
    def emit(
        self,
        kind: str,
        step_id: str | None = None,
        attempt: int | None = None,
        payload: dict[str, Any] = _EMPTY,
        run_status: RunStatus | None = None,
    ) -> Event:
        self.seq += 1
        ev = Event(
            self.run_id, self.seq, self.clock.now(), self.epoch, kind, step_id, attempt, payload
        )
        self.state.apply(ev)
        self.store.append(self.run_id, self.epoch, (ev,), run_status)
        if self.subscribers:
            self._notify(ev)
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
    async def drive(self, phase: str = "start") -> None:
        """Run until the run is terminal (or, for a suspended run, until closed). Callers
        call :meth:`prepare_drive` first, when they schedule it."""
        if not self.driving:
            self.prepare_drive()
        self.closing = False
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if phase == "start":
                    for nid in self.graph.top:
                        self.indeg[nid] = len(self.nodes[nid].deps)
                    for nid in self.graph.top:
                        if self.indeg[nid] == 0:
                            self._deps_met(self.nodes[nid])
                elif phase == "recover":
                    from chainlab.runtime.recovery import finish_recovery

                    self._start_deferred_timers()
                    await finish_recovery(self, self.to_reconcile)
                elif phase == "rollback":
                    self.stopping = "rollback"
                self._wake_workers(0)
                while True:
                    if self._quiescent() and await self._settle():
                        break
                    await self._changed.wait()
                    self._changed = anyio.Event()
                self.closing = True
                for ev in self.idle:
                    ev.set()
                tg.cancel_scope.cancel()
        except Exception as exc:  # recorded; Run.wait() raises it
            self.error = _unwrap(exc)
            log.debug("run %s stopped: %r", self.run_id, self.error)
            self._signal_settled()
        finally:
            self.driving = False
            self._tg = None
            self.drive_done.set()

    def prepare_drive(self) -> None:
        """Mark the run as driven from the moment a driver is scheduled (not when it first
        runs), so a control call in between never starts a second driver."""
        self.driving = True
        self.drive_done = anyio.Event()

    def _quiescent(self) -> bool:
        if self.running or self.timers:
            return False
        if self.stopping or (self.paused and not self.step_tokens):
            return True
        return not any(self.steps[nid].status == S.READY for _, nid in self.ready)

    async def _settle(self) -> bool:
        """Nothing can move by itself: end the run, suspend it, or wait for a person."""
        if self.stopping:
            from chainlab.runtime.saga import finish_stopped

            await finish_stopped(self)
            await self.flush_and_signal()
            return True
        if self.paused:
            await self.flush_and_signal()
            return False
        unfinished = [nid for nid, st in self.steps.items() if st.status in _UNSETTLED]
        waiting = {nid: str(st.status) for nid, st in self.steps.items() if st.status in _WAITING}
        if not unfinished and not waiting:
            self._finish_normally()
            await self.flush_and_signal()
            return True
        if not waiting:
            raise RuntimeError(
                f"scheduler stalled with unfinished steps {unfinished}; "
                "this is a chainlab bug, please report it"
            )
        if self.state.status != R.SUSPENDED:
            self.emit("run_suspended", payload={"waiting": waiting}, run_status=R.SUSPENDED)
        await self.flush_and_signal()
        return False

    def _finish_normally(self) -> None:
        bad = {
            nid: str(st.status)
            for nid, st in self.steps.items()
            if st.status in (S.FAILED, S.REJECTED)
        }
        if bad:
            self.emit("run_failed", payload={"steps": bad}, run_status=R.FAILED)
        else:
            self.emit("run_succeeded", run_status=R.SUCCEEDED)

    async def flush_and_signal(self) -> None:
        await self.store.flush(self.run_id, self.epoch)
        self._signal_settled()

    def _signal_settled(self) -> None:
        self.settled_status = self.state.status
        self._settled.set()
        self._settled = anyio.Event()

    async def wait_settled(self) -> None:
        await self._settled.wait()

    # ================================================================== release
    def _deps_met(self, node: Node) -> None:
        """All dependencies are done: evaluate the condition, resolve args, then ready or
        wait for confirmation."""
        if self.stopping:
            return
        nid = node.id
        resolve = self.resolver(node)
        if node.when is not None:
            try:
                go = evaluate(node.when, resolve)
            except (LookupError, TypeError) as exc:
                self._fail_early(node, f"condition {node.step.when!r} failed: {exc}")
                return
            if not go:
                self.emit("step_skipped", nid, payload={"reason": SkipReason.CONDITION})
                self._after_done(node)
                return
        if node.static_args is not None:
            args = node.static_args
        else:
            try:
                args = node.render_args(resolve)
            except (LookupError, TypeError) as exc:
                self._fail_early(node, f"cannot resolve args: {exc}")
                return
        self.args[nid] = args
        if node.needs_confirmation(args):
            self._request_confirmation(node, args)
            return
        self.emit("step_ready", nid)
        heapq.heappush(self.ready, (node.order, nid))

    def _request_confirmation(self, node: Node, args: dict[str, Any]) -> None:
        try:
            preview = node.tool.make_preview(args) if node.tool else args
            preview = to_json_value(preview)
        except Exception as exc:
            preview = f"(preview failed: {type(exc).__name__}: {exc})"
        self.emit(
            "step_waiting_confirmation",
            node.id,
            payload={
                "args": args,
                "args_hash": args_hash(args),
                "preview": preview,
                "tool": node.step.tool,
            },
        )

    def _fail_early(self, node: Node, message: str) -> None:
        """A step fails before any attempt (bad reference at run time)."""
        self.emit(
            "step_failed",
            node.id,
            payload={"error_kind": ErrorKind.INVALID_INPUT, "error": message},
        )
        self._after_done(node)

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

    def _after_done(self, node: Node) -> None:
        """A step reached a terminal state: release or skip its dependants."""
        st = self.steps[node.id]
        if node.group is not None:
            self._child_done(self.nodes[node.group])
        status = st.status
        ok = status in _SATISFIED or (status == S.SKIPPED and st.reason == SkipReason.CONDITION)
        if ok:
            for sid in node.succ:
                n = self.indeg[sid] - 1
                self.indeg[sid] = n
                if n == 0 and self.steps[sid].status == S.PENDING:
                    self._deps_met(self.nodes[sid])
            return
        reason = SkipReason.REJECTED if status == S.REJECTED else SkipReason.UPSTREAM_FAILED
        if status == S.SKIPPED and st.reason == SkipReason.REJECTED:
            reason = SkipReason.REJECTED
        for sid in node.succ:
            if self.steps[sid].status == S.PENDING:
                self.emit("step_skipped", sid, payload={"reason": reason, "because": node.id})
                self._after_done(self.nodes[sid])
        if status in (S.FAILED, S.REJECTED) and self.options.on_failure == "fail_fast":
            self.start_stopping("failed", f"step {node.id!r} {status}")

    # ================================================================== sub-chains
    def _start_group(self, node: Node, args: dict[str, Any]) -> None:
        st = self.steps[node.id]
        self.emit(
            "step_started",
            node.id,
            st.attempts + 1,
            {"args": args, "tool": node.step.tool, "subchain": True},
        )
        for cid in node.children:
            self.indeg[cid] = len(self.nodes[cid].deps)
        for cid in node.children:
            if self.indeg[cid] == 0 and self.steps[cid].status == S.PENDING:
                self._deps_met(self.nodes[cid])
        if not node.children:
            self._child_done(node)

    def _child_done(self, group: Node) -> None:
        st = self.steps[group.id]
        if st.status != S.RUNNING:
            return
        kids = [self.steps[c] for c in group.children]
        if any(k.status in _UNSETTLED or k.status == S.IN_DOUBT for k in kids):
            return
        bad = [
            k.step_id
            for k in kids
            if k.status in (S.FAILED, S.REJECTED, S.CANCELLED)
            or (k.status == S.SKIPPED and k.reason != SkipReason.CONDITION)
        ]
        if bad:
            self.emit(
                "step_failed",
                group.id,
                st.attempts,
                {
                    "error_kind": ErrorKind.EXECUTION_FAILED,
                    "error": f"sub-chain steps did not succeed: {', '.join(bad)}",
                },
            )
        else:
            prefix = group.id + "/"
            output = {k.step_id[len(prefix) :]: k.output for k in kids if k.status in _SATISFIED}
            self.emit("step_succeeded", group.id, st.attempts, {"output": output})
        self._after_done(group)

    # ================================================================== dispatch
    def _take(self) -> Node | None:
        """The next dispatchable ready step (declaration order), with its slot, keys and pool
        units taken; None when nothing can start now."""
        if (
            self.stopping
            or (self.paused and not self.step_tokens)
            or self.running >= self.max_concurrency
        ):
            return None
        skipped: list[tuple[tuple[int, ...], str]] = []
        found: Node | None = None
        token = self.step_tokens[0] if self.step_tokens else None
        while self.ready:
            item = heapq.heappop(self.ready)
            nid = item[1]
            if self.steps[nid].status != S.READY:
                continue  # stale entry (cancelled, re-queued)
            node = self.nodes[nid]
            if token is not None and nid != token:
                skipped.append(item)
                continue
            if nid in self.breakpoints and nid not in self.bp_passed and not self.step_tokens:
                self.bp_passed.add(nid)
                skipped.append(item)
                self.pause_now(reason="breakpoint", step_id=nid)
                break
            if not self._acquire(node):
                skipped.append(item)
                continue
            found = node
            break
        for item in skipped:
            heapq.heappush(self.ready, item)
        if found is not None:
            if self.step_tokens:
                self.step_tokens.pop(0)
                self.bp_passed.add(found.id)
            self.running += 1
        return found

    def _acquire(self, node: Node) -> bool:
        tool = node.tool
        if tool is None or (tool.serial_key is None and not tool.resources):
            return True
        key = tool.resolve_serial_key(self.args[node.id])
        if key is not None and key in self.keys_held:
            return False
        for pool, units in tool.resources.items():
            cap = self.pools.get(pool)
            if cap is not None and self.pool_used.get(pool, 0) + units > cap:
                return False
        if key is not None:
            self.keys_held.add(key)
        for pool, units in tool.resources.items():
            self.pool_used[pool] = self.pool_used.get(pool, 0) + units
        return True

    def _release(self, node: Node) -> None:
        tool = node.tool
        if tool is None or (tool.serial_key is None and not tool.resources):
            return
        key = tool.resolve_serial_key(self.args[node.id])
        if key is not None:
            self.keys_held.discard(key)
        for pool, units in tool.resources.items():
            self.pool_used[pool] -= units

    def _wake_workers(self, reserve: int) -> None:
        """Make sure enough workers look at the ready queue (``reserve``: workers already
        about to look, e.g. the caller)."""
        if self.stopping or self._tg is None or (self.paused and not self.step_tokens):
            return
        want = len(self.ready) - reserve
        while want > 0 and self.idle:
            self.idle.pop().set()
            want -= 1
        while want > 0 and self.workers < self.max_concurrency:
            self.workers += 1
            self._tg.start_soon(self._worker)
            want -= 1

    async def _worker(self) -> None:
        scope = anyio.CancelScope()
        self.calls[id(scope)] = scope  # cancel() cancels every worker (and its call)
        try:
            with scope:
                await self._work()
        finally:
            self.calls.pop(id(scope), None)
            self.workers -= 1
            self.poke()  # a cancelled worker ends without looking for work again

    async def _work(self) -> None:
        while not self.closing:
            node = self._take()
            if node is None:
                if self.running == 0:
                    self.poke()
                ev = anyio.Event()
                self.idle.append(ev)
                await ev.wait()
                continue
            try:
                if node.is_group:
                    self._start_group(node, self.args[node.id])
                else:
                    await run_attempt(self, node)
            finally:
                self.running -= 1
                self._release(node)
            self._wake_workers(1)

    def start_timer(self, node: Node, delay: float) -> None:
        scope = anyio.CancelScope()
        self.timers[node.id] = scope
        if self._tg is None:  # recovery runs before the driver: start it with the driver
            self._deferred_timers.append((node, delay))
            return
        self._tg.start_soon(self._backoff, node, delay, scope)

    def _start_deferred_timers(self) -> None:
        assert self._tg is not None
        for node, delay in self._deferred_timers:
            self._tg.start_soon(self._backoff, node, delay, self.timers[node.id])
        self._deferred_timers.clear()

    async def _backoff(self, node: Node, delay: float, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await self.clock.sleep(delay)
                if self.steps[node.id].status == S.RETRY_WAIT and not self.stopping:
                    self.emit("step_ready", node.id)
                    heapq.heappush(self.ready, (node.order, node.id))
        finally:
            self.timers.pop(node.id, None)
            self._wake_workers(0)
            self.poke()

    # ================================================================== control
    def start_stopping(self, why: str, reason: str) -> None:
        """Release nothing new; cancel back-off timers; running steps finish."""
        if self.stopping:
            return
        self.stopping = why
        self.stop_reason = reason
        self.settled_status = None  # wait() must wait for the end of the stop, not return
        # the status (e.g. suspended) it had before
        for scope in list(self.timers.values()):
            scope.cancel()
        self.poke()

    def pause_now(self, reason: str = "user", step_id: str | None = None) -> None:
        self.paused = True
        if self.state.status in (R.RUNNING, R.SUSPENDED):
            payload = (
                {"reason": reason} if step_id is None else {"reason": reason, "step_id": step_id}
            )
            self.emit("run_paused", payload=payload, run_status=R.PAUSED)
        self.poke()

    def unpause(self) -> None:
        if not self.paused:
            return
        self.paused = False
        self.step_tokens.clear()
        if self.state.status == R.PAUSED:
            self.emit("run_resumed", payload={"reason": "unpause"}, run_status=R.RUNNING)
        self._wake_workers(0)
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
        if not self.paused:
            self.pause_now()
        target = step_id or ready[0]
        self.step_tokens.append(target)
        self._wake_workers(0)
        self.poke()
        return target

    def cancel(self) -> None:
        if self.state.status in RUN_TERMINAL:
            raise RunStateError(
                f"run is already {self.state.status}",
                run_id=self.run_id,
                status=str(self.state.status),
            )
        self.start_stopping("cancelled", "cancelled by a person")
        for scope in list(self.calls.values()):
            scope.cancel()

    # ================================================================== queries
    def require_step(self, step_id: str) -> Node:
        node = self.nodes.get(step_id)
        if node is None:
            raise UnknownStepError(step_id, self.nodes, run_id=self.run_id)
        return node

    def require_waiting(self, step_id: str, status: StepStatus, action: str) -> Node:
        node = self.require_step(step_id)
        st = self.steps[step_id]
        if st.status != status:
            waiting = [n for n, s in self.steps.items() if s.status == status]
            raise RunStateError(
                f"cannot {action} step {step_id!r}: it is {st.status}, not {status} "
                f"({status}: {', '.join(waiting) or 'none'})",
                run_id=self.run_id,
                status=str(st.status),
            )
        return node

    def ready_steps(self) -> list[str]:
        live = sorted({item for item in self.ready if self.steps[item[1]].status == S.READY})
        return [nid for _, nid in live]

    def waiting(self) -> dict[str, str]:
        return {nid: str(st.status) for nid, st in self.steps.items() if st.status in _WAITING}


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
