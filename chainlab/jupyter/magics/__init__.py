"""``%chain`` and ``%%chain``: one function per subcommand, every mistake a short UsageError.

    %%chain NAME [--tools VAR]                       define a chain (cell body = YAML)
    run = %chain run NAME [--tools VAR] [--context JSON|VAR] [--concurrency N] [--step]
                          [--break a,b] [--db PATH] [--enqueue [QUEUE]]
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
from chainlab.jupyter.magics.args import ArgsError, HelpShown, Parser, split
from chainlab.jupyter.session import NotebookSession, SessionError
from chainlab.jupyter.views import ToolsTable

__all__ = ["ChainMagics"]


def _parsers() -> dict[str, tuple[Parser, str]]:
    """Subcommand -> (parser, one-line summary)."""
    out: dict[str, tuple[Parser, str]] = {}

    def sub(name: str, summary: str, *, tools: bool = False, db: bool = True) -> Parser:
        p = Parser(f"%chain {name}", summary)
        if tools:
            p.add_argument("--tools", metavar="VAR", help="a Toolbox variable")
        if db:
            p.add_argument("--db", metavar="PATH",
                           help="SQLite file (default .chainlab/chainlab.db)")
        out[name] = (p, summary)
        return p

    p = sub("run", "start a run in the background and show its widget", tools=True)
    p.add_argument("name", metavar="NAME")
    p.add_argument("--context", metavar="JSON|VAR")
    p.add_argument("--concurrency", metavar="N", type=int)
    p.add_argument("--step", action="store_true", help="start paused (step-through)")
    p.add_argument("--break", dest="breakpoints", metavar="a,b", help="pause before these steps")
    p.add_argument("--enqueue", nargs="?", const="default", metavar="Q", help="a worker drives it")
    p = sub("runs", "list the runs in the store")
    p.add_argument("--limit", metavar="N", type=int, default=20)
    p = sub("show", "draw a chain, or show a run's widget", tools=True)
    p.add_argument("target", metavar="NAME|RUN")
    p = sub("resume", "continue a stored run in this kernel", tools=True)
    p.add_argument("run", metavar="RUN")
    p = sub("approve", "approve a step waiting for confirmation", tools=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("step", metavar="STEP")
    p.add_argument("--args", metavar="JSON|VAR", help="run with these args instead")
    p.add_argument("--note", metavar="TEXT")
    p = sub("reject", "reject a step waiting for confirmation", tools=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("step", metavar="STEP")
    p.add_argument("--reason", metavar="TEXT", required=True)
    p = sub("rollback", "compensate completed steps in reverse completion order", tools=True)
    p.add_argument("run", metavar="RUN")
    p = sub("watch", "follow, live, a run driven by another process (decisions go through "
            "the store)", tools=True)
    p.add_argument("run", metavar="RUN")
    sub("approvals", "every waiting confirmation and in-doubt step of every unfinished run",
        tools=True)
    p = sub("timeline", "attempts and compensations as a table and a Gantt chart")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--all", dest="all_columns", action="store_true",
                   help="every column of run.attempts() (default: the narrow table)")
    p = sub("whatif", "replay a run's durations under another release order (virtual time)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--priority", choices=["critical_path", "declaration"],
                   default="critical_path")
    p.add_argument("--concurrency", metavar="N", type=int)
    p = sub("tools", "list the tools of the active toolbox (--mcp: add an MCP server's)",
            tools=True, db=False)
    p.add_argument("--mcp", metavar="[PREFIX=]CMD|URL", action="append",
                   help="add the tools of an MCP server (a command line or a URL)")
    p.add_argument("--as", dest="name", metavar="NAME", default="mcp_tools",
                   help="with --mcp and no toolbox yet: the variable of the new toolbox")
    p = sub("plan", "let the planner draft a chain from a request", tools=True, db=False)
    p.add_argument("request", metavar='"REQUEST"')
    p.add_argument("--as", dest="name", metavar="NAME")
    p.add_argument("--model", metavar="M")
    p.add_argument("--base-url", metavar="URL")
    p.add_argument("--planner", metavar="VAR", help="a planner object in the notebook")
    p.add_argument("--context", metavar="JSON|VAR")
    p.add_argument("--design", action="store_true", help="open the plan in the designer")
    p = sub("design", "draft or edit a chain in the designer widget", tools=True, db=False)
    p.add_argument("name", metavar="NAME", nargs="?")
    p = sub("fork", "start a new run from a finished/suspended one, reusing what did not "
            "change (--plan: only show the plan)", tools=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("--from", dest="from_step", metavar="STEP",
                   help="run this step (and what depends on it) again")
    p.add_argument("--args", action="append", metavar="STEP=JSON",
                   help="merge these args into a step's args (repeatable)")
    p.add_argument("--output", action="append", metavar="STEP=JSON",
                   help="record this output instead of running the step (repeatable)")
    p.add_argument("--context", metavar="JSON|VAR", help="merged over the parent's context")
    p.add_argument("--rerun", metavar="a,b", help="steps to run again even if reusable")
    p.add_argument("--plan", action="store_true", help="only show the fork plan")
    p = sub("export-test", "write a pytest file (and its JSON fixture) that replays a run",
            tools=True)
    p.add_argument("run", metavar="RUN")
    p.add_argument("-o", "--output", dest="out", metavar="tests/test_NAME.py", required=True)
    p.add_argument("--module", metavar="MODULE:TOOLBOX",
                   help="what the test imports (default: the module that defines the tools)")
    p.add_argument("--live", metavar="a,b", help="tools called for real in the test")
    p.add_argument("--replay-all", action="store_true", help="no tool is live")
    p = sub("fault", "inject a fault into a run this kernel drives (a demo; recorded)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("fault", metavar="FAULT", help="timeout | raise | second-driver | kill")
    p.add_argument("step", metavar="STEP", nargs="?", help="the step it hits")
    p.add_argument("--error", dest="error_kind", default="transient",
                   help="raise: transient | execution_failed | permanent")
    p.add_argument("--no-effect", dest="effect", action="store_const", const=False,
                   help="the fault strikes before the tool's body runs")
    return out


_DEFINE = Parser("%%chain", "define a chain: the cell body is its YAML")
_DEFINE.add_argument("name", metavar="NAME")
_DEFINE.add_argument("--tools", metavar="VAR")


@magics_class
class ChainMagics(Magics):
    """The ``%chain`` line magic and the ``%%chain`` cell magic."""

    def __init__(self, shell: Any, session: NotebookSession):
        super().__init__(shell)
        self.session = session
        self.parsers = _parsers()
        self.handlers: dict[str, Callable[[argparse.Namespace], Any]] = {
            "run": self.run, "runs": self.runs, "show": self.show, "resume": self.resume,
            "approve": self.approve, "reject": self.reject, "rollback": self.rollback,
            "timeline": self.timeline, "tools": self.tools, "plan": self.plan,
            "design": self.design,
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
                return self.define(_DEFINE.parse(split(line)), cell)
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
        session = self.session
        chain = session.chain(ns.name)
        toolbox, note = session.toolbox(ns.tools)
        context = cmd.json_or_var(session, ns.context, "--context")
        options = cmd.run_options(chain, ns.concurrency, ns.breakpoints)
        if note:
            print(note)
        try:  # the widget is shown first, then the run starts (chainlab.jupyter.launch)
            return cmd.start(session, chain, toolbox, ns.db, context, options, paused=ns.step,
                             show=display, queue=ns.enqueue)
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
        toolbox, _ = session.toolbox(ns.tools)
        run = session.find_run(ns.run, ns.db, toolbox)
        run = cmd.resume(session, run, toolbox)
        display(cmd.widget(session, run))
        return run

    def approve(self, ns: argparse.Namespace) -> None:
        run = self._live(ns)
        args = cmd.json_or_var(self.session, ns.args, "--args")
        cmd.control(self.session, run, run.approve(ns.step, args, ns.note))
        print(f"approved step {ns.step!r} of run {run.run_id}")

    def reject(self, ns: argparse.Namespace) -> None:
        run = self._live(ns)
        cmd.control(self.session, run, run.reject(ns.step, ns.reason))
        print(f"rejected step {ns.step!r} of run {run.run_id}: {ns.reason}")

    def rollback(self, ns: argparse.Namespace) -> None:
        session = self.session
        toolbox, _ = session.toolbox(ns.tools)
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
        toolbox, _ = self.session.toolbox(ns.tools)
        run = self.session.find_run(ns.run, ns.db, toolbox)
        return cmd.resume(self.session, run, toolbox, quiet=True)
