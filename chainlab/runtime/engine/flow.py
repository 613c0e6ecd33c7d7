"""A step's way through the graph (DESIGN §4), between its attempts: the kernel's scheduler
says what a step's end releases, these functions act on it.

    unblocked       dependencies done (scheduler.done): condition, args, confirmation or
                    ready
    make_ready      queued for a slot with its args (a worker takes it: :mod:`.driver`, which
                    hands it to its kind: :mod:`.attempt.kind`)
    finished        a terminal state: the scheduler releases or skips its dependants, a
                    failure under ``fail_fast`` stops the run; the last of a parent's steps
                    (a sub-chain's, a for_each step's instances) settles the parent
    start_children  a parent's steps start (its kind calls it: a sub-chain when it starts,
                    a for_each step when it has grown its instances)

The kernel (:meth:`.kernel.Kernel.apply`), an attempt's outcome (:mod:`.attempt.call.fate`),
recovery (:mod:`.recovery`) and the saga (:func:`resolver`, for rollback args) come in here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chainlab.events import ErrorKind, EventKind, SkipReason, StepStatus
from chainlab.events.status import RELEASES_DEPENDANTS, STEP_TERMINAL, StopReason, releases
from chainlab.plan.parts import INDEX_NAME
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.runtime.engine.attempt.kind import kind_of
from chainlab.runtime.engine.masked import tracking
from chainlab.tools import args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["children_failed", "finished", "make_ready", "request_confirmation", "resolver",
           "start_children", "unblocked"]

S = StepStatus
K = EventKind


def unblocked(k: RunCore, node: Node) -> None:
    """All dependencies are done: evaluate the condition, resolve args, then ready or
    wait for confirmation."""
    if k.stopping:
        return  # stays pending; the stop cancels it
    found = k.resolvers.get(id(node.ns)) if node.index is None else None
    resolve = found[1] if found is not None and found[0] is node.ns else resolver(k, node)
    if k.state.redacted:  # a resumed run whose log holds masks: note what it reads
        resolve = tracking(k, node, resolve)
    if node.when is not None:
        try:
            go = evaluate(node.when, resolve)
        except (LookupError, TypeError) as exc:
            _fail_early(k, node, f"condition {node.step.when!r} failed: {exc}")
            return
        if not go:
            k.emit(K.STEP_SKIPPED, node.id, payload={"reason": SkipReason.CONDITION})
            finished(k, node)
            return
    if node.static_args is not None:
        args = node.static_args
    else:
        try:
            args = node.render_args(resolve)
        except (LookupError, TypeError) as exc:
            _fail_early(k, node, f"cannot resolve args: {exc}")
            return
    confirm = node.fixed_confirm
    if confirm is None:
        confirm = node.needs_confirmation(args)
    confirm_first = k.state.confirm_first
    effect_in_experiment = k.state.experiment is not None and node.tool is not None \
        and node.tool.side_effects  # (an experiment's side effect: the gate decides it)
    if not effect_in_experiment and (
            (confirm and not ((k.rules or k.state.grants) and node.tool is not None))
            or (confirm_first and node.id in confirm_first)):
        # only a person can decide it: ask now (a call of a tool, with rules or grants in
        # force, is decided by the gate its kind passes, the one place that knows them:
        # DESIGN §21; a sub-chain step asks here, always)
        request_confirmation(k, node, args)
        k.sched.park(node.id)
        return
    k.emit(K.STEP_READY, node.id)
    make_ready(k, node, args)


def make_ready(k: RunCore, node: Node, args: dict[str, Any] | None = None) -> None:
    """Queue a step (unblocked or parked) for a slot, with the args it will run with.
    Wakes no worker: a worker that finishes a step looks again by itself (no task switch
    per step); callers outside a worker (decisions, timers, the start) wake them."""
    if args is not None:
        k.args[node.id] = args
    tool = node.tool
    key = tool.resolve_serial_key(k.args[node.id]) if node.keyed and tool else None
    k.sched.ready(node.id, key, node.units)


def request_confirmation(k: RunCore, node: Node, args: dict[str, Any]) -> None:
    """Ask a person: the resolved args (and their hash, which an approval is bound to)
    and the preview are recorded with ``step_waiting_confirmation``."""
    try:
        preview = node.tool.make_preview(args) if node.tool else args
        preview = to_json_value(preview)
    except Exception as exc:
        preview = f"(preview failed: {type(exc).__name__}: {exc})"
    k.emit(
        K.STEP_WAITING_CONFIRMATION,
        node.id,
        payload={
            "args": args,
            "args_hash": args_hash(args),
            "preview": preview,
            "tool": node.step.tool,
            **k.state.confirm_first.get(node.id, {}),
        },
    )


def _fail_early(k: RunCore, node: Node, message: str) -> None:
    """A step fails before any attempt (bad reference at run time)."""
    k.emit(
        K.STEP_FAILED,
        node.id,
        payload={"error_kind": ErrorKind.INVALID_INPUT, "error": message},
    )
    finished(k, node)


def resolver(k: RunCore, node: Node) -> Callable[[Ref], Any]:
    """How ``node``'s references read the run: its namespace's steps, memory, context. One
    per namespace and run (a for_each instance's reads its own item: one per instance)."""
    if node.index is None:
        ns = node.ns
        found = k.resolvers.get(id(ns))
        if found is None or found[0] is not ns:  # (an id is only unique while ns lives)
            found = k.resolvers[id(ns)] = (ns, _resolver(k, node))
        resolve = found[1]
    else:
        resolve = _resolver(k, node)
    # a resumed run whose log holds masks: note what the step reads (.masked)
    return tracking(k, node, resolve) if k.state.redacted else resolve


def _resolver(k: RunCore, node: Node) -> Callable[[Ref], Any]:
    ns = node.ns
    steps = k.steps
    index = node.index
    name = node.step.item_name if index is not None else None

    def resolve(ref: Ref) -> Any:
        root = ref.root
        if root == "steps":
            value = steps[ns.prefix + (ref.target or "")].output
        elif root == "memory":
            target = ref.target or ""
            if index is not None and not ref.source.startswith("memory.") \
                    and (target in (name, INDEX_NAME)):
                value = node.item if target == name else index  # an instance's own
            else:
                value = steps[ns.save_as[target]].output
        elif root == "context":
            value = k.context if ns.group is None else steps[ns.group].args
        else:
            raise LookupError(f"{ref.source!r}: '{root}' is only available in rollback args")
        return walk_path(value, ref.path, ref.source) if ref.path else value

    return resolve


def finished(k: RunCore, node: Node) -> None:
    """A step reached a terminal state: release or skip its dependants."""
    st = k.steps[node.id]
    group = node.group
    if group is not None:
        left = k.open_children.get(group)
        if left is not None:  # (None: its parent never started them)
            left -= 1
            k.open_children[group] = left
            if left == 0:
                parent = k.nodes[group]
                kind_of(k, parent).child_settled(k, parent)
    ok = st.status in RELEASES_DEPENDANTS or releases(st.status, st.reason)
    if node.children:  # the steps of a sub-chain step that never started never run
        why = SkipReason.CONDITION if ok else (st.reason or SkipReason.UPSTREAM_FAILED)
        _skip_children(k, node, why)
    released = k.sched.done(node.id, ok)
    if ok:
        for step_id in released:
            unblocked(k, k.nodes[step_id])
        return
    status = st.status
    rejected = status == S.REJECTED or (
        status == S.SKIPPED and st.reason == SkipReason.REJECTED
    )
    reason = SkipReason.REJECTED if rejected else SkipReason.UPSTREAM_FAILED
    for step_id in released:
        if k.steps[step_id].status == S.PENDING:
            k.emit(K.STEP_SKIPPED, step_id, payload={"reason": reason, "because": node.id})
            finished(k, k.nodes[step_id])
    if status in (S.FAILED, S.REJECTED) and k.options.on_failure == "fail_fast" \
            and not node.contained:  # (an agent's call: its model reads what came of it)
        k.start_stopping(StopReason.FAILED, f"step {node.id!r} {status}")


# ================================================================== parents
def start_children(k: RunCore, node: Node, ids: list[str]) -> None:
    """A parent's steps start (it holds no slot while they run): those without pending
    dependencies are unblocked; it settles when the last has finished (at once when it has
    none, or they are all done already: a fork reused them)."""
    k.open_children[node.id] = len(ids)
    sched, steps, nodes = k.sched, k.steps, k.nodes
    for step_id in sched.start(ids):
        st = steps[step_id]
        if st.status == S.PENDING:
            unblocked(k, nodes[step_id])
        elif st.status in STEP_TERMINAL:  # reused by a fork as it grew: done already
            finished(k, nodes[step_id])
    if not ids:
        kind_of(k, node).child_settled(k, node)


def children_failed(k: RunCore, ids: list[str]) -> list[str]:
    """Which of a parent's settled steps did not end well (it fails with them)."""
    steps = k.steps
    return [step_id for step_id in ids
            if steps[step_id].status in (S.FAILED, S.REJECTED, S.CANCELLED)
            or (steps[step_id].status == S.SKIPPED
                and steps[step_id].reason != SkipReason.CONDITION)]


def _skip_children(k: RunCore, group: Node, reason: str) -> None:
    """A sub-chain step that never started: its children never run either."""
    for step_id in group.children:
        if k.steps[step_id].status == S.PENDING:
            k.emit(K.STEP_SKIPPED, step_id, payload={"reason": reason, "because": group.id})
            child = k.nodes[step_id]
            if child.children:
                _skip_children(k, child, reason)
            k.sched.done(step_id, False)
