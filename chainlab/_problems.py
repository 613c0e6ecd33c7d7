"""What is wrong with a plan, as values: :class:`Problem` (one thing wrong, where and why),
how problems read (one per line, :func:`listing`) and the order a reader meets them in the
text (:func:`by_line`).

The plan's checks (:mod:`chainlab.plan.validate`, the YAML/JSON loaders, the planner's
repair loop) collect problems; :class:`chainlab.errors.PlanError` carries them. Their public
home is :mod:`chainlab.errors` (``from chainlab.errors import Problem, by_line``), which
re-exports them; they live here, below the exception tree and with no import of their own,
so that ``import chainlab`` still loads nothing but the exception tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Problem", "by_line", "listing"]


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


def listing(problems: Sequence[Problem], chain_name: str | None = None) -> str:
    """The text of a :class:`~chainlab.errors.PlanError`: a head naming the chain (or "plan")
    and how many problems it has, then one problem a line."""
    n = len(problems)
    head = f"chain {chain_name!r}" if chain_name else "plan"
    lines = [f"{head} has {n} problem{'s' if n != 1 else ''}:"]
    lines += [f"  - {p}" for p in problems]
    return "\n".join(lines)
