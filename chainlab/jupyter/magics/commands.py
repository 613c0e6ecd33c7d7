"""What the magics do, without the parsing: define, start, resume, control, plan.

Errors a user can fix are raised as SessionError / ArgsError / ChainlabError; the magic
layer turns them into short UsageErrors.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

from chainlab._text import did_you_mean
from chainlab.errors import PlanError
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.jupyter._loop import eager
from chainlab.jupyter.launch import start, widget
from chainlab.jupyter.magics.args import ArgsError
from chainlab.jupyter.session import NotebookSession, SessionError
from chainlab.jupyter.views import ChainView, RunsTable
from chainlab.plan.schema import Chain, RunOptions
from chainlab.runtime.runtime import Run
from chainlab.tools import Toolbox
from chainlab.workspace import parse_step_values

__all__ = [
    "chain_view", "control", "define_chain", "json_or_var", "make_planner", "plan", "resume",
    "rollback", "run_options", "runs_table", "show_timeline", "start", "toolbox_or_none",
    "widget",
]

_NAME_LINE = re.compile(r"^name\s*:", re.MULTILINE)


# ---------------------------------------------------------------------- chains
def define_chain(session: NotebookSession, name: str, body: str,
                 tools: str | None) -> tuple[Chain, ChainView]:
    """Parse the ``%%chain`` body and validate it. A chain that parses is returned (and
    drawn with its problems marked) even when it does not validate; text that does not
    parse raises PlanError (with line numbers)."""
    if not name.isidentifier():
        raise ArgsError(f"%%chain {name}: NAME becomes a variable, so it must be a Python "
                        "identifier (letters, digits, _)")
    existing = session.user_ns.get(name)
    if existing is not None and not isinstance(existing, Chain):
        raise ArgsError(f"%%chain {name}: {name!r} is already a {type(existing).__name__} in the "
                        "notebook; pick another NAME")
    if not body.strip():
        raise ArgsError(f"%%chain {name}: the cell body is empty; write the chain as YAML "
                        "(a mapping with `steps:`)")
    text = body if _NAME_LINE.search(body) else f"{body.rstrip()}\nname: {name}\n"
    # a comment line in place of the `%%chain` line: line numbers in problems are then the
    # cell's line numbers, as the user sees them
    text = "#\n" + text
    chain = Chain.from_yaml(text)  # PlanError on bad YAML or fields, with line numbers
    note = None
    try:
        toolbox, note = session.toolbox(tools)
    except SessionError as exc:
        if tools is not None:
            raise
        toolbox, note = None, f"{exc} - checked the structure only"
    session.chains[name] = chain
    session.plans.pop(name, None)  # a hand-written chain now, not the planned one
    return chain, chain_view(chain, toolbox, note=note)


def chain_view(chain: Chain, toolbox: Toolbox | None, note: str | None = None) -> ChainView:
    problems = chain.problems(toolbox) if toolbox is not None else chain.problems()
    return ChainView(chain, toolbox, problems, note=note)


def toolbox_or_none(session: NotebookSession, tools: str | None) -> Toolbox | None:
    try:
        return session.toolbox(tools)[0]
    except SessionError:
        if tools is not None:
            raise
        return None


def json_or_var(session: NotebookSession, value: str | None, option: str) -> Any:
    """``value`` parsed as a JSON object, or the mapping held by the variable it names."""
    if value is None:
        return None
    if value.isidentifier():
        if value not in session.user_ns:
            known = [k for k, v in session.user_ns.items()
                     if isinstance(v, Mapping) and not k.startswith("_")]
            raise ArgsError(f"{option} {value}: no variable {value!r} in the notebook"
                            f"{did_you_mean(value, known)}")
        data = session.user_ns[value]
    else:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ArgsError(f"{option}: {value!r} is neither a variable name nor JSON "
                            f"({exc.msg} at column {exc.colno}); JSON wants double quotes: "
                            f"{option} '{{\"key\": 1}}'") from None
    if not isinstance(data, Mapping):
        raise ArgsError(f"{option} must be a JSON object or a dict, got {type(data).__name__}")
    return dict(data)


def run_options(chain: Chain, concurrency: int | None, breakpoints: str | None) -> RunOptions:
    fields: dict[str, Any] = {}
    if concurrency is not None:
        if concurrency < 1:
            raise ArgsError(f"--concurrency must be 1 or more, got {concurrency}")
        fields["max_concurrency"] = concurrency
    if breakpoints:
        ids = [b.strip() for b in breakpoints.split(",") if b.strip()]
        for step_id in ids:
            if "/" not in step_id and step_id not in chain.step_ids:
                raise ArgsError(f"--break: chain {chain.name!r} has no step {step_id!r}"
                                f"{did_you_mean(step_id, chain.step_ids)}")
        fields["breakpoints"] = ids
    return RunOptions(**fields)


# ---------------------------------------------------------------------- runs
def resume(session: NotebookSession, run: Run, toolbox: Toolbox, *,
           quiet: bool = False) -> Run:
    """``run`` driven by this kernel (resumed from its store when needed). A run that has
    ended stays a read-only view: nothing is left to resume (``rollback`` undoes it)."""
    if run.active:
        if not quiet:
            print(f"run {run.run_id} is already driven by this kernel")
        return run
    status = run.status
    if status in RUN_TERMINAL:
        if quiet:
            raise SessionError(f"run {run.run_id} already ended ({status}); nothing waits for "
                               "a decision")
        print(f"run {run.run_id} already ended ({status}); showing its stored history")
        return run
    live: Run = session.run_now(session.live(run, toolbox), "runtime.resume")
    if not quiet:
        print(f"resumed run {live.run_id} ({live.chain.name!r}) in this kernel as epoch "
              f"{live.state.epoch}; it was {status}")
    return live


def control(session: NotebookSession, run: Run, coro: Coroutine[Any, Any, Any]) -> None:
    """Apply a control coroutine of ``run`` now, on its loop; a later failure goes to its
    widget."""
    session.on_loop(lambda: eager(coro, on_error=_reporter(session, run.run_id)))


def rollback(session: NotebookSession, run: Run, toolbox: Toolbox) -> None:
    if run.status == RunStatus.ROLLED_BACK:
        raise SessionError(f"run {run.run_id} is already rolled back")

    async def go() -> None:
        live = await session.live(run, toolbox)
        await live.rollback()

    session.on_loop(lambda: eager(go(), on_error=_reporter(session, run.run_id)))


def _reporter(session: NotebookSession, run_id: str) -> Any:
    def report(exc: BaseException) -> None:
        widget = session.widgets.get(run_id)
        if widget is not None:
            widget.show_error(exc)
        print(f"chainlab: run {run_id}: {type(exc).__name__}: {exc}")

    return report


def runs_table(session: NotebookSession, db: str | None, limit: int) -> RunsTable:
    from chainlab.store.sqlite import DEFAULT_PATH

    return RunsTable(session.store(db).list_runs(limit), db or str(DEFAULT_PATH))


def show_timeline(run: Run, *, all_columns: bool = False) -> None:
    """Display the attempts table and the Gantt chart (read from the store). The table has
    the Timeline tab's narrow columns, blanks where an attempt has no value (issue 29);
    ``all_columns``: every column of ``run.attempts()``."""
    from IPython.display import display

    try:
        from chainlab.timeline import attempts_frame, plot_timeline
    except ImportError as exc:
        from chainlab.errors import MissingExtraError

        raise MissingExtraError(exc.name or "pandas", "jupyter", "%chain timeline") from None

    frame = attempts_frame(run.runtime.store, run.run_id)
    if not all_columns:
        from chainlab.jupyter.run_widget.timeline_tab import SHOWN_COLUMNS

        frame = frame[[c for c in frame.columns if c in SHOWN_COLUMNS]]
        frame = frame.astype(object).where(frame.notna(), "")
    display(frame)
    display(plot_timeline(run.runtime.store, run.run_id))


# ---------------------------------------------------------------------- planning
def make_planner(session: NotebookSession, var: str | None, model: str | None,
                 base_url: str | None) -> Any:
    if var is not None:
        planner = session.user_ns.get(var)
        if planner is None or not hasattr(planner, "plan"):
            raise ArgsError(f"--planner {var}: no planner object {var!r} in the notebook")
        if model or base_url:
            raise ArgsError("give either --planner or --model/--base-url, not both")
        return planner
    from chainlab.planner import OpenAIPlanner

    return OpenAIPlanner(model=model, base_url=base_url)


def plan(session: NotebookSession, planner: Any, request: str, toolbox: Toolbox,
         context: dict[str, Any] | None, name: str) -> tuple[Chain, ChainView]:
    """Plan in a worker thread with its own event loop and wait for it: a plan is one
    request/response, and the cell should only go on once the chain is bound to ``name``."""
    from chainlab.planner.base import plan_with_report

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["chain"], box["report"] = asyncio.run(
                plan_with_report(planner, request, toolbox, context))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, name="chainlab-plan", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    chain: Chain = box["chain"]
    report = box["report"]
    session.chains[name] = chain
    session.plans[name] = (chain, report)
    try:
        problems = chain.problems(toolbox)
    except PlanError as exc:  # pragma: no cover - planners return validated chains
        problems = exc.problems
    return chain, ChainView(chain, toolbox, problems, report=report)


# ---------------------------------------------------------------------- time travel
def step_values(pairs: list[str] | None, option: str) -> dict[str, Any]:
    """``["STEP=JSON", ...]`` as ``{step: value}`` (``--args a='{"n": 1}'``): the one parser
    every front end uses (:func:`chainlab.workspace.parse_step_values`)."""
    return parse_step_values(pairs, option)


def fork_edits(session: NotebookSession, *, args: list[str] | None,
               outputs: list[str] | None, context: str | None, from_step: str | None,
               rerun: str | None) -> dict[str, Any]:
    """The keyword arguments of ``runtime.fork`` / ``fork_plan`` from the magic's options."""
    step_args = step_values(args, "--args")
    for step_id, value in step_args.items():
        if not isinstance(value, Mapping):
            raise ArgsError(f"--args {step_id}: args are a JSON object, got "
                            f"{type(value).__name__}")
    names = [s.strip() for s in (rerun or "").split(",") if s.strip()]
    if from_step:
        names.insert(0, from_step)
    return {"args": step_args or None, "outputs": step_values(outputs, "--output") or None,
            "context": json_or_var(session, context, "--context"), "rerun": names or None}


