"""A step's way through the graph (DESIGN §4), between its attempts: the kernel's scheduler
says what a step's end releases, these functions act on it.

    unblocked     dependencies done (scheduler.done): condition, args, confirmation or ready
    make_ready    queued for a slot with its args (a worker takes it: :mod:`.driver`)
    finished      a terminal state: the scheduler releases or skips its dependants, a
                  failure under ``fail_fast`` stops the run
    start_group   a sub-chain step: its children run, it holds no slot; ``child_done``
                  settles it when they have

The kernel (:meth:`.kernel.Kernel.apply`), an attempt's outcome (:mod:`.attempt.fate`), recovery
(:mod:`.recovery`) and the saga (:func:`resolver`, for rollback args) come in here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chainlab.events import ErrorKind, EventKind, SkipReason, StepStatus
from chainlab.events.status import RELEASES_DEPENDANTS, UNSETTLED, StopReason, releases
from chainlab.plan.inputs import select_output
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.tools import args_hash, to_json_value

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.kernel import Kernel

__all__ = ["child_done", "finished", "make_ready", "request_confirmation", "resolver",
           "start_group", "unblocked"]

S = StepStatus
K = EventKind


def unblocked(k: Kernel, node: Node) -> None:
    """All dependencies are done: evaluate the condition, resolve args, then ready or
    wait for confirmation."""
    if k.stopping:
        return  # stays pending; the stop cancels it
    resolve = resolver(k, node)
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
    if confirm or (confirm_first and node.id in confirm_first):
        request_confirmation(k, node, args)
        k.sched.park(node.id)
        return
    k.emit(K.STEP_READY, node.id)
    make_ready(k, node, args)


def make_ready(k: Kernel, node: Node, args: dict[str, Any] | None = None) -> None:
    """Queue a step (unblocked or parked) for a slot, with the args it will run with.
    Wakes no worker: a worker that finishes a step looks again by itself (no task switch
    per step); callers outside a worker (decisions, timers, the start) wake them."""
    if args is not None:
        k.args[node.id] = args
    tool = node.tool
    key = None
    units: dict[str, int] = {}
    if tool is not None and (tool.serial_key is not None or tool.resources):
        key = tool.resolve_serial_key(k.args[node.id])
        units = tool.resources
    k.sched.ready(node.id, key, units)


def request_confirmation(k: Kernel, node: Node, args: dict[str, Any]) -> None:
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


def _fail_early(k: Kernel, node: Node, message: str) -> None:
    """A step fails before any attempt (bad reference at run time)."""
    k.emit(
        K.STEP_FAILED,
        node.id,
        payload={"error_kind": ErrorKind.INVALID_INPUT, "error": message},
    )
    finished(k, node)


def resolver(k: Kernel, node: Node) -> Callable[[Ref], Any]:
    """How ``node``'s references read the run: its namespace's steps, memory, context."""
    ns = node.ns
    steps = k.steps

    def resolve(ref: Ref) -> Any:
        root = ref.root
        if root == "steps":
            value = steps[ns.prefix + (ref.target or "")].output
        elif root == "memory":
            value = steps[ns.save_as[ref.target or ""]].output
        elif root == "context":
            value = k.context if ns.group is None else steps[ns.group].args
        else:
            raise LookupError(f"{ref.source!r}: '{root}' is only available in rollback args")
        return walk_path(value, ref.path, ref.source) if ref.path else value

    return resolve


def finished(k: Kernel, node: Node) -> None:
    """A step reached a terminal state: release or skip its dependants."""
    st = k.steps[node.id]
    if node.group is not None:
        child_done(k, k.nodes[node.group])
    ok = releases(st.status, st.reason)
    if node.is_group:  # children of a sub-chain step that never started never run
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
    if status in (S.FAILED, S.REJECTED) and k.options.on_failure == "fail_fast":
        k.start_stopping(StopReason.FAILED, f"step {node.id!r} {status}")


# ================================================================== sub-chains
def start_group(k: Kernel, node: Node) -> None:
    """A sub-chain step starts: its children are started, the step holds no slot."""
    st = k.steps[node.id]
    k.emit(
        K.STEP_STARTED,
        node.id,
        st.attempts + 1,
        {"args": k.args[node.id], "tool": node.step.tool, "subchain": True},
    )
    k.sched.park(node.id)  # holds no slot while its children run
    for step_id in k.sched.start(node.children):
        if k.steps[step_id].status == S.PENDING:
            unblocked(k, k.nodes[step_id])
    if not node.children:
        child_done(k, node)


def child_done(k: Kernel, group: Node) -> None:
    """A child settled: once all have, the sub-chain step succeeds with their outputs
    or fails."""
    st = k.steps[group.id]
    if st.status != S.RUNNING:
        return
    kids = [k.steps[c] for c in group.children]
    if any(kid.status in UNSETTLED or kid.status == S.IN_DOUBT for kid in kids):
        return
    bad = [
        kid.step_id
        for kid in kids
        if kid.status in (S.FAILED, S.REJECTED, S.CANCELLED)
        or (kid.status == S.SKIPPED and kid.reason != SkipReason.CONDITION)
    ]
    if bad:
        k.emit(
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
        output = {kid.step_id[len(prefix) :]: kid.output for kid in kids
                  if kid.status in RELEASES_DEPENDANTS}
        if group.subchain is not None and group.subchain.output is not None:
            output = select_output(group.subchain, output, st.args or {})
        k.emit(K.STEP_SUCCEEDED, group.id, st.attempts, {"output": output})
    finished(k, group)


def _skip_children(k: Kernel, group: Node, reason: str) -> None:
    """A sub-chain step that never started: its children never run either."""
    for step_id in group.children:
        if k.steps[step_id].status == S.PENDING:
            k.emit(K.STEP_SKIPPED, step_id, payload={"reason": reason, "because": group.id})
            child = k.nodes[step_id]
            if child.is_group:
                _skip_children(k, child, reason)
            k.sched.done(step_id, False)

