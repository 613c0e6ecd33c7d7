"""The ``for_each`` kind: a step that runs once per item of a list known only at run time
(DESIGN §17).

When a worker takes the step, its list is read (one whole reference); the step's instances
``ID[0]``, ``ID[1]``, ... are recorded by ONE ``steps_added`` event (all or nothing: their
``ids`` and ``items`` in order; the step itself makes no call, so it records no attempt: that
event starts it) and start as the steps of a parent: each is an ordinary step of
the step's tool for every rule (its own args with ``{{ item }}`` and ``{{ index }}``, its
own ``when``, attempts, retries, timeout, in_doubt, confirmation bound to its own args,
compensation), capped by the step's ``max_concurrency`` (a pool of the scheduler). The step
holds no slot while they run; when the last has finished it succeeds with the list of their
outputs in item order (an instance skipped by its ``when`` leaves no entry), or fails naming
the instances that did not succeed. An empty list succeeds at once with ``[]``.

A list that is not a list, or longer than :data:`~chainlab.plan.parts.FOR_EACH_LIMIT`, fails
the step (``invalid_input``) naming the value's type or the count, and the reference.

:func:`grow_nodes` rebuilds the instances from a recorded ``steps_added`` (recovery, and the
readers of a stored run, through :mod:`chainlab.runtime.engine.growth`).

In a fork (DESIGN §11) the step grows again, and an instance is reused when the parent ran
an instance with the same args and tool code (whatever its position): the fork's plan shows
that per instance when the list is known before the fork runs (:meth:`ForEach.fork_decide`),
and the fork's run decides it as the step grows (:func:`fork_marks`), by the same match.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab._text import safe_repr
from chainlab.errors import DecisionError
from chainlab.events import ErrorKind, EventKind, StepStatus
from chainlab.events.status import RELEASES_DEPENDANTS
from chainlab.plan.parts import FOR_EACH_LIMIT
from chainlab.plan.refs import evaluate
from chainlab.runtime.engine.attempt.kind import Parent, confirms_in_fork
from chainlab.runtime.engine.compile import Node, compile_level
from chainlab.runtime.engine.flow import children_failed, finished, resolver, start_children
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.events import StepState
    from chainlab.runtime.engine.attempt.kind import Fork
    from chainlab.runtime.engine.compile import Graph
    from chainlab.runtime.engine.core import RunCore
    from chainlab.tools import Tool

K = EventKind
S = StepStatus

__all__ = ["ForEach", "fork_marks", "grow_nodes", "instance_id"]


def instance_id(step_id: str, index: int) -> str:
    """The id of a ``for_each`` step's instance: ``ID[index]``."""
    return f"{step_id}[{index}]"


