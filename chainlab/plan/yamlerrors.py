"""YAML syntax errors in chainlab's own words: what is wrong, where, and how to fix it.

PyYAML's messages describe its parser's state ("while parsing a block collection: expected
<block end>, but found '<block mapping start>'"), and libyaml words the same error
differently. :func:`explain` reads the error's marks and the text around them and names the
mistake a person made (a tab used for indentation, a key at the wrong column, an unclosed
quote...) with a hint; PyYAML's own message follows as a detail, never as the message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from chainlab.errors import Problem

__all__ = ["DuplicateKeyError", "explain"]

_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # what PyYAML counts as a line break
_GLUED = re.compile(r"^(\s*(?:-\s+)?)([A-Za-z_][\w-]*):([^\s:/][^\s]*)")  # 'id:a'
_KEYED = re.compile(r"^(\s*(?:-\s+)?)([^\s:#'\"][^:#]*?):(?:\s+(\S.*))?$")  # 'key: value'
_ITEM = re.compile(r"^(\s*)-(\s+)")
_TEMPLATE = re.compile(r"\{\{.*?\}\}")


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping repeats a key (PyYAML keeps the last value silently; plans refuse it)."""


@dataclass(frozen=True, slots=True)
class _Error:
    """A YAML error and the text it is about; marks are 0-based (line, column)."""

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


_Found = tuple[str, str, tuple[int, int] | None]  # what, hint, where (None: the error's mark)


