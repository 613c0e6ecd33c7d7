"""Forks: a NEW run from a suspended or terminal one, reusing what need not run again
(DESIGN §11).

:func:`plan_fork` decides, before anything runs and without writing anything, one
:class:`ForkRow` per step:

=========  ==================================================================================
reuse      it succeeded in the parent with the same tool, the same tool code, the same
           resolved args, and no changed ancestor: its output is copied (``step_reused``,
           naming the source run and attempt); the tool is NOT called
override   its output was given in ``outputs`` (validated against the output schema)
rerun      effect-free (or idempotent with a reconcile) and its inputs changed, it never
           completed, or it is named in ``rerun``: it runs normally
confirm    side-effecting and it must run again: it runs only after a person approves it
           in the fork; the card shows what the parent already did
=========  ==================================================================================

:func:`fork_seed` gives the new run as data and the runtime writes it: ``run_started``,
``run_forked``, one ``step_reused`` per reused or overridden step; it then hands the rest to
the scheduler through the same path as recovery (a reused step is a done step; its
dependants are released).
The parent is only read: no event, no epoch change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chainlab.errors import (
    DecisionError,
    PlanError,
    Problem,
    RunStateError,
    UnknownStepError,
)
from chainlab.events import (
    RUN_TERMINAL,
    Event,
    EventKind,
    RunState,
    RunStatus,
    StepState,
    StepStatus,
)
from chainlab.plan.refs import Ref, evaluate, walk_path
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, Node, compile_chain
from chainlab.store.base import RunRecord
from chainlab.tools import NotJSONError, to_json_value

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["ForkDecision", "ForkPlan", "ForkRow", "ForkSeed", "fork_seed", "plan_fork"]

S = StepStatus
K = EventKind


class ForkDecision(StrEnum):
    REUSE = "reuse"  # recorded output copied; the tool is not called
    OVERRIDE = "override"  # output given by a person
    RERUN = "rerun"  # runs normally (effect-free, or safe to repeat)
    CONFIRM = "confirm"  # side-effecting: runs only after a person approves it in the fork


@dataclass(frozen=True, slots=True)
class ForkRow:
    """One step's fate in a fork. ``args`` are the fork's resolved args when known before
    anything runs (None when an upstream step must run first)."""

    step_id: str
    tool: str
    decision: ForkDecision
    reason: str
    parent_status: str | None
    args: dict[str, Any] | None = None
    output: Any = None  # reuse: the copied output; override: the given one
    source_run: str | None = None  # reuse: the run whose attempt produced the output
    source_attempt: int | None = None
    code: str | None = None  # reuse: fingerprint of the code that produced it
    origin: str | None = None  # reuse: "call" (a tool made it) or "override" (a person)
    parent_args: dict[str, Any] | None = None
    parent_output: Any = None
    parent_error: str | None = None
    parent_source: str | None = None  # the run where the parent's output was really made

    def card(self, parent_run: str) -> str:
        """What an approver reads: what the parent already did with this step."""
        args = _short(self.parent_args)
        if self.parent_source and self.parent_source != parent_run:
            parent_run = f"{self.parent_source} (reused by run {parent_run})"
        status = self.parent_status
        if status is None or status in (S.PENDING, S.READY):
            return f"never ran in run {parent_run}"
        if status in (S.SUCCEEDED, S.COMPENSATED, S.COMPENSATING, S.COMPENSATION_FAILED):
            undone = "" if status == S.SUCCEEDED else f" (then {status})"
            return (f"ran in run {parent_run} with args {args}, output "
                    f"{_short(self.parent_output)}{undone}")
        if status == S.SKIPPED:
            return f"skipped in run {parent_run}"
        error = f", error {self.parent_error}" if self.parent_error else ""
        return f"{status} in run {parent_run} with args {args}{error}"


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """What a fork of ``parent_run_id`` (as of event ``parent_seq``) would do, step by step."""

    parent_run_id: str
    parent_seq: int
    chain: Chain
    context: dict[str, Any]
    options: RunOptions
    chains: dict[str, dict[str, Any]]
    rows: list[ForkRow] = field(default_factory=list)

    def row(self, step_id: str) -> ForkRow:
        for row in self.rows:
            if row.step_id == step_id:
                return row
        raise UnknownStepError(step_id, [r.step_id for r in self.rows])

    @property
    def decisions(self) -> dict[str, str]:
        """``{step_id: decision}`` in plan order."""
        return {row.step_id: str(row.decision) for row in self.rows}

    def table(self) -> list[dict[str, Any]]:
        """Rows as plain dicts (step, tool, parent status, decision, reason); as a pandas
        DataFrame: ``chainlab.timeline.fork_plan_frame(plan)``."""
        return [
            {"step": r.step_id, "tool": r.tool, "parent": r.parent_status or "-",
             "decision": str(r.decision), "reason": r.reason}
            for r in self.rows
        ]

    def __str__(self) -> str:
        cols = ["step", "tool", "parent", "decision", "reason"]
        rows = [[str(r[c]) for c in cols] for r in self.table()]
        width = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width, strict=True)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, width, strict=True)).rstrip()
                  for r in rows]
        return "\n".join(lines)


# ============================================================================ planning
class _Unknown(Exception):
    """A reference to a step whose fork output is not known before the fork runs."""

    def __init__(self, step_id: str):
        super().__init__(step_id)
        self.step_id = step_id


def plan_fork(
    record: RunRecord,
    events: list[Event],
    toolbox: Toolbox,
    chains: Mapping[str, Chain],
    *,
    args: Mapping[str, Mapping[str, Any]] | None = None,
    outputs: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    chain: Chain | None = None,
    rerun: Iterable[str] | str | None = None,
    origin: Callable[[str], RunState | None] | None = None,
) -> ForkPlan:
    """Decide every step of a fork of the stored run ``record`` (whose log is ``events``).
    Writes nothing; reads only through ``origin(run_id)``, the current state of a run an
    output was reused from (reuse follows an effect to the run that made it: an effect that
    was compensated, cancelled or is in doubt there is not reused).

    ``args``: ``{step_id: {arg: value}}`` merged over the step's args (top-level steps);
    ``outputs``: ``{step_id: output}`` to record instead of running; ``context``: merged
    over the parent's; ``chain``: the chain to run instead of the parent's (same step ids
    are compared); ``rerun``: step ids to run again even if they could be reused.

    Raises RunStateError (the parent is still running), UnknownStepError (an id that is not
    a step), PlanError (edited args, context or chain that do not validate), DecisionError
    (an output that does not fit the tool's output schema).
    """
    run_id = record.run_id
    pstate = RunState.from_events(run_id, events)
    _check_parent(pstate)
    base = chain if chain is not None else Chain.from_dict(record.chain)
    all_chains = dict(chains)
    all_chains.update({n: Chain.from_dict(c) for n, c in record.chains.items()})
    new_chain = _edit_args(base, args or {}, run_id)
    ctx = _json_data(dict(record.context) | dict(context or {}), "context")
    options = chain.options if chain is not None else RunOptions.model_validate(record.options)
    raise_for_problems(new_chain, toolbox, context=ctx, chains=all_chains)
    graph = compile_chain(new_chain, toolbox, all_chains, options)
    rerun_ids = [rerun] if isinstance(rerun, str) else list(rerun or ())
    given = dict(outputs or {})
    for step_id in [*rerun_ids, *given]:
        if step_id not in graph.nodes:
            raise UnknownStepError(step_id, graph.nodes, run_id=run_id)
    planner = _Planner(run_id, pstate, graph, ctx, set(rerun_ids), given, set(args or ()),
                       origin)
    planner.level(graph.top)
    rows = [planner.rows[step_id] for step_id in graph.nodes]
    return ForkPlan(
        parent_run_id=run_id,
        parent_seq=pstate.last_seq,
        chain=new_chain,
        context=ctx,
        options=options,
        chains={n: c.to_dict() for n, c in _used_chains(new_chain, all_chains).items()},
        rows=rows,
    )


def _used_chains(chain: Chain, chains: Mapping[str, Chain]) -> dict[str, Chain]:
    """The sub-chains ``chain`` uses, recursively (kept with the fork's record)."""
    seen: dict[str, Chain] = {}
    todo = [chain]
    while todo:
        for step in todo.pop().steps:
            name = step.subchain_name
            if name and name not in seen and name in chains:
                seen[name] = chains[name]
                todo.append(chains[name])
    return seen


def _check_parent(state: RunState) -> None:
    if state.status in RUN_TERMINAL or state.status == RunStatus.SUSPENDED:
        return
    raise RunStateError(
        f"cannot fork run {state.run_id!r}: it is {state.status or 'not started'}; a fork "
        "starts from a suspended or finished run: wait for it (`await run.wait()`) or "
        "cancel it (`await run.cancel()`) first",
        run_id=state.run_id,
        status=str(state.status),
    )


def _edit_args(chain: Chain, edits: Mapping[str, Mapping[str, Any]], run_id: str) -> Chain:
    if not edits:
        return chain
    ids = [s.id for s in chain.steps]
    data = chain.to_dict()
    for step_id, edit in edits.items():
        if step_id not in ids:
            raise UnknownStepError(step_id, ids, run_id=run_id)
        if not isinstance(edit, Mapping):
            raise PlanError(Problem(
                "invalid_args",
                f"args for step {step_id!r} must be a mapping of arg names to values, got "
                f"{type(edit).__name__}",
                step_id=step_id, field="args"), chain_name=chain.name)
        step = data["steps"][ids.index(step_id)]
        step["args"] = {**step.get("args", {}), **_json_data(dict(edit), f"args of {step_id}")}
    return Chain.from_dict(data)


def _json_data(value: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        return to_json_value(value)  # type: ignore[no-any-return]
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", f"{what} must be JSON data: {exc}",
                                field=what.split()[0])) from None


class _Planner:
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
        self.rows: dict[str, ForkRow] = {}
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
        ps = self.pstate.steps.get(node.id)
        args = self.resolve_args(node)
        self.args[node.id] = args
        if node.is_group:
            self.level(node.children)
        row = self._row(node, ps, args)
        self.rows[node.id] = row
        if row.decision in (ForkDecision.REUSE, ForkDecision.OVERRIDE):
            self.known[node.id] = row.output
        if row.decision != ForkDecision.REUSE and not (
            row.decision == ForkDecision.OVERRIDE and ps is not None
            and ps.status == S.SUCCEEDED and _same(row.output, ps.output)
        ):
            self.stale.add(node.id)
        if node.is_group and row.decision != ForkDecision.REUSE:
            self._rerun_children(node)

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
            if tool is None:
                raise DecisionError(
                    f"step {node.id!r} is a sub-chain step: give the outputs of its steps "
                    f"({', '.join(node.children)}) instead", step_id=node.id, field="outputs")
            return ForkRow(**base, decision=ForkDecision.OVERRIDE, reason="output given",
                           output=self._check_output(node, self.outputs[node.id]))
        if node.id in self.edited and args is not None and tool is not None:
            self._check_args(node, args)
        why, source = self._why_not_reuse(node, ps, args)
        if why is None and node.id in self.rerun:
            why = "named in rerun"
        if why is None:
            assert ps is not None
            return ForkRow(**base, decision=ForkDecision.REUSE, reason=source.pop("reason"),
                           output=ps.output, **source)
        if tool is None or not tool.side_effects or (tool.idempotent and tool.reconcile):
            return ForkRow(**base, decision=ForkDecision.RERUN, reason=why)
        return ForkRow(**base, decision=ForkDecision.CONFIRM,
                       reason=f"{why}; side-effecting: needs approval")

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
        why = self._condition_changed(node)
        if why is not None:
            return why, {}
        if ps.status != S.SUCCEEDED:
            if ps.status in (S.PENDING, S.READY):
                return "never ran in the parent", {}
            detail = f": {ps.error_kind}" if ps.error_kind else ""
            if ps.status == S.SKIPPED and ps.reason:
                detail = f" ({ps.reason})"
            return f"{ps.status} in the parent{detail}", {}
        if node.is_group:
            kids = [c for c in node.children if self.rows[c].decision != ForkDecision.REUSE]
            if kids:
                return f"its sub-chain has steps to run ({', '.join(kids)})", {}
            if args is None or not _same(args, ps.args or {}):
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
                if args is None or (ps.args is not None and not _same(args, ps.args)):
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
        if not _same(args, ps.args or {}):
            return f"args changed ({_args_diff(ps.args or {}, args)})", {}
        source["reason"] = "succeeded; same tool, code and args"
        return None, source

    def _condition_changed(self, node: Node) -> str | None:
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
            tool = child.tool
            why = f"its sub-chain {group.id!r} runs again"
            if tool is None or not tool.side_effects or (tool.idempotent and tool.reconcile):
                new = ForkDecision.RERUN
            else:
                new, why = ForkDecision.CONFIRM, f"{why}; side-effecting: needs approval"
            self.rows[child_id] = ForkRow(
                step_id=row.step_id, tool=row.tool, decision=new, reason=why,
                parent_status=row.parent_status, args=row.args, parent_args=row.parent_args,
                parent_output=row.parent_output, parent_error=row.parent_error,
                parent_source=row.parent_source)
            self.known.pop(child_id, None)
            self.stale.add(child_id)
            if child.is_group:
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

        def resolve(ref: Ref) -> Any:
            root = ref.root
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
            from chainlab.runtime.engine.attempt import invalid_input

            raise PlanError(Problem(
                "invalid_args", f"edited args do not fit tool {node.tool.name!r}: "
                f"{invalid_input(exc, node.tool.name).message}",
                step_id=node.id, field="args")) from None

    def _check_output(self, node: Node, value: Any) -> Any:
        assert node.tool is not None
        try:
            return node.tool.check_output(value)
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


def _same(a: Any, b: Any) -> bool:
    return _canonical(a) == _canonical(b)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _args_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if not _same(old.get(k), new.get(k)))
    return ", ".join(f"{k}: {_short(old.get(k), 24)} -> {_short(new.get(k), 24)}" for k in keys)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ============================================================================ seeding