class ForEach(Parent):
    """A step run once per item of a list known at run time (``for_each``)."""

    name = "for_each"
    what = "for_each step"

    async def run(self, k: RunCore, node: Node) -> None:
        """Read the list, record the instances (one ``steps_added``), start them."""
        each = node.each
        assert each is not None
        attempt = k.steps[node.id].attempts + 1
        source = node.step.for_each
        try:
            items = resolver(k, node)(each.source)
        except (LookupError, TypeError) as exc:
            self._fail(k, node, attempt, f"for_each {source!r} cannot be read: {exc}")
            return
        if not isinstance(items, list):
            self._fail(k, node, attempt,
                       f"for_each {source!r} is {_json_type(items)} ({safe_repr(items, 60)}), "
                       "not a list: refer to a list (a field of that value that holds one: "
                       f"{each.source.source}.FIELD)")
            return
        if len(items) > FOR_EACH_LIMIT:
            self._fail(k, node, attempt,
                       f"for_each {source!r} has {len(items):,} items; a for_each step runs "
                       f"at most {FOR_EACH_LIMIT:,} instances: split the list over several "
                       "steps, or batch the items in the tool")
            return
        ids = [instance_id(node.id, i) for i in range(len(items))]
        payload: dict[str, Any] = {"kind": self.name, "ids": ids, "items": items}
        nodes = grow_nodes(k.graph, k.nodes, node, payload)
        forked = (k.state.forked_from or {}).get("instances", {}).get(node.id)
        if forked is not None:  # a fork: reuse what the parent run did with the same args
            fork_marks(k, node, nodes, forked, payload)
        k.emit(K.STEPS_ADDED, node.id, attempt, payload)
        k.add_nodes(nodes)
        self.arm(k, node)
        k.sched.park(node.id)  # holds no slot while its instances run
        start_children(k, node, ids)

    @staticmethod
    def arm(k: RunCore, node: Node) -> None:
        """The pool that caps the step's instances in flight (its ``max_concurrency``)."""
        each = node.each
        assert each is not None
        if each.pool is not None and each.limit is not None:
            k.sched.pools[each.pool] = each.limit

    @staticmethod
    def _fail(k: RunCore, node: Node, attempt: int, message: str) -> None:
        """It fails before it grows anything (it makes no call: no attempt is recorded)."""
        k.emit(K.STEP_FAILED, node.id, None,
               {"error_kind": ErrorKind.INVALID_INPUT, "error": message})
        finished(k, node)

    def child_settled(self, k: RunCore, node: Node) -> None:
        st = k.steps[node.id]
        if st.status != S.RUNNING:
            return
        ids = self.children(k, node)
        bad = children_failed(k, ids)
        if bad:
            shown = ", ".join(f"{c} ({k.steps[c].status})" for c in bad[:10])
            more = f" (+{len(bad) - 10} more)" if len(bad) > 10 else ""
            k.emit(K.STEP_FAILED, node.id, st.attempts, {
                "error_kind": ErrorKind.EXECUTION_FAILED,
                "error": f"{len(bad)} of {len(ids)} instances did not succeed: {shown}{more}"})
        else:
            steps = k.steps
            output = [steps[c].output for c in ids if steps[c].status in RELEASES_DEPENDANTS]
            k.emit(K.STEP_SUCCEEDED, node.id, st.attempts, {"output": output})
        finished(k, node)

    def regrow(self, graph: Graph, nodes: Mapping[str, Node], parent: Node,
               payload: Mapping[str, Any]) -> list[Node]:
        return grow_nodes(graph, nodes, parent, payload)

    def recover(self, k: RunCore, node: Node) -> bool:
        """It is running only once it grew (``steps_added`` starts it): its instances
        recover one by one."""
        self.arm(k, node)
        return super().recover(k, node)

    def fork_decide(self, fork: Fork, node: Node, ps: StepState | None) -> None:
        """It grows again in the fork: each instance is reused when the parent ran an
        instance with the same args and code whose effect still stands, else it runs (after
        a person's approval when it changes the world). Shown per instance when its list is
        known before the fork runs; else decided as it grows (:func:`fork_marks`)."""
        parents = fork.parent_children(node.id)
        tool = node.step.tool
        if node.id in fork.outputs:  # one output per item, given by a person
            given = fork.outputs[node.id]
            if not isinstance(given, list):
                raise DecisionError(
                    f"output given for for_each step {node.id!r} must be a list (one output "
                    f"per item), got {type(given).__name__}", step_id=node.id,
                    field="outputs")
            output = [fork.checked_output(node, item) for item in given]
            fork.decided(node, ps, fork.row(node.id, tool, "override", "output given",
                                            **_was(ps), output=output))
            return
        each = node.each
        assert each is not None
        items, why = fork.read(node, each.source)
        if not isinstance(items, list):
            fork.decided(node, ps, fork.row(
                node.id, tool, "rerun", "grows again in the fork; its instances are decided "
                f"as it grows ({why or 'it is not a list'})", **_was(ps)))
            return
        pool = _reusable(parents)
        growth = {"ids": [instance_id(node.id, i) for i in range(len(items))], "items": items}
        decisions, rows = [], []
        for inst in grow_nodes(fork.graph, fork.graph.nodes, node, growth)[:len(items)]:
            decision, row = _fork_instance(fork, inst, pool, parents)
            decisions.append(decision)
            rows.append(row)
        n = {d: decisions.count(d) for d in ("reuse", "rerun", "confirm")}
        same = (ps is not None and ps.status == S.SUCCEEDED and len(rows) == len(parents)
                and n["reuse"] == len(rows))
        fork.decided(node, ps, fork.row(
            node.id, tool, "rerun", f"grows again in the fork: {len(rows)} instances, "
            f"{n['reuse']} reused, {n['rerun']} run, {n['confirm']} after approval",
            **_was(ps)), instances=rows, same_output=same)


def _was(ps: StepState | None) -> dict[str, Any]:
    """A for_each step's own row: no args of its own, its status in the parent."""
    return {"args": {}, "parent_status": str(ps.status) if ps is not None else None}


def _fork_instance(fork: Fork, inst: Node, pool: dict[str, list[dict[str, Any]]],
                   parents: list[dict[str, Any]]) -> tuple[str, Any]:
    """An instance's decision in the fork's plan, and its row."""
    index = inst.index or 0
    was = parents[index] if index < len(parents) else None
    args = fork.args_of(inst)
    base: dict[str, Any] = {
        "args": args, "parent_status": was["status"] if was else None,
        "parent_args": was["args"] if was else None,
        "parent_output": was["output"] if was else None}
    why = fork.condition_changed(inst)
    entry = _reuse(pool, args, inst.tool) if why is None else None
    if entry is not None:
        return "reuse", fork.row(
            inst.id, inst.step.tool, "reuse", "an instance of the parent ran these args",
            **base, output=entry["output"], source_run=entry["source_run"],
            source_attempt=entry["source_attempt"], code=entry["code"],
            origin=entry["origin"])
    if why is None:
        why = "a new item" if was is None else (
            "args not known before upstream steps run" if args is None
            else "its item or args changed" if was["status"] == S.SUCCEEDED
            else f"{was['status']} in the parent")
    if confirms_in_fork(inst.tool):
        return "confirm", fork.row(inst.id, inst.step.tool, "confirm",
                                   f"{why}; side-effecting: needs approval", **base)
    return "rerun", fork.row(inst.id, inst.step.tool, "rerun", why, **base)


