"""Exit codes, the one error type of the command line, and turning chainlab errors into
one-line messages (never a traceback for a mistake the user can fix)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

from rich.console import Console
from rich.text import Text

from chainlab.errors import (
    ChainlabError,
    MissingExtraError,
    PlanError,
    PlannerError,
    RunNotFoundError,
    RunStateError,
    StaleEpochError,
    StoreError,
    UsageError,
)
from chainlab.events.status import RunStatus

__all__ = ["CliError", "ExitCode", "exit_code_for", "reporting_errors"]


class ExitCode(IntEnum):
    """What ``chainlab`` exits with (documented in ``chainlab --help``)."""

    OK = 0  # the command did what was asked; a run succeeded
    FAILED = 1  # a run failed, was cancelled, or its rollback failed; or the store failed
    USAGE = 2  # bad command line, plan, toolbox, run id or step: nothing was changed
    SUSPENDED = 3  # the run waits for a person (approve, reject, resolve), then goes on
    ROLLED_BACK = 4  # the run was rolled back (every compensation succeeded)
    INTERRUPTED = 130  # Ctrl-C: the run stays in the store; `chainlab resume` continues it


EXIT_CODES_HELP = (
    "Exit codes: 0 success, 1 run failed (or cancelled, or rollback failed, or the database "
    "could not be used), 2 usage error "
    "(bad arguments, plan, toolbox, run id or step), 3 suspended (waits for a person), "
    "4 rolled back, 130 interrupted."
)


def exit_code_for(status: RunStatus | str | None) -> ExitCode:
    """The exit code that tells a shell script how a run ended."""
    if status == RunStatus.SUCCEEDED:
        return ExitCode.OK
    if status == RunStatus.SUSPENDED:
        return ExitCode.SUSPENDED
    if status == RunStatus.ROLLED_BACK:
        return ExitCode.ROLLED_BACK
    return ExitCode.FAILED


class CliError(UsageError):
    """A mistake the user can fix: printed as ``error: message`` (plus a hint), no traceback;
    the command exits with ``code``. Any other :class:`~chainlab.errors.UsageError` (from
    :mod:`chainlab.workspace`) is shown the same way and exits with 2."""

    def __init__(self, message: str, *, hint: str | None = None,
                 code: ExitCode = ExitCode.USAGE):
        super().__init__(message, hint=hint)
        self.code = code


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def print_error(console: Console, message: str, hint: str | None = None) -> None:
    line = Text("error: ", style="bold red")
    line.append(message)
    console.print(line, soft_wrap=True)
    if hint:
        console.print(Text(hint, style="dim"), soft_wrap=True)


def print_plan_error(console: Console, exc: PlanError, source: str | None) -> None:
    what = source or (f"chain {exc.chain_name!r}" if exc.chain_name else "the plan")
    n = len(exc.problems)
    print_error(console, f"{what} has {n} problem{'s' if n != 1 else ''}:")
    for problem in exc.problems:
        console.print(Text(f"  - {problem}"), soft_wrap=True)


@contextmanager
def reporting_errors(console: Console, source: str | None = None) -> Iterator[None]:
    """Turn errors into messages and :class:`ExitCode` (raised as ``SystemExit``)."""
    try:
        yield
    except BaseException as raised:
        exc = _unwrap(raised)
        code = _report(console, exc, source)
        if code is None:
            raise
        raise SystemExit(int(code)) from None


def _report(console: Console, exc: BaseException, source: str | None) -> ExitCode | None:
    if isinstance(exc, SystemExit):
        raise exc  # an exit code already chosen (also when it came wrapped in a group)
    if isinstance(exc, UsageError):
        print_error(console, exc.message, exc.hint)
        return exc.code if isinstance(exc, CliError) else ExitCode.USAGE
    if isinstance(exc, PlanError):
        print_plan_error(console, exc, source)
        return ExitCode.USAGE
    if isinstance(exc, RunNotFoundError | RunStateError | MissingExtraError):
        print_error(console, str(exc))
        return ExitCode.USAGE
    if isinstance(exc, StaleEpochError | StoreError):
        # the database cannot be used (deleted, read-only, corrupt, locked...): the message
        # names the file and the fix, on one line
        print_error(console, str(exc))
        return ExitCode.FAILED
    if isinstance(exc, PlannerError | ChainlabError):
        print_error(console, str(exc))
        return ExitCode.FAILED
    if isinstance(exc, KeyboardInterrupt):
        print_error(console, "interrupted")
        return ExitCode.INTERRUPTED
    return None


_TRACING: list[str | None] = []  # the collector this process sends to, once configured


def trace_to(url: str | None) -> None:
    """Send this process's traces to the OTLP/HTTP collector ``url`` (``--otlp``), or the one
    the ``OTEL_EXPORTER_OTLP_*`` variables name; nothing when neither names one (every
    command that drives a run asks: ``run``, ``serve``, ``worker`` with ``--otlp``, the
    others by the variables). Once per process. Raises CliError (OpenTelemetry is not
    installed; ``url`` is not an http(s) URL)."""
    from chainlab.tracing import otlp_wanted

    if _TRACING or not otlp_wanted(url):
        return
    try:
        from chainlab.tracing.otlp import configure_otlp
    except ImportError as exc:
        raise CliError(f"--otlp needs OpenTelemetry ({exc})",
                       hint="pip install 'chainlab[otel]'") from None
    try:
        configure_otlp(url)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    _TRACING.append(url)
