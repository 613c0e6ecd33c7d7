"""What a rule of :func:`chainlab.plan.yamlerrors.explain` reads and returns: the YAML error
with the text around it (:class:`ErrorText`) and its finding (:data:`Found`). The rules about
characters and quotes (:mod:`chainlab.plan.yamlerrors`) and those about layout
(:mod:`chainlab.plan.yamllayout`) share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

__all__ = ["ErrorText", "Found"]


@dataclass(frozen=True, slots=True)
class ErrorText:
    """A YAML error and the text it is about, what every rule reads; marks are 0-based
    (line, column)."""

    exc: yaml.YAMLError
    lines: list[str]
    context: str
    problem: str
    at: tuple[int, int] | None
    ctx_at: tuple[int, int] | None

    def line(self, i: int) -> str:
        return self.lines[i] if 0 <= i < len(self.lines) else ""

    def char(self, where: tuple[int, int] | None) -> str:
        if where is None:
            return ""
        text = self.line(where[0])
        return text[where[1]] if where[1] < len(text) else ""

    def token(self, where: tuple[int, int]) -> str:
        """The word at ``where`` (up to ':' or a space)."""
        rest = self.line(where[0])[where[1]:]
        return re.split(r"[:\s]", rest, maxsplit=1)[0] or rest[:1]

    def previous(self, row: int) -> int | None:
        """The nearest line above ``row`` that holds something (not blank, not a comment)."""
        for i in range(row - 1, -1, -1):
            stripped = self.line(i).strip()
            if stripped and not stripped.startswith("#"):
                return i
        return None


#: a rule's finding: what is wrong, the hint, and where (None: at the error's mark)
Found = tuple[str, str, tuple[int, int] | None]
