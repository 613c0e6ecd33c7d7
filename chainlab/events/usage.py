"""What a call consumed (tokens, cost, anything a tool counts) and how usages add up.

A usage is a plain JSON dict recorded in an attempt's end event (``payload["usage"]``)::

    {"input_tokens": 812, "output_tokens": 97, "cost": 0.0031, "model": "gpt-4o-mini",
     "cache_hits": 2}

Each number a call reports is from 0 to :data:`USAGE_MAX` (its reports summed too), checked
where it enters (:func:`normalize_usage`, :func:`summed_usage`). Numbers add; ``model`` is a
name (several calls with different models add to
``"models": [...]``). ``tokens`` is always ``input_tokens + output_tokens`` when either is
known, so a budget and a view never compute it twice. The fold
(:mod:`chainlab.events.fold`) sums the usage of the attempts a run MADE: a step a fork
reused made no call in this run, an attempt interrupted by a crash recorded none, so nothing
is ever counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chainlab._json import scalar_problem
from chainlab._text import safe_repr

__all__ = ["USAGE_MAX", "USAGE_TOTALS", "add_usage", "normalize_usage", "summed_usage",
           "total_usage", "usage_text"]

#: the usage numbers every view shows first (then any other number a tool reported)
USAGE_TOTALS = ("input_tokens", "output_tokens", "tokens", "cost")
#: the largest usage number one call may report (its reports summed): 10**15 tokens or
#: currency units. Far beyond any real call, and small enough that no sum of the calls a
#: run makes can overflow a float or make an integer too long to write
USAGE_MAX = 10**15
_MAX_NAME = 200  # characters of a usage name or a model's name


def normalize_usage(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a usage: numbers from 0 to :data:`USAGE_MAX` (bools refused), ``model``
    a name, ``tokens`` derived. Raises ValueError naming the bad entry."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        name = key if isinstance(key, str) and scalar_problem(key) is None \
            and len(key) <= _MAX_NAME else None
        if name is None:
            raise ValueError(f"usage names are short text, got {safe_repr(key)}")
        if key in ("model", "models"):
            for model in value if key == "models" and isinstance(value, list) else [value]:
                _check_model(model)
            out[key] = value
            continue
        out[key] = _number(key, value)
    if "input_tokens" in out or "output_tokens" in out:
        out["tokens"] = _number("tokens", out.get("input_tokens", 0)
                                + out.get("output_tokens", 0))
    return out


def _number(key: str, value: Any) -> int | float:
    """``value`` if it is a usage number. Raises ValueError naming ``key``."""
    rule = f"usage {key!r} must be a finite number from 0 to {USAGE_MAX:.0e}, got"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{rule} {safe_repr(value)}")
    why = scalar_problem(value)  # NaN, infinities, integers too long to write (the gate's)
    if why is not None:
        raise ValueError(f"{rule} {why}")
    if not 0 <= value <= USAGE_MAX:
        raise ValueError(f"{rule} {safe_repr(value)}" + (
            " (a number consumed is never negative)" if value < 0 else ""))
    return value


def _check_model(model: Any) -> None:
    if not isinstance(model, str) or scalar_problem(model) is not None \
            or len(model) > _MAX_NAME:
        raise ValueError(f"usage 'model' must be a model's name (text of at most {_MAX_NAME} "
                         f"characters), got {safe_repr(model)}")


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


def summed_usage(total: Mapping[str, Any], one: Mapping[str, Any]) -> dict[str, Any]:
    """``total`` plus ``one`` as a new usage, each sum checked like a reported number (one
    call's reports add up to at most :data:`USAGE_MAX` each). Raises ValueError; ``total``
    is left as it was."""
    out = add_usage(dict(total), one)
    for key, value in out.items():
        if key not in ("model", "models"):
            _number(key, value)
    return out


def total_usage(usages: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The sum of ``usages`` (``{}`` when none reported anything)."""
    total: dict[str, Any] = {}
    for one in usages:
        add_usage(total, one)
    return total


def usage_text(usage: Mapping[str, Any] | None, unknown: str | None = None) -> str:
    """A usage in a few words, as every front end shows it:
    ``130 tokens (110 in, 20 out) · cost 0.003`` ('' for none). ``unknown``: why a call's
    reported usage could not be taken (``usage`` is then what was counted in its stead):
    ``usage unknown: the server reported ...; counted as expected: 120 tokens``."""
    if unknown:
        counted = {k: v for k, v in (usage or {}).items() if k in ("tokens", "cost")}
        return (f"usage unknown: {unknown}; counted as expected: "
                f"{usage_text(counted) or 'nothing known'}")
    if not usage:
        return ""
    parts = []
    if "tokens" in usage and "input_tokens" not in usage and "output_tokens" not in usage:
        parts.append(f"{usage['tokens']:,} tokens")  # (an estimate: no split known)
    elif "tokens" in usage:
        parts.append(f"{usage['tokens']:,} tokens ({usage.get('input_tokens', 0):,} in, "
                     f"{usage.get('output_tokens', 0):,} out)")
    if "cost" in usage:
        parts.append(f"cost {usage['cost']:.4g}")
    return " · ".join(parts)
