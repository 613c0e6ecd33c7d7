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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chainlab._json import join_path
from chainlab.errors import (
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
    StepStatus,
)
from chainlab.plan.schema import Chain, RunOptions
from chainlab.plan.validate import raise_for_problems
from chainlab.runtime.engine.compile import Graph, compile_chain, used_chains
from chainlab.store.base import RunRecord
from chainlab.tools import NotJSONError, to_json_value

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

from chainlab.runtime.history.fork_plan import ForkDecision, ForkPlan, ForkRow
from chainlab.runtime.history.fork_rules import Planner

__all__ = ["ForkDecision", "ForkPlan", "ForkRow", "ForkSeed", "fork_inputs", "fork_seed",
           "plan_fork"]

S = StepStatus
K = EventKind


# ============================================================================ planning
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
    live_effect_free: bool = False,
) -> ForkPlan:
    """Decide every step of a fork of the stored run ``record`` (whose log is ``events``).
    Writes nothing; reads only through ``origin(run_id)``, the current state of a run an
    output was reused from (reuse follows an effect to the run that made it: an effect that
    was compensated, cancelled or is in doubt there is not reused).

    ``args``: ``{step_id: {arg: value}}`` merged over the step's args (top-level steps);
    ``outputs``: ``{step_id: output}`` to record instead of running; ``context``: merged
    over the parent's; ``chain``: the chain to run instead of the parent's (same step ids
    are compared); ``rerun``: step ids to run again even if they could be reused;
    ``live_effect_free``: every effect-free step runs again (an experiment's replay).

    Raises RunStateError (the parent is still running), UnknownStepError (an id that is not
    a step), PlanError (edited args, context or chain that do not validate), DecisionError
    (an output that does not fit the tool's output schema).
    """
    run_id = record.run_id
    pstate = RunState.from_events(run_id, events)
    _check_parent(pstate)
    new_chain, ctx, options, all_chains = fork_inputs(record, toolbox, chains, args=args,
                                                      context=context, chain=chain)
    graph = compile_chain(new_chain, toolbox, all_chains, options)
    rerun_ids = [rerun] if isinstance(rerun, str) else list(rerun or ())
    given = dict(outputs or {})
    for step_id in [*rerun_ids, *given]:
        if step_id not in graph.nodes:
            raise UnknownStepError(step_id, graph.nodes, run_id=run_id)
    planner = Planner(run_id, pstate, graph, ctx, set(rerun_ids), given, set(args or ()),
                       origin)
    planner.live_effect_free = live_effect_free
    planner.level(graph.top)
    rows = []
    for step_id in graph.nodes:  # a for_each step's instances after it, when known
        rows.append(planner.rows[step_id])
        rows += planner.instance_rows.get(step_id, [])
    return ForkPlan(
        parent_run_id=run_id,
        parent_seq=pstate.last_seq,
        chain=new_chain,
        context=ctx,
        options=options,
        chains={n: c.to_dict() for n, c in used_chains(new_chain, all_chains).items()},
        rows=rows,
        instances={k: v for k, v in planner.instances.items() if v},
    )


def fork_inputs(record: RunRecord, toolbox: Toolbox, chains: Mapping[str, Chain], *,
                args: Mapping[str, Mapping[str, Any]] | None = None,
                context: Mapping[str, Any] | None = None, chain: Chain | None = None,
                ) -> tuple[Chain, dict[str, Any], RunOptions, dict[str, Chain]]:
    """What a fork of ``record`` would run, checked (no log read): its chain (``args``
    edited in), context, options and the chains it may use. Raises UnknownStepError,
    PlanError (the change does not validate)."""
    base = chain if chain is not None else Chain.from_dict(record.chain)
    all_chains = dict(chains)
    all_chains.update({n: Chain.from_dict(c) for n, c in record.chains.items()})
    new_chain = _edit_args(base, args or {}, record.run_id)
    ctx = _json_data(dict(record.context) | dict(context or {}), "context")
    options = chain.options if chain is not None else RunOptions.model_validate(record.options)
    raise_for_problems(new_chain, toolbox, context=ctx, chains=all_chains)
    return new_chain, ctx, options, all_chains


def _check_parent(state: RunState) -> None:
    if state.status in RUN_TERMINAL or state.status == RunStatus.SUSPENDED:
        return
    running = [st for st in state.steps.values() if st.status == StepStatus.RUNNING]
    if running and all(st.job is not None and st.job.get("phase") == "waiting"
                       and st.job.get("handle") is not None for st in running):
        return  # it only waits on remote jobs: the fork attaches to them or submits anew
    raise RunStateError(
        f"cannot fork run {state.run_id!r}: it is {state.status or 'not started'}; a fork "
        "starts from a suspended or finished run, or one that only waits on remote jobs: "
        "wait for it (`await run.wait()`) or cancel it (`await run.cancel()`) first",
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
        edited = _json_data(dict(edit), join_path("args", step_id))
        step["args"] = {**step.get("args", {}), **edited}
    return Chain.from_dict(data)


def _json_data(value: dict[str, Any], what: str) -> dict[str, Any]:
    """``value`` through the value gate. Raises PlanError naming where the bad value sits
    (``args.step.rows[3]``)."""
    try:
        return to_json_value(value, what)  # type: ignore[no-any-return]
    except NotJSONError as exc:
        raise PlanError(Problem("invalid_field", f"{what.split('.')[0]} must be JSON data: "
                                f"{exc}", field=exc.path or what)) from None


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
              now: float, meta: Mapping[str, Any] | None = None,
              experiment: Mapping[str, Any] | None = None) -> ForkSeed:
    """The new run a fork plan makes: its record, compiled graph and first events.
    Reused and overridden steps are recorded as ``step_reused`` (their tools are not
    called); the runtime then rebuilds the scheduler as after a restart, so their
    dependants are released; ``confirm`` steps wait for a person. ``experiment``: the run
    is an experiment's replay (DESIGN §22): its side effects are decided by the recording
    given there (:mod:`chainlab.runtime.engine.experiment`), durable in ``run_forked``."""
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
        for row in plan.rows
        if row.decision == ForkDecision.CONFIRM and row.step_id in graph.nodes
    }
    forked: dict[str, Any] = {**lineage, "decisions": plan.decisions,
                              "confirm_first": confirm_first}
    if plan.instances:  # what the parent's instances did: the fork reuses them as it grows
        forked["instances"] = plan.instances
    if experiment is not None:
        forked["experiment"] = dict(experiment)
    events: list[tuple[EventKind, str | None, dict[str, Any]]] = [(K.RUN_FORKED, None, forked)]
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
    for row in plan.rows:  # a job still waiting in the parent: the fork waits on it too
        if row.decision == ForkDecision.ATTACH and row.job is not None:
            events.append((K.JOB_SUBMITTED, row.step_id, {
                **row.job, "how": "attached", "from_run": plan.parent_run_id}))
    return ForkSeed(record, graph, lineage, events)


def _reuse_order(plan: ForkPlan, graph: Graph) -> list[ForkRow]:
    """Reused/overridden rows, a sub-chain's steps before the sub-chain step itself."""
    copied = [r for r in plan.rows if r.decision in (ForkDecision.REUSE, ForkDecision.OVERRIDE)
              and r.step_id in graph.nodes]  # (an instance is reused as its step grows)
    groups = [r for r in copied if graph.nodes[r.step_id].children]
    return [r for r in copied if not graph.nodes[r.step_id].children] + groups[::-1]