@dataclass(frozen=True, slots=True)
class ForkSeed:
    """What a fork writes before it runs, as data (the runtime writes it: this module never
    starts a run). ``record`` is the new run's; ``lineage`` goes into its ``run_started``;
    ``events`` (kind, step_id, payload) follow it: ``run_forked`` with the plan's decisions
    and the confirm-first set (durable: a resume, a takeover or a decision from another
    process sees it), then one ``step_reused`` per reused or overridden step."""

    record: RunRecord
    graph: Graph
    lineage: dict[str, Any]
    events: list[tuple[EventKind, str | None, dict[str, Any]]]


def fork_seed(plan: ForkPlan, toolbox: Toolbox, chains: Mapping[str, Chain], *, run_id: str,
              now: float, meta: Mapping[str, Any] | None = None) -> ForkSeed:
    """The new run a fork plan makes: its record, compiled graph and first events.
    Reused and overridden steps are recorded as ``step_reused`` (their tools are not
    called); the runtime then rebuilds the scheduler as after a restart, so their
    dependants are released; ``confirm`` steps wait for a person."""
    chain = plan.chain
    all_chains = dict(chains)
    all_chains.update({n: Chain.from_dict(c) for n, c in plan.chains.items()})
    graph = compile_chain(chain, toolbox, all_chains, plan.options)
    lineage = {"forked_from": plan.parent_run_id, "forked_at_seq": plan.parent_seq}
    record = RunRecord(
        run_id=run_id, chain_name=chain.name, status=RunStatus.RUNNING, epoch=1,
        created_at=now, updated_at=now, chain=chain.to_dict(), chains=dict(plan.chains),
        context=dict(plan.context),
        options=plan.options.model_dump(mode="json", exclude_defaults=True),
        meta={**dict(meta or {}), **lineage},
    )
    confirm_first = {
        row.step_id: {"fork": {
            "parent_run": plan.parent_run_id, "parent_status": row.parent_status,
            "parent_args": row.parent_args, "parent_output": row.parent_output,
            "reason": row.reason, "note": row.card(plan.parent_run_id),
        }}
        for row in plan.rows if row.decision == ForkDecision.CONFIRM
    }
    events: list[tuple[EventKind, str | None, dict[str, Any]]] = [
        (K.RUN_FORKED, None, {**lineage, "decisions": plan.decisions,
                              "confirm_first": confirm_first}),
    ]
    for row in _reuse_order(plan, graph):
        override = row.decision == ForkDecision.OVERRIDE
        events.append((K.STEP_REUSED, row.step_id, {
            "decision": str(row.decision), "output": row.output, "args": row.args,
            "source_run": run_id if override else row.source_run,
            "source_attempt": row.source_attempt,
            "code": row.code, "tool": row.tool,
            "origin": "override" if override else row.origin,
            "reason": "output given (override)" if override
            else f"reused from run {row.source_run}",
        }))
    return ForkSeed(record, graph, lineage, events)


def _reuse_order(plan: ForkPlan, graph: Graph) -> list[ForkRow]:
    """Reused/overridden rows, a sub-chain's steps before the sub-chain step itself."""
    copied = [r for r in plan.rows if r.decision in (ForkDecision.REUSE, ForkDecision.OVERRIDE)]
    groups = [r for r in copied if graph.nodes[r.step_id].is_group]
    return [r for r in copied if not graph.nodes[r.step_id].is_group] + groups[::-1]
