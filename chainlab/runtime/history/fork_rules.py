"""The decision table of a fork (DESIGN §11): :class:`Planner` walks the fork's graph in
dependency order and has each step decided by its kind (:meth:`Kind.fork_decide`, the
planner being the kind's :class:`~chainlab.runtime.engine.attempt.kind.Fork`): as one step
(:meth:`Planner.decide_one`: reuse when the same tool, code and args, an effect that still
stands where it was made, a condition that still holds; override, rerun or confirm), or a
for_each step's instances one by one (the kind's own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from chainlab._json import join_path
from chainlab.errors import (
    DecisionError,
    PlanError,
    Problem,
)
from chainlab.events import (
    EventKind,
    RunState,
    StepState,
    StepStatus,
)
from chainlab.plan.parts import INDEX_NAME
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.runtime.engine.attempt.kind import confirms_in_fork
from chainlab.runtime.engine.attempt.kinds import KINDS
from chainlab.runtime.engine.compile import Graph, Node
from chainlab.runtime.history.fork_plan import ForkDecision, ForkRow, args_diff, same
from chainlab.tools import NotJSONError, args_hash, to_json_value

S = StepStatus
K = EventKind

__all__ = ["Planner"]


class _Unknown(Exception):
    """A reference to a step whose fork output is not known before the fork runs."""

    def __init__(self, step_id: str):
        super().__init__(step_id)
        self.step_id = step_id


class Planner:
    """Walks the fork's graph in dependency order, deciding each step."""

    def __init__(self, run_id: str, pstate: RunState, graph: Graph, context: dict[str, Any],
                 rerun: set[str], outputs: dict[str, Any], edited: set[str],
                 origin: Callable[[str], RunState | None] | None = None):
        self.run_id = run_id
        self.origin = origin
        self.pstate = pstate
        self.nodes = graph.nodes
        self.context = context
        self.rerun = rerun
        self.outputs = outputs
        self.edited = edited
        self.graph = graph
        #: an experiment's replay: every effect-free step runs again (not reused)
        self.live_effect_free = False
        self.rows: dict[str, ForkRow] = {}
        # a for_each step -> its instances' rows (when its list is known before the fork
        # runs), and what each of its parent's instances did (the fork's run reuses by it)
        self.instance_rows: dict[str, list[ForkRow]] = {}
        self.instances: dict[str, list[dict[str, Any]]] = {}
        self.known: dict[str, Any] = {}  # fork outputs known now (reuse, override)
        self.stale: set[str] = set()  # steps whose fork output may differ from the parent's
        self.args: dict[str, dict[str, Any] | None] = {}
        self.last_call = {}
        for rec in pstate.attempts:
            if rec.kind == "call":
                self.last_call[rec.step_id] = rec

    def level(self, ids: list[str]) -> None:
        for step_id in _topo(ids, self.nodes):
            self.decide(self.nodes[step_id])

    def decide(self, node: Node) -> None:
        """Decide ``node`` as its kind says (:meth:`Kind.fork_decide`): as one step
        (:meth:`decide_one`), or a for_each step instance by instance as it grows again."""
        KINDS[node.kind].fork_decide(self, node, self.pstate.steps.get(node.id))

    def decide_one(self, node: Node, ps: StepState | None) -> None:
        """The decision table for one step (a sub-chain step after its steps)."""
        args = self.resolve_args(node)
        self.args[node.id] = args
        if node.children:
            self.level(node.children)
        row = self._row(node, ps, args)
        self.decided(node, ps, row)
        if node.children and row.decision != ForkDecision.REUSE:
            self._rerun_children(node)

    def decided(self, node: Node, ps: StepState | None, row: ForkRow, *,
                instances: Sequence[ForkRow] = (), same_output: bool = False) -> None:
        """Record ``node``'s row (and the rows of the instances it grows in the fork): the
        fork's output of a reused or given step is known now; one that may differ from the
        parent's (it runs again, or a given output that is not the parent's) makes its
        dependants stale, unless it runs again to the same output (``same_output``)."""
        self.rows[node.id] = row
        self.args[node.id] = row.args
        if instances:
            self.instance_rows[node.id] = list(instances)
        if row.decision in (ForkDecision.REUSE, ForkDecision.OVERRIDE):
            self.known[node.id] = row.output
        elif same_output:
            assert ps is not None
            self.known[node.id] = ps.output
        if not (row.decision == ForkDecision.REUSE or same_output or (
                row.decision == ForkDecision.OVERRIDE and ps is not None
                and ps.status == S.SUCCEEDED and same(row.output, ps.output))):
            self.stale.add(node.id)

    @staticmethod
    def row(step_id: str, tool: str, decision: str, reason: str, **fields: Any) -> ForkRow:
        """A row of the plan (what a kind deciding its own steps records)."""
        return ForkRow(step_id=step_id, tool=tool, decision=ForkDecision(decision),
                       reason=reason, **fields)

    def _row(self, node: Node, ps: StepState | None, args: dict[str, Any] | None) -> ForkRow:
        tool = node.tool
        base: dict[str, Any] = {
            "step_id": node.id, "tool": node.step.tool,
            "parent_status": str(ps.status) if ps is not None else None, "args": args,
        }
        if ps is not None:
            base.update(parent_args=ps.args, parent_error=ps.error,
                        parent_output=ps.output if ps.status != S.FAILED else None,
                        parent_source=(ps.reused or {}).get("source_run"))
        if node.id in self.outputs:
            if node.children:
                raise DecisionError(
                    f"step {node.id!r} is a sub-chain step: give the outputs of its steps "
                    f"({', '.join(node.children)}) instead", step_id=node.id, field="outputs")
            return ForkRow(**base, decision=ForkDecision.OVERRIDE, reason="output given",
                           output=self.checked_output(node, self.outputs[node.id]))
        if node.id in self.edited and args is not None and tool is not None:
            self._check_args(node, args)
        why, source = self._why_not_reuse(node, ps, args)
        if why is None and node.id in self.rerun:
            why = "named in rerun"
        elif why is None and self.live_effect_free and tool is not None \
                and not tool.side_effects:
            why = "effect-free: runs live"
        job = self._waiting_job(node, ps, args)
        if job is not None:
            return ForkRow(**base, decision=ForkDecision.ATTACH, job=job,
                           reason=f"a job still waiting in the parent (handle "
                                  f"{json.dumps(job['handle'])}): the fork waits on the same "
                                  "job; rerun=[...] submits a new one after approval")
        if why is None:
            assert ps is not None
            return ForkRow(**base, decision=ForkDecision.REUSE, reason=source.pop("reason"),
                           output=ps.output, **source)
        if confirms_in_fork(tool):
            return ForkRow(**base, decision=ForkDecision.CONFIRM,
                           reason=f"{why}; side-effecting: needs approval")
        return ForkRow(**base, decision=ForkDecision.RERUN, reason=why)

    # -------------------------------------------------------------- what a kind reads
    def read(self, node: Node, ref: Ref) -> tuple[Any, str | None]:
        """``(value, None)``: the value ``ref`` has in the fork now; ``(None, why)`` when it
        is not known before the fork runs."""
        try:
            return self._resolver(node)(ref), None
        except _Unknown as exc:
            return None, f"upstream {exc.step_id!r} runs first"
        except (LookupError, TypeError) as exc:
            return None, f"it cannot be read now ({exc})"

    def args_of(self, node: Node) -> dict[str, Any] | None:
        """``node``'s args in the fork (None when not known before it runs)."""
        return self.resolve_args(node)

    def parent_children(self, step_id: str) -> list[dict[str, Any]]:
        """What each step the parent grew under ``step_id`` did (a for_each step's
        instances, in item order): its status, args and output, and whether (and from which
        run and attempt) it can be reused. Kept for the fork's run (``instances``), which
        reuses by it as the step grows there."""
        out = []
        for index, child in enumerate(self.pstate.children.get(step_id, [])):
            st = self.pstate.steps[child]
            if st.reused:
                source = {k: st.reused.get(k) for k in ("source_run", "source_attempt",
                                                         "code", "origin", "tool")}
            else:
                rec = self.last_call.get(child)
                source = {"source_run": self.run_id,
                          "source_attempt": rec.attempt if rec else None,
                          "code": rec.code if rec else None, "origin": "call",
                          "tool": rec.tool if rec else None}
            ok = st.status == S.SUCCEEDED and st.args is not None
            if ok and st.reused and source["origin"] == "call":
                ok = self._effect_gone(child, str(source["source_run"])) is None
            out.append({"index": index, "status": str(st.status), "args": st.args,
                        "args_hash": args_hash(st.args) if st.args is not None else None,
                        "output": st.output if st.status == S.SUCCEEDED else None,
                        "error": st.error, "reusable": ok, **source})
        self.instances[step_id] = out
        return out

    def _waiting_job(self, node: Node, ps: StepState | None, args: dict[str, Any] | None
                     ) -> dict[str, Any] | None:
        """The parent's job when the fork can attach to it: a remote job step still waiting
        in the parent (handle recorded), same args, nothing upstream changed, not named in
        rerun."""
        job = KINDS[node.kind].waiting_handle(ps)
        if (job is None or ps is None or node.id in self.rerun
                or any(d in self.stale for d in node.deps)
                or args is None or not same(args, ps.args or {})):
            return None
        return job

    def _why_not_reuse(self, node: Node, ps: StepState | None, args: dict[str, Any] | None
                       ) -> tuple[str | None, dict[str, Any]]:
        if ps is None:
            return "new step (not in the parent)", {}
        changed = [d for d in node.deps if d in self.stale]
        if node.group is not None and node.group in self.stale and node.group in self.rows:
            changed.append(node.group)
        if changed:
            row = self.rows.get(changed[0])
            verb = _CHANGE.get(row.decision, "changes") if row is not None else "changes"
            return f"upstream {changed[0]!r} {verb}", {}
        why = self.condition_changed(node)
        if why is not None:
            return why, {}
        if ps.status != S.SUCCEEDED:
            if ps.status in (S.PENDING, S.READY):
                return "never ran in the parent", {}
            detail = f": {ps.error_kind}" if ps.error_kind else ""
            if ps.status == S.SKIPPED and ps.reason:
                detail = f" ({ps.reason})"
            return f"{ps.status} in the parent{detail}", {}
        if node.children:
            kids = [c for c in node.children if self.rows[c].decision != ForkDecision.REUSE]
            if kids:
                return f"its sub-chain has steps to run ({', '.join(kids)})", {}
            if args is None or not same(args, ps.args or {}):
                return "args changed", {}
            return None, {"reason": "succeeded; nothing in its sub-chain changed",
                          "source_run": self.run_id}
        return self._same_call(node, ps, args)

    def _same_call(self, node: Node, ps: StepState, args: dict[str, Any] | None
                   ) -> tuple[str | None, dict[str, Any]]:
        assert node.tool is not None
        if ps.reused:  # the parent reused it in turn: point at where it really ran
            source = {"source_run": ps.reused.get("source_run"),
                      "source_attempt": ps.reused.get("source_attempt"),
                      "code": ps.reused.get("code"), "origin": ps.reused.get("origin")}
            tool_name = ps.reused.get("tool") or node.step.tool
            if source["origin"] == "override":  # a person's output stands while args do
                if args is None or (ps.args is not None and not same(args, ps.args)):
                    return "args changed since its output was given", {}
                source["reason"] = f"output given in run {source['source_run']}"
                return None, source
        else:
            rec = self.last_call.get(node.id)
            source = {"source_run": self.run_id, "source_attempt": rec.attempt if rec else None,
                      "code": rec.code if rec else None, "origin": "call"}
            tool_name = (rec.tool if rec else None) or node.step.tool
        if ps.reused and source["origin"] == "call":
            why = self._effect_gone(node.id, str(source["source_run"]))
            if why is not None:
                return why, {}
        if tool_name != node.step.tool:
            return f"tool changed ({tool_name} -> {node.step.tool})", {}
        code = source["code"]
        if code != node.tool.fingerprint:
            return f"tool code changed ({code or 'unknown'} -> {node.tool.fingerprint})", {}
        if args is None:
            return "args not known before upstream steps run", {}
        if not same(args, ps.args or {}):
            return f"args changed ({args_diff(ps.args or {}, args)})", {}
        source["reason"] = "succeeded; same tool, code and args"
        return None, source

    def condition_changed(self, node: Node) -> str | None:
        """Why a step the parent ran would not run the same way now because of its ``when``
        (a fresh run with the fork's inputs would skip it, or that is not known yet)."""
        if node.when is None:
            return None
        try:
            go = evaluate(node.when, self._resolver(node))
        except _Unknown as exc:
            return f"its condition depends on {exc.step_id!r}, not known before it runs"
        except (LookupError, TypeError) as exc:
            return f"its condition cannot be evaluated now ({exc})"
        return None if go else f"its condition {node.step.when!r} is false now"

    def _effect_gone(self, step_id: str, source_run: str) -> str | None:
        """Why the effect a parent reused from ``source_run`` no longer stands there."""
        if self.origin is None or source_run == self.run_id:
            return None
        there = self.origin(source_run)
        if there is None:
            return f"its effect's run {source_run} is not in the store"
        st = there.steps.get(step_id)
        if st is None or st.status != S.SUCCEEDED:
            status = st.status if st is not None else "missing"
            return f"its effect was made in run {source_run}, where it is {status} now"
        return None

    def _rerun_children(self, group: Node) -> None:
        """A sub-chain that runs again runs all its steps (none is reused inside it)."""
        for child_id in group.children:
            row = self.rows[child_id]
            if row.decision != ForkDecision.REUSE:
                continue
            child = self.nodes[child_id]
            why = f"its sub-chain {group.id!r} runs again"
            if confirms_in_fork(child.tool):
                new, why = ForkDecision.CONFIRM, f"{why}; side-effecting: needs approval"
            else:
                new = ForkDecision.RERUN
            self.rows[child_id] = ForkRow(
                step_id=row.step_id, tool=row.tool, decision=new, reason=why,
                parent_status=row.parent_status, args=row.args, parent_args=row.parent_args,
                parent_output=row.parent_output, parent_error=row.parent_error,
                parent_source=row.parent_source)
            self.known.pop(child_id, None)
            self.stale.add(child_id)
            if child.children:
                self._rerun_children(child)

    # -------------------------------------------------------------- args and outputs
    def resolve_args(self, node: Node) -> dict[str, Any] | None:
        if node.static_args is not None:
            return dict(node.static_args)
        try:
            return node.render_args(self._resolver(node))  # type: ignore[no-any-return]
        except (_Unknown, LookupError, TypeError):
            return None

    def _resolver(self, node: Node) -> Any:
        ns = node.ns
        index = node.index
        name = node.step.item_name

        def resolve(ref: Ref) -> Any:
            root = ref.root
            if index is not None and root == "memory" and ref.target in (name, INDEX_NAME) \
                    and not ref.source.startswith("memory."):  # an instance's item, index
                item = node.item if ref.target == name else index
                return walk_path(item, ref.path, ref.source) if ref.path else item
            if root == "context":
                if ns.group is None:
                    value: Any = self.context
                else:
                    value = self.args.get(ns.group)
                    if value is None:
                        raise _Unknown(ns.group)
            else:
                if root == "steps":
                    target = ns.prefix + (ref.target or "")
                elif root == "memory":
                    target = ns.save_as[ref.target or ""]
                else:
                    raise LookupError(ref.source)
                if target not in self.known:
                    raise _Unknown(target)
                value = self.known[target]
            return walk_path(value, ref.path, ref.source) if ref.path else value

        return resolve

    def _check_args(self, node: Node, args: dict[str, Any]) -> None:
        assert node.tool is not None
        try:
            node.tool.validate_args(args)
        except ValidationError as exc:
            from chainlab.runtime.engine.attempt.call.seam import invalid_input

            raise PlanError(Problem(
                "invalid_args", f"edited args do not fit tool {node.tool.name!r}: "
                f"{invalid_input(exc, node.tool.name).message}",
                step_id=node.id, field="args")) from None

    def checked_output(self, node: Node, value: Any) -> Any:
        assert node.tool is not None
        try:
            return node.tool.check_output(to_json_value(value, join_path("outputs", node.id)))
        except (ValidationError, NotJSONError, ValueError, TypeError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, ValidationError):
                text = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'output'}: {e['msg']}"
                                 for e in exc.errors())
            raise DecisionError(
                f"output given for step {node.id!r} does not fit tool {node.tool.name!r}: "
                f"{text}", step_id=node.id, field="outputs") from None


_CHANGE = {
    ForkDecision.RERUN: "runs again",
    ForkDecision.CONFIRM: "runs again",
    ForkDecision.OVERRIDE: "is overridden",
}


def _topo(ids: list[str], nodes: Mapping[str, Node]) -> list[str]:
    """``ids`` in dependency order, ties by declaration order (a validated level)."""
    level = set(ids)
    pending = list(ids)
    done: set[str] = set()
    out: list[str] = []
    while pending:
        for i, step_id in enumerate(pending):
            if all(d in done or d not in level for d in nodes[step_id].deps):
                out.append(pending.pop(i))
                done.add(step_id)
                break
        else:  # pragma: no cover - the chain validated, so it has no cycle
            raise AssertionError(f"cycle among {pending}")
    return out