def _reusable(parents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The parent's instances that can be reused, by the hash of their args (in item
    order: two instances with the same args are reused in turn)."""
    pool: dict[str, list[dict[str, Any]]] = {}
    for entry in parents:
        if entry.get("reusable"):
            pool.setdefault(entry["args_hash"], []).append(entry)
    return pool


def _reuse(pool: dict[str, list[dict[str, Any]]], args: dict[str, Any] | None,
           tool: Tool | None) -> dict[str, Any] | None:
    """The parent's instance an instance with ``args`` reuses (taken from ``pool``): one
    that ran the same args with the same tool code; else None."""
    same = pool.get(args_hash(args)) if args is not None else None
    if same and (tool is None or same[0].get("code") == tool.fingerprint):
        return same.pop(0)
    return None


def fork_marks(k: RunCore, node: Node, nodes: list[Node], parents: list[dict[str, Any]],
               payload: dict[str, Any]) -> None:
    """In a fork (DESIGN §11), before the instances are recorded: an instance whose args
    (and tool code) are what a parent instance succeeded with is reused (its output copied,
    the tool not called: the effect stays the parent's); any other instance that would
    change the world runs only after a person approves it in the fork, and so does every
    side-effecting step of a sub-chain it runs. Written into the ``steps_added`` payload,
    so the decision is durable with the growth itself."""
    pool = _reusable(parents)
    confirm: dict[str, Any] = {}
    reused: dict[str, Any] = {}
    parent_run = (k.state.forked_from or {}).get("forked_from")
    tool = node.tool
    for inst in nodes[:len(payload["ids"])]:
        resolve = resolver(k, inst)
        try:
            args = inst.render_args(resolve) if inst.static_args is None else inst.static_args
            go = inst.when is None or bool(evaluate(inst.when, resolve))
        except (LookupError, TypeError):
            args, go = None, False
        entry = _reuse(pool, args, tool) if go else None
        if entry is not None:
            reused[inst.id] = {
                "decision": "reuse", "output": entry["output"], "args": args,
                **{key: entry.get(key) for key in ("source_run", "source_attempt", "code",
                                                    "tool", "origin")}}
            continue
        index = inst.index or 0
        was = parents[index] if index < len(parents) else None
        card = {"fork": {
            "parent_run": parent_run, "parent_status": was and was.get("status"),
            "parent_args": was and was.get("args"), "parent_output": was and was.get("output"),
            "reason": "its item or args changed in the fork" if was else "a new item",
            "note": _card(was, parent_run)}}
        for step_id, grown in ([(inst.id, inst)] if inst.subchain is None else
                               _below(nodes, inst)):
            if confirms_in_fork(grown.tool):
                confirm[step_id] = card
    if reused:
        payload["reused"] = reused
    if confirm:
        payload["confirm_first"] = confirm


def _below(nodes: list[Node], inst: Node) -> list[tuple[str, Node]]:
    """The steps of a sub-chain an instance runs (compiled with it), as (id, node)."""
    prefix = inst.id + "/"
    return [(n.id, n) for n in nodes if n.id.startswith(prefix)]


def _card(was: dict[str, Any] | None, parent_run: str | None) -> str:
    if was is None:
        return f"a new item: no instance of it ran in run {parent_run}"
    status = was.get("status")
    if status == S.SUCCEEDED:
        return (f"the instance at this position ran in run {parent_run} with args "
                f"{safe_repr(was.get('args'), 80)}, output {safe_repr(was.get('output'), 80)}")
    return f"the instance at this position was {status} in run {parent_run}"


def grow_nodes(graph: Graph, nodes: Mapping[str, Node], parent: Node,
               payload: Mapping[str, Any]) -> list[Node]:
    """The nodes a recorded ``steps_added`` of a ``for_each`` step adds: its instances in
    item order, then (a sub-chain as its tool) each instance's steps."""
    each = parent.each
    assert each is not None
    step, order = parent.step, parent.order
    out: list[Node] = []
    inner: dict[str, Node] = {}
    for index, (step_id, item) in enumerate(zip(payload["ids"], payload["items"],
                                                 strict=True)):
        node = Node(
            id=step_id, step=step, tool=parent.tool, order=(*order, index), deps=(),
            ns=parent.ns, render_args=each.render_args, static_args=each.static_args,
            when=each.when, retry=each.retry, timeout_s=each.timeout_s,
            rollback=each.rollback, kind=each.kind, group=parent.id,
            subchain=parent.subchain, item=item, index=index, units=each.units,
        )
        out.append(node)
        if parent.subchain is not None:  # a sub-chain per item: its steps under the instance
            node.children = compile_level(graph, parent.subchain, inner,
                                          prefix=node.id + "/", group=node.id,
                                          order=node.order)
    if inner:
        clash = [step_id for step_id in inner if step_id in nodes]
        if clash:  # pragma: no cover - ids with brackets are never a plan's
            raise AssertionError(f"grown steps {clash[:3]} already exist")
        out.extend(inner.values())
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"