def fork_runtime(session: NotebookSession, run: Run, toolbox: Toolbox) -> Any:
    """The runtime that forks ``run``: its store, this toolbox (tools as defined NOW, so a
    tool fixed in a cell makes its steps run again)."""
    if run.runtime.toolbox is toolbox:
        return run.runtime
    return session.runtime(toolbox, session.run_stores.get(run.run_id))


def fork(session: NotebookSession, run: Run, toolbox: Toolbox, edits: dict[str, Any],
         *, plan_only: bool) -> Any:
    """The fork plan (``plan_only``) or the forked Run, started on the kernel's loop."""
    runtime = fork_runtime(session, run, toolbox)
    if plan_only:
        return runtime.fork_plan_sync(run.run_id, **edits)
    forked: Run = session.run_now(runtime.fork(run.run_id, **edits), "runtime.fork")
    return session.remember(forked, session.run_stores.get(run.run_id))


def fork_summary(run: Run) -> str:
    """``forked run X from run Y (event N): reuse a, b · rerun c · confirm d``."""
    decisions: dict[str, list[str]] = {}
    for step_id, decision in (run.state.forked_from or {}).get("decisions", {}).items():
        decisions.setdefault(decision, []).append(step_id)
    parts = [f"{d} {', '.join(ids)}" for d, ids in decisions.items()]
    meta = run.record.meta
    return (f"forked run {run.run_id} from run {meta.get('forked_from')} (event "
            f"{meta.get('forked_at_seq')}): {' · '.join(parts)}")