def explain(exc: yaml.YAMLError, text: str) -> Problem:
    """The ``bad_syntax`` problem of a YAML error in ``text``: our words first (line,
    column, what is wrong, a hint), PyYAML's message after them as a detail."""
    mark = getattr(exc, "problem_mark", None)
    cmark = getattr(exc, "context_mark", None)
    err = _Error(
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


def _detail(err: _Error) -> str:
    return f"{err.context}: {err.problem}" if err.context else err.problem


def _classify(err: _Error) -> _Found:
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


def _duplicate(err: _Error) -> _Found | None:
    if not isinstance(err.exc, DuplicateKeyError):
        return None
    return err.problem, "keep one of them (a mapping holds each key once)", None


def _tab(err: _Error) -> _Found | None:
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


def _unclosed_quote(err: _Error) -> _Found | None:
    if "quoted scalar" not in err.context or not (
            "end of stream" in err.problem or "document" in err.problem):
        return None
    quote = err.char(err.ctx_at) or '"'
    return (
        f"an unclosed quote: the {quote} here is never closed",
        f"end the value with a matching {quote}, or remove the stray {quote}",
        err.ctx_at,
    )


def _bad_escape(err: _Error) -> _Found | None:
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


def _unhashable(err: _Error) -> _Found | None:
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


def _no_colon(err: _Error) -> _Found | None:
    """A line in a mapping with no ':' after its key ('steps' for 'steps:')."""
    if "simple key" not in err.context or "expected ':'" not in err.problem or not err.ctx_at:
        return None
    row, col = err.ctx_at
    words = err.line(row)[col:].split(None, 1)
    if not words:
        return None
    fixed = f"{words[0]}: {words[1]}" if len(words) > 1 else f"{words[0]}:"
    return (
        f"no ':' after the key {words[0]!r}",
        f"write '{fixed.strip()}' (a mapping's line is 'key: value')",
        (row, col + len(words[0])),
    )


def _glued_colon(err: _Error) -> _Found | None:
    if err.at is None or "mapping values" not in err.problem:
        return None
    row = err.at[0]
    above = err.previous(row)
    for i in (row, above):
        m = _GLUED.match(err.line(i)) if i is not None else None
        if i is not None and m is not None and not (i == row and m.end(2) >= err.at[1]):
            return (
                f"no space after ':' in {m.group(2) + ':' + m.group(3)!r}",
                f"write '{m.group(2)}: {m.group(3)}' (a key ends with a colon and a space)",
                (i, m.end(2)),
            )
    return None


def _colon_in_value(err: _Error) -> _Found | None:
    if err.at is None or "mapping values" not in err.problem:
        return None
    row, col = err.at
    line = err.line(row)
    m = _KEYED.match(line[:col])
    if m is None or not m.group(3):
        return None
    value = line[m.end(1) + len(m.group(2)) + 1:].strip()
    return (
        f"a ': ' inside the unquoted value of {m.group(2).strip()!r}",
        f"quote the value: {m.group(2).strip()}: '{value}'",
        None,
    )


def _key_column(line: str) -> int:
    """The column where the keys of ``line`` start (after '- ' for a list item)."""
    m = _ITEM.match(line)
    if m:
        return m.end()
    return len(line) - len(line.lstrip(" "))


def _deeper_key(err: _Error) -> _Found | None:
    """'mapping values are not allowed' on a line indented deeper than the key above."""
    if err.at is None or "mapping values" not in err.problem:
        return None
    row = err.at[0]
    above = err.previous(row)
    if above is None:
        return None
    col = _key_column(err.line(row))
    expected = _key_column(err.line(above))
    if col <= expected:
        return None
    key = err.token((row, col))
    prev = err.token((above, expected))
    return (
        f"inconsistent indentation: expected a key at column {expected + 1} (like {prev!r} "
        f"on line {above + 1}), found {key!r} at column {col + 1}",
        f"line up the keys of one mapping at the same column; to nest {key!r} under "
        f"{prev!r}, give {prev!r} no value on its own line",
        (row, col),
    )


def _in_list(err: _Error) -> _Found | None:
    """A block sequence ('- ' items) met something that is not an item."""
    if "block collection" not in err.context or err.at is None or err.ctx_at is None:
        return None
    dash = err.ctx_at[1]
    row, col = err.at
    found = err.token(err.at)
    item = next((i for i in range(row - 1, err.ctx_at[0] - 1, -1)
                 if _ITEM.match(err.line(i)) and _key_column(err.line(i)) > dash
                 and err.line(i)[dash:dash + 1] == "-"), err.ctx_at[0])
    keys = _key_column(err.line(item))
    first = err.token((item, keys))
    if col == dash:
        return (
            f"a mapping key where a list item was expected: {found!r} is at the column of the "
            f"'- ' items of the list that starts on line {err.ctx_at[0] + 1}",
            f"indent {found!r} to column {keys + 1} to add it to the item above, or start a "
            "new item with '- '",
            None,
        )
    return (
        f"inconsistent indentation: expected a key at column {keys + 1} (like {first!r} on "
        f"line {item + 1}), found {found!r} at column {col + 1}",
        f"line up {found!r} with the other keys of this item, at column {keys + 1}",
        None,
    )


def _in_mapping(err: _Error) -> _Found | None:
    """A block mapping met something that is not a key."""
    if "block mapping" not in err.context or err.at is None or err.ctx_at is None:
        return None
    row, col = err.at
    line = err.line(row)
    if line[col:col + 2].rstrip() == "-":
        item = next((i for i in range(row - 1, err.ctx_at[0] - 1, -1)
                     if _ITEM.match(err.line(i))), None)
        dash = len(err.line(item)) - len(err.line(item).lstrip(" ")) if item is not None else col
        if item is not None and dash != col:
            return (
                f"inconsistent indentation: a list item at column {col + 1}, but the item on "
                f"line {item + 1} starts at column {dash + 1}",
                f"put every '- ' of one list at the same column ({dash + 1})",
                None,
            )
        return (
            "a list item where a mapping key was expected",
            "a list is the value of a key: put it under a key (such as 'steps:') and indent "
            "it, or remove the '-'",
            None,
        )
    if line[:col].strip():
        return (
            f"unexpected text {err.token(err.at)!r} after a value on the same line",
            "quote the whole value, or put the text on its own line as 'key: value'",
            None,
        )
    expected = err.ctx_at[1]
    return (
        f"inconsistent indentation: expected a key at column {expected + 1}, found "
        f"{err.token(err.at)!r} at column {col + 1}",
        f"line up the keys of one mapping at column {expected + 1}",
        None,
    )


def _unclosed_bracket(err: _Error) -> _Found | None:
    if "flow sequence" not in err.context and "flow mapping" not in err.context:
        return None
    opener = "[" if "sequence" in err.context else "{"
    closer = "]" if opener == "[" else "}"
    where = f" (opened at line {err.ctx_at[0] + 1}, column {err.ctx_at[1] + 1})" \
        if err.ctx_at else ""
    return (
        f"an unclosed {opener!r}{where}: expected ',' or {closer!r}",
        f"close it with {closer!r}, or separate its items with ','",
        None,
    )


def _ends_inside(err: _Error) -> _Found | None:
    """The text ends where a value of a '[...]' or '{...}' should follow."""
    if "flow node" not in err.context or "node content" not in err.problem:
        return None
    opener = _unclosed(err.lines)
    if opener is None:
        return None
    row, col = opener
    bracket = err.line(row)[col]
    closer = "]" if bracket == "[" else "}"
    return (
        f"the text ends inside the {bracket!r} opened at line {row + 1}, column {col + 1}",
        f"finish the value and close it with {closer!r}",
        None,
    )


def _unclosed(lines: list[str]) -> tuple[int, int] | None:
    """Where the last bracket that is never closed opens (quotes and comments skipped)."""
    stack: list[tuple[int, int]] = []
    for row, line in enumerate(lines):
        quote = ""
        for col, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"" and (col == 0 or line[col - 1] in " [{,:"):
                quote = char
            elif char == "#" and (col == 0 or line[col - 1] == " "):
                break
            elif char in "[{":
                stack.append((row, col))
            elif char in "]}" and stack:
                stack.pop()
    return stack[-1] if stack else None


def _cannot_start(err: _Error) -> _Found | None:
    if "cannot start any token" not in err.problem:
        return None
    char = err.char(err.at)
    return (
        f"{char!r} cannot start a value (YAML reserves '@' and '`')",
        "quote the value: 'like this'",
        None,
    )


def _documents(err: _Error) -> _Found | None:
    if "single document" not in err.context:
        return None
    return (
        "a second YAML document (after a '---' line)",
        "a plan is one document: remove the '---' line and what follows it",
        None,
    )


def _alias(err: _Error) -> _Found | None:
    if "undefined alias" not in err.problem or err.at is None:
        return None
    name = re.match(r"\*[^\s,\[\]{}]*", err.line(err.at[0])[err.at[1]:])
    return (
        f"an alias {name.group() if name else '*'!r} with no anchor (YAML aliases are not "
        "allowed in a plan anyway)",
        "write the value out where it is needed",
        None,
    )


def _directive(err: _Error) -> _Found | None:
    if "directive" not in err.context and "<document start>" not in err.problem:
        return None
    row = next((i for i, line in enumerate(err.lines) if line.startswith("%")), None)
    return (
        "a line starting with '%' (YAML reads it as a directive)",
        "quote a value that starts with '%'",
        (row, 0) if row is not None else None,
    )


_RULES: tuple[Callable[[_Error], _Found | None], ...] = (
    _duplicate,
    _tab,
    _unclosed_quote,
    _bad_escape,
    _unhashable,
    _no_colon,
    _glued_colon,
    _colon_in_value,
    _deeper_key,
    _in_list,
    _in_mapping,
    _unclosed_bracket,
    _ends_inside,
    _cannot_start,
    _documents,
    _alias,
    _directive,
)
