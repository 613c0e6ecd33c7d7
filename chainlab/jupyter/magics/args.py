"""Argument parsing for the magics: argparse that raises short errors instead of exiting,
and the grammar of every ``%chain`` subcommand (:func:`subcommands`) and of ``%%chain``.

Every mistake becomes :class:`ArgsError` (the magics turn it into a ``UsageError``) with a
"did you mean" for misspelt options; ``-h/--help`` raises :class:`HelpShown` after printing.
"""

from __future__ import annotations

import argparse
import re
import shlex
from typing import Any, NoReturn

from chainlab._text import did_you_mean
from chainlab.errors import UsageError

__all__ = ["DEFINE", "ArgsError", "HelpShown", "Parser", "split", "subcommands"]


class ArgsError(UsageError):
    """The magic's arguments are wrong; the message says how to fix them."""


class HelpShown(Exception):
    """``--help`` printed the usage; nothing else to do."""


def split(line: str) -> list[str]:
    """Split a magic line like a shell does (quotes group words). Raises ArgsError."""
    try:
        return shlex.split(line, posix=True)
    except ValueError as exc:
        raise ArgsError(f"cannot read the arguments ({exc}): close the quote") from None


class Parser(argparse.ArgumentParser):
    """An ArgumentParser for one subcommand (``prog`` is e.g. ``%chain run``)."""

    def __init__(self, prog: str, description: str = "", **kw: Any):
        super().__init__(prog=prog, description=description, add_help=True,
                         exit_on_error=False, allow_abbrev=False, **kw)

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """Parse ``argv``; unknown options get a did-you-mean. Raises ArgsError, HelpShown."""
        try:
            ns, rest = self.parse_known_args(argv)
        except argparse.ArgumentError as exc:
            self.error(str(exc))
        if rest:
            bad = rest[0]
            if bad.startswith("-"):
                options = [s for a in self._actions for s in a.option_strings]
                hint = did_you_mean(bad, options)
                self.error(f"unknown option {bad!r}{hint}")
            self.error(f"unexpected argument {bad!r}")
        return ns

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument (\S+): ", r"\1: ", message)
        raise ArgsError(f"{message}\nusage: {self._short_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise HelpShown(message or "")

    def _short_usage(self) -> str:
        return " ".join(self.format_usage().split())[len("usage: "):]


def subcommands() -> dict[str, tuple[Parser, str]]:
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
    p = sub("agent", "ask one agent of the toolbox one request: a one-step chain, run like "
            "`run` runs one, with its widget", tools=True)
    p.add_argument("first", metavar="[NAME]", help="a registered agent (toolbox.add_agent); "
                   "left out: an ad-hoc agent offered every tool of the toolbox")
    p.add_argument("request", metavar='"REQUEST"', nargs="?")
    p.add_argument("--model", metavar="M", help="ad-hoc agent: the model (else OPENAI_MODEL)")
    p.add_argument("--base-url", metavar="URL",
                   help="ad-hoc agent: an OpenAI-compatible server (else OPENAI_BASE_URL; "
                        "the key comes from OPENAI_API_KEY, never from the URL)")
    p.add_argument("--instructions", metavar="TEXT", help="ad-hoc agent: its instructions")
    p.add_argument("--name", dest="adhoc_name", metavar="NAME",
                   help="ad-hoc agent: its name, the step's id (default: assistant)")
    p.add_argument("--from", dest="source", metavar="MODULE:OBJ",
                   help="the agent that object is: a chainlab Agent, or a Pydantic AI / OpenAI "
                        "Agents SDK agent, converted (the run keeps MODULE:OBJ)")
    p.add_argument("--step", action="store_true",
                   help="start paused: Step asks the model one turn at a time")
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
    p.add_argument("--grant", metavar="COND", help="also approve similar calls: those of "
                   "the same tool in --scope whose args match, e.g. 'args.amount <= 100'")
    p.add_argument("--scope", choices=["step", "run"], default="step")
    p.add_argument("--ttl", metavar="DURATION", default="10m", help="how long the grant "
                   "lasts: seconds or 90s, 10m, 2h")
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
    p.add_argument("--base-url", metavar="URL",
                   help="the planner's server (the key comes from OPENAI_API_KEY, never from "
                        "the URL)")
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


DEFINE = Parser("%%chain", "define a chain: the cell body is its YAML")
DEFINE.add_argument("name", metavar="NAME")
DEFINE.add_argument("--tools", metavar="VAR")
