"""``Experiments``: many recorded runs replayed under a change (DESIGN §22), a part the
:class:`~chainlab.runtime.Runtime` holds (it holds a :class:`~chainlab.runtime.host.Host`
and nothing else), and :class:`Experiment`, the result.

An experiment is checked whole before anything starts (:meth:`Experiments.plan`: every run
exists and is finished or suspended, one chain or a ``chain=``, agents the chains use,
callable scorers, a change that validates), stored (``experiments`` in the store), then each
recorded run is replayed as a NEW run -- a fork (:meth:`~chainlab.runtime.starts.Starts.fork`)
carrying the recording that answers its side effects and model turns
(:mod:`chainlab.runtime.engine.experiment` decides each call) and marked as the experiment's
in its meta, so ordinary run lists leave it out -- concurrently up to ``concurrency``, each a
run with its own log. A change of tools or agents drives the replays on a runtime over an
overlay of the toolbox with them (the same store, clock and run ids).

The result is data read back from the store (:meth:`Experiments.result`): one row per
recorded run compared with its replay, and the scorers' values stored when they ran, so it
can be read later and from another process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import ExperimentError, RunNotFoundError, StoreError
from chainlab.events import RUN_TERMINAL, RunStatus, read_run
from chainlab.plan.schema import Chain
from chainlab.runtime.history.experiment import Experiment
from chainlab.runtime.history.experiment_plan import (
    ExperimentPlan,
    RunPlan,
    changed_toolbox,
    check_concurrency,
    check_runs,
    describe,
    recording,
    replay_rows,
    run_id_of,
    stored_change,
)
from chainlab.runtime.history.experiment_rows import Side, compare, diff_text, output_of
from chainlab.runtime.history.fork import fork_inputs, plan_fork
from chainlab.runtime.host import Host
from chainlab.runtime.preparing import toolbox_of
from chainlab.runtime.run import RunResult
from chainlab.store.experiments import EXPERIMENT_META, ExperimentRecord, Experiments

if TYPE_CHECKING:
    from chainlab.store.base import RunRecord, Store
    from chainlab.tools import Toolbox

__all__ = ["Experiment", "ExperimentRunner", "Scorer", "Setup"]

#: a scorer: ``fn(original, new) -> number | bool``, each a RunResult
Scorer = Callable[[RunResult, RunResult], Any]


@dataclass(frozen=True, slots=True)
class Setup:
    """An experiment checked before anything starts: the recorded runs and the change (the
    toolbox with its changed tools and agents)."""

    run_ids: list[str]
    toolbox: Toolbox
    chain: Chain | None
    context: Callable[[dict[str, Any]], Mapping[str, Any]] | Mapping[str, Any] | None
    live: tuple[str, ...]
    recorded: bool

    def context_of(self, record: RunRecord) -> Mapping[str, Any] | None:
        """The context merged over ``record``'s (a function of it, or a mapping)."""
        if callable(self.context):
            return self.context(dict(record.context))
        return self.context


