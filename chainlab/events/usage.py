"""What a call consumed (tokens, cost, anything a tool counts) and how usages add up.

A usage is a plain JSON dict recorded in an attempt's end event (``payload["usage"]``)::

    {"input_tokens": 812, "output_tokens": 97, "cost": 0.0031, "model": "gpt-4o-mini",
     "cache_hits": 2}

Numbers add; ``model`` is a name (several calls with different models add to
``"models": [...]``). ``tokens`` is always ``input_tokens + output_tokens`` when either is
known, so a budget and a view never compute it twice. The fold
(:mod:`chainlab.events.fold`) sums the usage of the attempts a run MADE: a step a fork
reused made no call in this run, an attempt interrupted by a crash recorded none, so nothing
is ever counted twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["USAGE_TOTALS", "add_usage", "normalize_usage", "total_usage", "usage_text"]

#: the usage numbers every view shows first (then any other number a tool reported)
USAGE_TOTALS = ("input_tokens", "output_tokens", "tokens", "cost")


def normalize_usage(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a usage: finite numbers (bools refused), ``model`` a str, ``tokens``
    derived. Raises ValueError naming the bad entry."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key == "model":
            out["model"] = str(value)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"usage {key!r} must be a finite number, got {value!r}")
        out[key] = value
    if "input_tokens" in out or "output_tokens" in out:
        out["tokens"] = out.get("input_tokens", 0) + out.get("output_tokens", 0)
    return out


def add_usage(total: dict[str, Any], one: Mapping[str, Any] | None) -> dict[str, Any]:
    """Add ``one`` into ``total`` (in place; returned): numbers sum, models collect."""
    if not one:
        return total
    for key, value in one.items():
        if key in ("model", "models"):
            names = value if isinstance(value, list) else [value]
            models = total.setdefault("models", [])
            models.extend(n for n in names if n not in models)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
    if isinstance(total.get("cost"), float):
        total["cost"] = round(total["cost"], 10)  # sums of cents print as cents
    return total


def total_usage(usages: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The sum of ``usages`` (``{}`` when none reported anything)."""
    total: dict[str, Any] = {}
    for one in usages:
        add_usage(total, one)
    return total


def usage_text(usage: Mapping[str, Any] | None) -> str:
    """A usage in a few words, as every front end shows it:
    ``130 tokens (110 in, 20 out) · cost 0.003`` ('' for none)."""
    if not usage:
        return ""
    parts = []
    if "tokens" in usage:
        parts.append(f"{usage['tokens']:,} tokens ({usage.get('input_tokens', 0):,} in, "
                     f"{usage.get('output_tokens', 0):,} out)")
    if "cost" in usage:
        parts.append(f"cost {usage['cost']:.4g}")
    return " · ".join(parts)
