"""YAML syntax errors in chainlab's own words: what is wrong, where, and how to fix it.

PyYAML's messages describe its parser's state ("while parsing a block collection: expected
<block end>, but found '<block mapping start>'"), and libyaml words the same error
differently. :func:`explain` reads the error's marks and the text around them and names the
mistake a person made (a tab used for indentation, a key at the wrong column, an unclosed
quote...) with a hint; PyYAML's own message follows as a detail, never as the message.
The rules about characters, quotes and documents are here; those about layout (colons,
columns, brackets) in :mod:`chainlab.plan.yamllayout`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import yaml

from chainlab.errors import Problem
from chainlab.plan.yamllayout import LAYOUT_RULES
from chainlab.plan.yamlrule import ErrorText, Found

__all__ = ["DuplicateKeyError", "explain"]

_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # what PyYAML counts as a line break
_TEMPLATE = re.compile(r"\{\{.*?\}\}")


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping repeats a key (PyYAML keeps the last value silently; plans refuse it)."""


def explain(exc: yaml.YAMLError, text: str) -> Problem:
    """The ``bad_syntax`` problem of a YAML error in ``text``: our words first (line,
    column, what is wrong, a hint), PyYAML's message after them as a detail."""
    mark = getattr(exc, "problem_mark", None)
    cmark = getattr(exc, "context_mark", None)
    err = ErrorText(
        exc,
        _BREAK.split(text),
        str(getattr(exc, "context", None) or ""),
        str(getattr(exc, "problem", None) or str(exc).splitlines()[0]),
        (mark.line, mark.column) if mark is not None else None,
        (cmark.line, cmark.column) if cmark is not None else None,
    )
    what, hint, where = _classify(err)
    where = where or err.at or err.ctx_at
    detail = "" if isinstance(exc, DuplicateKeyError) else f" [PyYAML: {_detail(err)}]"
    if where is None:
        return Problem("bad_syntax", f"invalid YAML: {what}; {hint}{detail}")
    line, col = where[0] + 1, where[1] + 1
    return Problem(
        "bad_syntax",
        f"invalid YAML: {what} (line {line}, column {col}); {hint}{detail}",
        line=line,
        column=col,
    )


def _detail(err: ErrorText) -> str:
    return f"{err.context}: {err.problem}" if err.context else err.problem


def _classify(err: ErrorText) -> Found:
    for rule in _RULES:
        try:
            found = rule(err)
        except (IndexError, ValueError, TypeError):  # odd text around odd marks: next rule
            continue
        if found is not None:
            return found
    return (
        "the text does not parse as YAML here",
        "check the indentation and the quotes on this line and the line above",
        None,
    )


# --------------------------------------------------------------------------- the rules


def _duplicate(err: ErrorText) -> Found | None:
    if not isinstance(err.exc, DuplicateKeyError):
        return None
    return err.problem, "keep one of them (a mapping holds each key once)", None


def _tab(err: ErrorText) -> Found | None:
    if err.at is None:
        return None
    row = err.at[0]
    indent = re.match(r"[ \t]*", err.line(row))
    if "\t" in (indent.group() if indent else "") or "tab" in err.problem:
        col = err.line(row).find("\t")
        return (
            "a tab used for indentation",
            "indent with spaces only (YAML does not allow tabs in indentation)",
            (row, max(col, 0)),
        )
    if err.char(err.at) == "\t":
        return "a tab where YAML does not allow one", "use spaces instead", None
    return None


def _unclosed_quote(err: ErrorText) -> Found | None:
    if "quoted scalar" not in err.context or not (
            "end of stream" in err.problem or "document" in err.problem):
        return None
    quote = err.char(err.ctx_at) or '"'
    return (
        f"an unclosed quote: the {quote} here is never closed",
        f"end the value with a matching {quote}, or remove the stray {quote}",
        err.ctx_at,
    )


def _bad_escape(err: ErrorText) -> Found | None:
    if "unknown escape" not in err.problem or err.at is None:
        return None
    row, col = err.at
    line = err.line(row)
    start = col if line[col:col + 1] == "\\" else max(col - 1, 0)
    return (
        f"an unknown escape '{line[start:start + 2]}' in a double-quoted string",
        "write \\\\ for a backslash, or use single quotes (in '...' a backslash is just a "
        "backslash)",
        (row, start),
    )


def _unhashable(err: ErrorText) -> Found | None:
    if "unhashable key" not in err.problem or err.ctx_at is None:
        return None
    row, col = err.ctx_at
    line = err.line(row)
    template = _TEMPLATE.search(line, col)
    if template is None:
        return "a mapping or a list used as a key", "a key is a name: quote it if it is text", None
    key = re.search(r"([\w-]+):\s*$", line[: template.start()])
    name = key.group(1) if key else "key"
    return (
        "an unquoted template (YAML reads '{' as the start of a mapping)",
        f"quote it: {name}: '{template.group()}'",
        (row, template.start()),
    )


def _cannot_start(err: ErrorText) -> Found | None:
    if "cannot start any token" not in err.problem:
        return None
    char = err.char(err.at)
    return (
        f"{char!r} cannot start a value (YAML reserves '@' and '`')",
        "quote the value: 'like this'",
        None,
    )


def _documents(err: ErrorText) -> Found | None:
    if "single document" not in err.context:
        return None
    return (
        "a second YAML document (after a '---' line)",
        "a plan is one document: remove the '---' line and what follows it",
        None,
    )


def _alias(err: ErrorText) -> Found | None:
    if "undefined alias" not in err.problem or err.at is None:
        return None
    name = re.match(r"\*[^\s,\[\]{}]*", err.line(err.at[0])[err.at[1]:])
    return (
        f"an alias {name.group() if name else '*'!r} with no anchor (YAML aliases are not "
        "allowed in a plan anyway)",
        "write the value out where it is needed",
        None,
    )


def _directive(err: ErrorText) -> Found | None:
    if "directive" not in err.context and "<document start>" not in err.problem:
        return None
    row = next((i for i, line in enumerate(err.lines) if line.startswith("%")), None)
    return (
        "a line starting with '%' (YAML reads it as a directive)",
        "quote a value that starts with '%'",
        (row, 0) if row is not None else None,
    )


_RULES: tuple[Callable[[ErrorText], Found | None], ...] = (
    _duplicate,
    _tab,
    _unclosed_quote,
    _bad_escape,
    _unhashable,
    *LAYOUT_RULES,
    _cannot_start,
    _documents,
    _alias,
    _directive,
)