class ExperimentRunner:
    """Plans, runs and reads experiments on ``host`` (the Runtime's ``experiment*`` methods
    delegate here; their docstrings are the Runtime's)."""

    def __init__(self, host: Host):
        self.host = host

    # ------------------------------------------------------------------ planning
    async def plan(self, runs: Iterable[Any], **change: Any) -> ExperimentPlan:
        """See :meth:`chainlab.runtime.Runtime.experiment_plan`."""
        return await self.host.run_io(lambda: self.plan_sync(runs, **change))

    def plan_sync(self, runs: Iterable[Any], **change: Any) -> ExperimentPlan:
        """The plan, checked whole (see :meth:`chainlab.runtime.Runtime.experiment_plan`)."""
        setup = self.setup(runs, **change)
        return ExperimentPlan([self.plan_one(setup, r) for r in setup.run_ids], setup.live,
                              setup.recorded)

    def setup(self, runs: Iterable[Any], *, chain: Chain | None = None,
              agents: Mapping[str, Any] | None = None, tools: Iterable[Any] | None = None,
              context: Callable[[dict[str, Any]], Mapping[str, Any]] | Mapping[str, Any]
              | None = None, live: Iterable[str] = (), recorded: bool = False,
              scorers: Mapping[str, Scorer] | None = None) -> Setup:
        """Everything checked before anything starts, reading no run's log: the runs (they
        exist, they are finished or suspended, of one chain or ``chain`` given), the agents
        and live tools named, the scorers, and the change against each run (its chain and
        context validate: the plan's PlanError). Raises ExperimentError, PlanError."""
        store = self.host.store
        live = tuple(live)
        records = check_runs(store, [run_id_of(r) for r in runs], chain, agents, self.host.toolbox,
                         live, scorers)
        toolbox = changed_toolbox(self.host.toolbox, tools, agents)
        setup = Setup([r.run_id for r in records], toolbox, chain, context, live, recorded)
        for record in records:  # (the records are let go: each is read again when planned)
            fork_inputs(record, toolbox_of(toolbox, record.meta, record.run_id),
                        self.host.chains, chain=chain, context=setup.context_of(record))
        return setup

    def plan_one(self, setup: Setup, run_id: str) -> RunPlan:
        """The replay of one recorded run: its fork plan (effect-free steps live unless
        ``recorded``), the replay's decision per step and the recording that answers it."""
        store = self.host.store
        record, events, state = read_run(store, run_id)
        box = toolbox_of(setup.toolbox, record.meta, record.run_id)
        fork = plan_fork(record, events, box, self.host.chains, chain=setup.chain,
                         context=setup.context_of(record), origin=_origin(store),
                         live_effect_free=not setup.recorded)
        spec = {**recording(record.run_id, state, events), "source_run": record.run_id,
                "live": list(setup.live)}
        return RunPlan(record.run_id, fork, replay_rows(fork, box, spec, setup.recorded), spec)

    # ------------------------------------------------------------------ running
    async def run(self, runs: Iterable[Any], *, scorers: Mapping[str, Scorer] | None = None,
                  concurrency: int = 4, name: str | None = None,
                  meta: Mapping[str, Any] | None = None, **change: Any) -> Experiment:
        """See :meth:`chainlab.runtime.Runtime.experiment`."""
        check_concurrency(concurrency)
        host = self.host
        store = _experiments_of(host.store)
        runs = list(runs)
        setup = await host.run_io(lambda: self.setup(runs, scorers=scorers, **change))
        experiment_id = "exp-" + host.id_factory()
        data: dict[str, Any] = {
            "runs": list(setup.run_ids), "change": describe(change),
            "live": list(setup.live), "recorded": setup.recorded,
            "scorers": sorted(scorers or {}), "concurrency": concurrency, "status": "running",
            "scores": {}, "meta": dict(meta or {})}
        record = ExperimentRecord(experiment_id, name or experiment_id, host.clock.now(),
                                  data)
        await host.run_io(store.save_experiment, record)
        return await self._drive(record, setup, setup.run_ids, [], concurrency, scorers,
                                 change)

    async def resume(self, experiment_id: str, *, scorers: Mapping[str, Scorer] | None = None,
                     concurrency: int | None = None, force: bool = False,
                     **change: Any) -> Experiment:
        """See :meth:`chainlab.runtime.Runtime.resume_experiment`."""
        host = self.host
        store = _experiments_of(host.store)
        record = await host.run_io(store.get_experiment, experiment_id)
        data = record.data
        stored = data.get("change") or {}
        change = {**stored_change(stored), **change}
        missing = [k for k in ("agents", "tools") if k in stored and change.get(k) is None]
        if stored.get("context") == "function" and not callable(change.get("context")):
            missing.append("context")
        if missing:
            raise ExperimentError([f"experiment {experiment_id!r} changed {k}: give {k}=... "
                                   "again to resume it (Python objects are not stored)"
                                   for k in missing])
        concurrency = concurrency or int(data.get("concurrency") or 4)
        check_concurrency(concurrency)
        replays = await host.run_io(self._replays, experiment_id)
        todo = [r for r in data.get("runs", []) if r not in replays]
        setup = await host.run_io(lambda: self.setup(
            todo, live=data.get("live") or (), recorded=bool(data.get("recorded")),
            **change)) if todo else None
        unfinished = []
        for new_id in replays.values():
            state = (await host.run_io(read_run, host.store, new_id))[2]
            if state.status not in RUN_TERMINAL and state.status != RunStatus.SUSPENDED:
                unfinished.append(new_id)
        return await self._drive(record, setup, setup.run_ids if setup else [], unfinished,
                                 concurrency, scorers, change, force=force, replays=replays)

    async def _drive(self, record: ExperimentRecord, setup: Setup | None,
                     todo: Sequence[str], unfinished: Sequence[str], concurrency: int,
                     scorers: Mapping[str, Scorer] | None, change: Mapping[str, Any], *,
                     force: bool = False, replays: Mapping[str, str] | None = None
                     ) -> Experiment:
        """Replay ``todo`` (each planned as its turn comes: memory stays flat in the number
        of runs) and resume the ``unfinished`` replays, up to ``concurrency`` at once, on
        this runtime or on one over the changed toolbox; then score and store."""
        host = self.host
        store = _experiments_of(host.store)
        experiment_id = record.experiment_id
        made = dict(replays or {})  # recorded run -> its replay (ids only)

        def plan_of(run_id: str) -> RunPlan:
            assert setup is not None
            return self.plan_one(setup, run_id)

        if change.get("tools") is not None or change.get("agents") is not None:
            # the replays are driven over the changed toolbox: a Host of their own beside
            # this one (the same owner, store, executor, clock, chains and run ids)
            toolbox = changed_toolbox(host.toolbox, change.get("tools"), change.get("agents"))
            sub = Host(host.owner, toolbox, host.store, executor=host.executor,
                       clock=host.clock, chains=dict(host.chains), id_factory=host.id_factory)
            await sub.enter()
            try:
                await _replay_all(sub, record, todo, plan_of, unfinished, concurrency,
                                  force, made)
            finally:
                await sub.exit(None, None, None)
        else:
            await _replay_all(host, record, todo, plan_of, unfinished, concurrency, force,
                              made)
        names = sorted({*record.data.get("scorers", []), *(scorers or {})})
        rows, scores = await host.run_io(
            lambda: self.rows(record, names, scorers or {}, made))
        data = {**record.data, "status": "finished", "scorers": names,
                "scores": {**(record.data.get("scores") or {}), **scores}}
        done = ExperimentRecord(experiment_id, record.name, record.created_at, data)
        await host.run_io(store.save_experiment, done)
        for row in rows:
            for scorer in names:
                row[f"score:{scorer}"] = (data["scores"].get(row["run"]) or {}).get(scorer)
        return Experiment(done, rows, self._differ(experiment_id))

    def _replays(self, experiment_id: str) -> dict[str, str]:
        """``{recorded run: its replay}`` of the experiment, from the store."""
        out = {}
        for new in self.host.store.list_runs(experiment=experiment_id):
            source = new.meta.get("forked_from")
            if source is not None:
                out[str(source)] = new.run_id
        return out

    # ------------------------------------------------------------------ reading
    def result_sync(self, experiment_id: str) -> Experiment:
        """See :meth:`chainlab.runtime.Runtime.experiment_result`."""
        record = _experiments_of(self.host.store).get_experiment(experiment_id)
        names = list(record.data.get("scorers", []))
        rows, _ = self.rows(record, names, {})
        scores = record.data.get("scores") or {}
        for row in rows:
            for scorer in names:
                row[f"score:{scorer}"] = (scores.get(row["run"]) or {}).get(scorer)
        return Experiment(record, rows, self._differ(experiment_id))

    def rows(self, record: ExperimentRecord, names: Sequence[str],
             scorers: Mapping[str, Scorer], replays: Mapping[str, str] | None = None
             ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """One row per recorded run, compared with its replay as stored now, and the
        ``scorers``' values of the runs replayed (each pair of runs read once, then let go).
        ``replays``: recorded run -> replay when known (else read from the store)."""
        store = self.host.store
        if replays is None:
            replays = self._replays(record.experiment_id)
        toolbox = self.host.toolbox
        rows, scores = [], {}
        for run_id in record.data.get("runs", []):
            before = _side(store, run_id)
            after = _side(store, replays[run_id]) if run_id in replays else None
            rows.append(compare(before, after,
                                lambda t: t in toolbox and toolbox.get(t).side_effects))
            if after is not None and scorers:
                scores[run_id] = score(before, after, scorers)
        return rows, scores

    def _differ(self, experiment_id: str) -> Callable[[str], str]:
        """The diff of a recorded run and its replay, read from the store when asked."""
        def diff(run_id: str) -> str:
            replay = self._replays(experiment_id).get(run_id)
            return diff_text(_side(self.host.store, run_id),
                             _side(self.host.store, replay) if replay else None)

        return diff

    def list_sync(self) -> list[ExperimentRecord]:
        """See :meth:`chainlab.runtime.Runtime.experiments`."""
        return _experiments_of(self.host.store).list_experiments()

    def delete_sync(self, experiment_id: str) -> list[str]:
        """See :meth:`chainlab.runtime.Runtime.delete_experiment`."""
        return _experiments_of(self.host.store).delete_experiment(experiment_id)


# ---------------------------------------------------------------------- the change
def result_of(side: Side) -> RunResult:
    """A run as a scorer sees it (what ``await run.wait()`` returns)."""
    st = side.state
    return RunResult(
        run_id=side.record.run_id, status=st.status or RunStatus.RUNNING, outputs=st.outputs,
        steps={k: str(v.status) for k, v in st.steps.items()},
        errors={k: str(v.error) for k, v in st.steps.items() if v.error},
        output=output_of(side))


def score(before: Side, after: Side, scorers: Mapping[str, Scorer]) -> dict[str, Any]:
    """Each scorer's value for one recorded run and its replay (``error: ...`` when it
    raised: a scorer's bug shows in its cell and never stops the rest)."""
    original, new = result_of(before), result_of(after)
    values: dict[str, Any] = {}
    for name, fn in scorers.items():
        try:
            value = fn(original, new)
        except Exception as exc:
            values[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        values[name] = value if value is None or isinstance(value, bool | int | float | str) \
            else str(value)
    return values


# ---------------------------------------------------------------------- checks
def _experiments_of(store: Store) -> Experiments:
    if not isinstance(store, Experiments):
        raise StoreError(f"{store!r} keeps no experiments: use a MemoryStore, a SQLite file "
                         "or a PostgreSQL database")
    return store


def _origin(store: Store) -> Callable[[str], Any]:
    def state_of(run_id: str) -> Any:
        try:
            return read_run(store, run_id)[2]
        except RunNotFoundError:
            return None

    return state_of


def _side(store: Any, run_id: str) -> Side:
    record, _, state = read_run(store, run_id)
    return Side(record, state)


async def _replay_all(host: Host, record: ExperimentRecord, todo: Sequence[str],
                      plan_of: Callable[[str], RunPlan], unfinished: Sequence[str],
                      concurrency: int, force: bool, made: dict[str, str]) -> None:
    """Replay each run of ``todo`` (planned when its turn comes, then a fork carrying its
    recording) and resume each unfinished replay, up to ``concurrency`` at once; each
    returns when its replay is finished or waits for a person. ``made`` gets each new
    replay's id."""
    from chainlab.runtime.starts import Starts
    from chainlab.runtime.takeovers import Takeovers

    starts = Starts(host)
    # each replay's meta: the experiment's (a front end's, e.g. the CLI's toolbox), its id
    meta = {**(record.data.get("meta") or {}), EXPERIMENT_META: record.experiment_id}
    work: list[Callable[[], Any]] = []

    async def resume(run_id: str) -> None:
        run = await Takeovers(host).resume(run_id, force=force)
        await run.wait()

    async def replay(run_id: str) -> None:
        plan = await host.run_io(plan_of, run_id)
        run = await starts.fork(run_id, meta=meta, plan=plan.fork,
                                experiment={**plan.spec, "id": record.experiment_id})
        made[run_id] = run.run_id
        await run.wait()

    work = [*(functools.partial(resume, r) for r in unfinished),
            *(functools.partial(replay, r) for r in todo)]
    queue = iter(work)

    async def worker() -> None:  # (``concurrency`` workers, not one waiting task per run)
        for job in queue:
            await job()

    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, len(work))):
            tg.start_soon(worker)
