"""Argument parsing for the magics: argparse that raises short errors instead of exiting.

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

__all__ = ["ArgsError", "HelpShown", "Parser", "split"]


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
