"""``%chain`` and ``%%chain``: one function per subcommand, every mistake a short UsageError.

    %%chain NAME [--tools VAR]                       define a chain (cell body = YAML)
    run = %chain run NAME [--tools VAR] [--context JSON|VAR] [--concurrency N] [--step]
                          [--break a,b] [--db PATH] [--enqueue [QUEUE]]
    run = %chain agent [NAME] "REQUEST" [--tools VAR] [--db PATH]  one agent, one request
                          [--model M] [--base-url URL] [--instructions TEXT] [--name NAME]
                                                     (no NAME: an ad-hoc agent)
    %chain runs [--db PATH] [--limit N]
    %chain show NAME|RUN [--db PATH]
    %chain resume RUN [--tools VAR] [--db PATH]
    %chain approve RUN STEP [--args JSON|VAR] [--note TEXT]
    %chain reject RUN STEP --reason TEXT
    %chain rollback RUN
    %chain watch RUN [--db URL] [--tools VAR]        the live widget of a run driven elsewhere
    %chain approvals [--db URL] [--tools VAR]        every decision waiting in the store
    %chain timeline RUN [--all]
    %chain whatif RUN [--priority critical_path|declaration] [--concurrency N]
                                                     replay a run's durations in virtual time
    %chain tools [--tools VAR]
    %chain plan "REQUEST" --as NAME [--model M] [--base-url URL] [--planner VAR] [--design]
    %chain design [NAME] [--tools VAR]               draft/edit a chain in the designer widget
    run = %chain fork RUN [--from STEP] [--args STEP=JSON ...] [--output STEP=JSON ...]
                          [--context JSON|VAR] [--rerun a,b] [--plan] [--tools VAR] [--db PATH]
    %chain fault RUN timeout|raise|second-driver [STEP] [--error KIND] [--no-effect]

``RUN`` is a run id or the name of a variable holding a Run. Variable expansion
(``$x``, ``{x}``) is off so that JSON in ``--context`` arrives intact; pass a variable name
instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import display

from chainlab._text import did_you_mean
from chainlab.errors import ChainlabError, PlanError
from chainlab.jupyter.magics import commands as cmd
from chainlab.jupyter.magics.args import DEFINE, ArgsError, HelpShown, split, subcommands
from chainlab.jupyter.session import NotebookSession, SessionError
from chainlab.jupyter.views import ToolsTable
from chainlab.plan.schema import Chain, RunOptions
from chainlab.tools import Toolbox

__all__ = ["ChainMagics"]


@magics_class
class ChainMagics(Magics):
    """The ``%chain`` line magic and the ``%%chain`` cell magic."""

    def __init__(self, shell: Any, session: NotebookSession):
        super().__init__(shell)
        self.session = session
        self.parsers = subcommands()
        self.handlers: dict[str, Callable[[argparse.Namespace], Any]] = {
            "run": self.run, "runs": self.runs, "show": self.show, "resume": self.resume,
            "approve": self.approve, "reject": self.reject, "rollback": self.rollback,
            "timeline": self.timeline, "tools": self.tools, "plan": self.plan,
            "design": self.design, "agent": self.agent,
            "fork": self.fork, "fault": self.fault,
            "whatif": self.whatif,
            "watch": self.watch, "approvals": self.approvals,
            "export-test": self.export_test,
        }

    @no_var_expand
    @line_cell_magic
    def chain(self, line: str, cell: str | None = None) -> Any:
        """Define chains (``%%chain NAME``) and run, inspect and control them (``%chain``);
        ``%chain help`` lists the subcommands."""
        try:
            if cell is not None:
                return self.define(DEFINE.parse(split(line)), cell)
            return self.dispatch(split(line))
        except HelpShown:
            return None
        except (ArgsError, SessionError) as exc:
            raise UsageError(str(exc)) from None
        except ChainlabError as exc:  # a mistake in a plan, a run id, a step id...
            raise UsageError(str(exc)) from None

    def dispatch(self, argv: list[str]) -> Any:
        if not argv or argv[0] in ("help", "-h", "--help"):
            print(self.help())
            return None
        name, rest = argv[0], argv[1:]
        if name not in self.handlers:
            hint = did_you_mean(name, self.handlers)
            raise ArgsError(f"unknown subcommand {name!r}{hint or '; `%chain help` lists them'}")
        parser = self.parsers[name][0]
        return self.handlers[name](parser.parse(rest))

    def help(self) -> str:
        lines = ["%%chain NAME [--tools VAR]   define a chain (the cell body is YAML)"]
        for name, (_, summary) in self.parsers.items():
            lines.append(f"%chain {name:<9} {summary}")
        lines.append("`%chain SUBCOMMAND --help` shows its options.")
        return "\n".join(lines)

    # ------------------------------------------------------------------ subcommands
    def define(self, ns: argparse.Namespace, body: str) -> None:
        chain, view = cmd.define_chain(self.session, ns.name, body, ns.tools)
        self._user_ns[ns.name] = chain
        display(view)

    @property
    def _user_ns(self) -> dict[str, Any]:
        assert self.shell is not None  # a magic always runs in a shell
        return self.shell.user_ns  # type: ignore[no-any-return]

    def run(self, ns: argparse.Namespace) -> Any:
        chain = self.session.chain(ns.name)
        context = cmd.json_or_var(self.session, ns.context, "--context")
        options = cmd.run_options(chain, ns.concurrency, ns.breakpoints)
        return self._start(chain, ns, context, options, paused=ns.step, queue=ns.enqueue)

    def agent(self, ns: argparse.Namespace) -> Any:
        from chainlab.agent.adhoc import agent_request  # (loaded by %chain agent alone)

        toolbox = self._agent_toolbox(ns)
        named = ns.request is not None
        ask = agent_request(toolbox, ns.first if named else None,
                            ns.request if named else ns.first, adhoc_name=ns.adhoc_name,
                            instructions=ns.instructions, model=ns.model,
                            base_url=ns.base_url, source=ns.source, command="%chain agent")
        return self._start(ask.chain, ns, ask.context, RunOptions(), meta=ask.meta,
                           paused=ns.step, queue=ns.enqueue, toolbox=toolbox)

    def _agent_toolbox(self, ns: argparse.Namespace) -> Toolbox:
        """The toolbox an agent's run uses: the session's; with ``--from`` and none in the
        notebook, an empty one (the agent brings its tools)."""
        try:
            return self.session.toolbox(ns.tools)[0]
        except SessionError:
            if ns.source is None or ns.tools is not None:
                raise
            return Toolbox("agent")

    def _start(self, chain: Chain, ns: argparse.Namespace, context: dict[str, Any] | None,
               options: RunOptions, *, paused: bool = False,
               queue: str | None = None, meta: dict[str, Any] | None = None,
               toolbox: Toolbox | None = None) -> Any:
        """What ``run`` and ``agent`` share: the one start, its widget shown first."""
        note = None
        if toolbox is None:
            toolbox, note = self.session.toolbox(ns.tools)
        if note:
            print(note)
        try:  # the widget is shown first, then the run starts (chainlab.jupyter.launch)
            return cmd.start(self.session, chain, toolbox, ns.db, context, options,
                             paused=paused, show=display, queue=queue, meta=meta)
        except PlanError as exc:
            raise UsageError(f"cannot start: {exc}") from None

    def fork(self, ns: argparse.Namespace) -> Any:
        session = self.session
        toolbox, note = session.toolbox(ns.tools)
        parent = session.find_run(ns.run, ns.db, toolbox)
        edits = cmd.fork_edits(session, args=ns.args, outputs=ns.output, context=ns.context,
                               from_step=ns.from_step, rerun=ns.rerun)
        if note:
            print(note)
        if ns.plan:
            from chainlab.timeline import fork_plan_frame

            return fork_plan_frame(cmd.fork(session, parent, toolbox, edits, plan_only=True))
        run = cmd.fork(session, parent, toolbox, edits, plan_only=False)
        print(cmd.fork_summary(run))
        display(cmd.widget(session, run))
        return run

    def export_test(self, ns: argparse.Namespace) -> None:
        from chainlab.testing.export import export_test, toolbox_spec

        toolbox, _ = self.session.toolbox(ns.tools)
        run = self.session.find_run(ns.run, ns.db, toolbox)
        spec = ns.module or toolbox_spec(toolbox)
        if spec is None:
            raise ArgsError(f"the tools of {toolbox.name!r} are defined in this notebook, which "
                            "a test cannot import: move them into a module (e.g. with "
                            "%%writefile my_tools.py), import them from there, or pass "
                            "--module MODULE:TOOLBOX")
        live = None if ns.live is None else [t.strip() for t in ns.live.split(",") if t.strip()]
        done = export_test(run.runtime.store, run.run_id, ns.out, tools=spec, toolbox=toolbox,
                           live=[] if ns.replay_all else live)
        print(f"wrote {done.test} and {done.fixture.name} (live: {', '.join(done.live) or 'none'})"
              f"; run it: pytest {done.test}")

    def fault(self, ns: argparse.Namespace) -> None:
        from chainlab.jupyter.magics.faults import magic_fault

        run = self.session.find_run(ns.run, ns.db)  # never resumed here: only a live run
        print(magic_fault(self.session, run, ns.fault, ns.step, error_kind=ns.error_kind,
                          effect=ns.effect))

    def runs(self, ns: argparse.Namespace) -> Any:
        if ns.limit < 1:
            raise ArgsError(f"--limit must be 1 or more, got {ns.limit}")
        return cmd.runs_table(self.session, ns.db, ns.limit)

    def show(self, ns: argparse.Namespace) -> None:
        session = self.session
        try:
            chain = session.chain(ns.target)
        except SessionError as not_chain:
            try:
                run = session.find_run(ns.target, ns.db, cmd.toolbox_or_none(session, ns.tools))
            except SessionError:
                raise SessionError(f"{not_chain} (and no run {ns.target!r} either)") from None
            display(cmd.widget(session, run))
            return
        toolbox = cmd.toolbox_or_none(session, ns.tools)
        display(cmd.chain_view(chain, toolbox))

    def resume(self, ns: argparse.Namespace) -> Any:
        session = self.session
        toolbox = session.toolbox_for_run(ns.run, ns.db, ns.tools)
        run = session.find_run(ns.run, ns.db, toolbox)
        run = cmd.resume(session, run, toolbox)
        display(cmd.widget(session, run))
        return run

    def approve(self, ns: argparse.Namespace) -> None:
        run = self._live(ns)
        args = cmd.json_or_var(self.session, ns.args, "--args")
        grant = {"when": ns.grant, "scope": ns.scope, "ttl_s": ns.ttl} if ns.grant else None
        cmd.control(self.session, run, run.approve(ns.step, args, ns.note, grant=grant))
        print(f"approved step {ns.step!r} of run {run.run_id}"
              + (f", with a grant ({ns.scope} scope): {ns.grant}" if grant else ""))

    def reject(self, ns: argparse.Namespace) -> None:
        run = self._live(ns)
        cmd.control(self.session, run, run.reject(ns.step, ns.reason))
        print(f"rejected step {ns.step!r} of run {run.run_id}: {ns.reason}")

    def rollback(self, ns: argparse.Namespace) -> None:
        session = self.session
        toolbox = session.toolbox_for_run(ns.run, ns.db, ns.tools)
        run = session.find_run(ns.run, ns.db, toolbox)
        cmd.rollback(session, run, toolbox)
        print(f"rolling back run {run.run_id}: compensating completed steps in reverse "
              "completion order")

    def watch(self, ns: argparse.Namespace) -> Any:
        from chainlab.jupyter.remote import watch_widget

        run = self.session.find_run(ns.run, ns.db)  # a run id, or a variable holding one
        if run.active:  # this kernel drives it: its own widget has every control
            display(cmd.widget(self.session, run))
            return run
        toolbox = cmd.toolbox_or_none(self.session, ns.tools)
        widget = watch_widget(self.session, run.run_id, ns.db, toolbox)
        display(widget)
        return widget.run

    def approvals(self, ns: argparse.Namespace) -> Any:
        from chainlab.jupyter.remote import ApprovalsInbox
        from chainlab.jupyter.session import _NO_TOOLS

        toolbox = cmd.toolbox_or_none(self.session, ns.tools)  # to take over a run nobody drives
        return ApprovalsInbox(self.session.runtime(toolbox or _NO_TOOLS, ns.db))

    def timeline(self, ns: argparse.Namespace) -> None:
        run = self.session.find_run(ns.run, ns.db)
        cmd.show_timeline(run, all_columns=ns.all_columns)

    def whatif(self, ns: argparse.Namespace) -> Any:
        from chainlab.timeline import gantt_compare, schedule_of, whatif

        run = self.session.find_run(ns.run, ns.db)
        real = schedule_of(run)
        other = whatif(run, priority=ns.priority, max_concurrency=ns.concurrency)
        cost = f"; cost {real.cost:.4g} either way" if real.cost is not None else ""
        waited = f" ({real.waited_text})" if real.waited_s else ""
        print(f"real makespan {real.makespan:.3f} s{waited}; {other.label}: "
              f"{other.makespan:.3f} s "
              f"({other.makespan / real.makespan if real.makespan else 1.0:.2f} x){cost}")
        return gantt_compare(real, other)

    def tools(self, ns: argparse.Namespace) -> Any:
        if ns.mcp:
            toolbox, note = self.session.add_mcp(ns.mcp, ns.tools, ns.name)
        else:
            toolbox, note = self.session.toolbox(ns.tools)
        if note:
            print(note)
        return ToolsTable(toolbox)

    def plan(self, ns: argparse.Namespace) -> None:
        session = self.session
        if ns.name is None and not ns.design:
            raise ArgsError("--as NAME is required: the planned chain is bound to that "
                            "variable (or pass --design to edit it in the designer first)")
        ns.name = ns.name or "plan"
        if not ns.name.isidentifier():
            raise ArgsError(f"--as {ns.name!r}: the chain is bound to a variable, so NAME must "
                            "be a Python identifier")
        toolbox, note = session.toolbox(ns.tools)
        if note:
            print(note)
        context = cmd.json_or_var(session, ns.context, "--context")
        planner = cmd.make_planner(session, ns.planner, ns.model, ns.base_url)
        chain, view = cmd.plan(session, planner, ns.request, toolbox, context, ns.name)
        self._user_ns[ns.name] = chain
        if ns.design:
            from chainlab.jupyter.magics.design import open_designer

            display(open_designer(session, ns.name, ns.tools, chain=chain)[0])
            return
        display(view)

    def design(self, ns: argparse.Namespace) -> None:
        from chainlab.jupyter.magics.design import open_designer

        if ns.name is not None and not ns.name.isidentifier():
            raise ArgsError(f"%chain design {ns.name}: NAME becomes a variable (the chain, "
                            "whenever it is valid), so it must be a Python identifier")
        designer, note = open_designer(self.session, ns.name, ns.tools)
        if note:
            print(note)
        display(designer)

    def _live(self, ns: argparse.Namespace) -> Any:
        toolbox = self.session.toolbox_for_run(ns.run, ns.db, ns.tools)
        run = self.session.find_run(ns.run, ns.db, toolbox)
        return cmd.resume(self.session, run, toolbox, quiet=True)
