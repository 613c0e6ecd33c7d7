"""The regular expressions of a tool's JSON Schemas (``pattern``, ``patternProperties``) run
on RE2, a regex engine without backtracking (``google-re2``, installed with
``chainlab[mcp]``): its time is linear in the text, so a server-supplied pattern such as
``(a+)+$`` cannot make a crafted argument take exponential time (Python's ``re``, which
``jsonschema`` uses, backtracks: 30 characters took minutes).

Why RE2 rather than a time or length bound: a bound on Python's ``re`` either refuses long
but honest text or still lets a short crafted one burn a CPU (the exponent grows per
character), and a regex cannot be stopped from another thread. RE2 has no backreferences
nor lookaround; a pattern that uses them is refused when the tool is registered (naming the
tool and the pattern), as is ``unevaluatedProperties`` beside ``patternProperties``, the one
keyword whose patterns ``jsonschema`` would still run on ``re``. RE2 is also closer to what
JSON Schema means (ECMA-262: ``\\d`` is ASCII digits, as in RE2, where ``re`` takes any
Unicode digit).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from chainlab._text import safe_repr
from chainlab.errors import MissingExtraError, ToolDefinitionError

__all__ = ["check_patterns", "linear_validator"]

#: keywords whose values are data, not schemas (a "pattern" key in them is no regex)
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    try:
        import re2
    except ImportError:
        raise MissingExtraError("google-re2", "mcp",
                                "a JSON Schema with a pattern (checked without backtracking)"
                                ) from None
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _patterns(schema: Any) -> Iterator[tuple[str, str]]:
    """Every ``(keyword, regex)`` of a schema (``pattern`` values, ``patternProperties``
    keys), and ``("unevaluated", "")`` where unevaluatedProperties meets patternProperties."""
    if isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("pattern"), str):
        yield "pattern", schema["pattern"]
    props = schema.get("patternProperties")
    if isinstance(props, dict):
        yield from (("patternProperties", key) for key in props)
        if "unevaluatedProperties" in schema:
            yield "unevaluated", ""
    for key, value in schema.items():
        if key not in _DATA_KEYWORDS and isinstance(value, dict | list):
            yield from _patterns(value)


def check_patterns(schema: Any, tool: str, which: str) -> None:
    """Every regex of ``schema`` compiles on RE2. Raises ToolDefinitionError naming the tool
    and the pattern (MissingExtraError without google-re2)."""
    for keyword, pattern in _patterns(schema):
        if keyword == "unevaluated":
            raise ToolDefinitionError(
                f"{tool}: its {which} schema has unevaluatedProperties beside "
                "patternProperties, whose patterns would run on a backtracking regex engine; "
                "drop one of them")
        try:
            _compiled(pattern)
        except MissingExtraError:
            raise
        except Exception as exc:
            why = exc.args[0] if exc.args else exc
            why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
            raise ToolDefinitionError(
                f"{tool}: its {which} schema has the {keyword} {safe_repr(pattern)}, which "
                f"RE2 cannot run ({why}); chainlab checks patterns without backtracking (no "
                "backreferences, no lookaround): rewrite the pattern") from None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{safe_repr(instance)} does not match {patrn!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any,
                        schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any,
                           schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = sorted((key for key in instance if key not in known
                     and not any(_search(p, key) for p in patterns)), key=str)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(safe_repr(key) for key in extras)
        if patterns:
            yield ValidationError(f"{listed} {'does' if len(extras) == 1 else 'do'} not match "
                                  f"any of the regexes: {', '.join(map(repr, patterns))}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({listed} "
                                  f"{'was' if len(extras) == 1 else 'were'} unexpected)")


@functools.lru_cache(maxsize=16)
def linear_validator(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with its regex keywords on RE2."""
    from jsonschema import validators

    return validators.extend(cls, {"pattern": _pattern,
                                   "patternProperties": _pattern_properties,
                                   "additionalProperties": _additional_properties})
