"""The rules of :func:`chainlab.plan.yamlerrors.explain` about layout: a missing or glued
colon, a ': ' inside an unquoted value, keys and list items at the wrong column, and brackets
left open. Each rule reads the error and its text (:class:`~chainlab.plan.yamlrule.ErrorText`)
and names the mistake with a hint, or returns None for the next rule to try.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from chainlab.plan.yamlrule import ErrorText, Found

__all__ = ["LAYOUT_RULES"]

_GLUED = re.compile(r"^(\s*(?:-\s+)?)([A-Za-z_][\w-]*):([^\s:/][^\s]*)")  # 'id:a'
_KEYED = re.compile(r"^(\s*(?:-\s+)?)([^\s:#'\"][^:#]*?):(?:\s+(\S.*))?$")  # 'key: value'
_ITEM = re.compile(r"^(\s*)-(\s+)")


def no_colon(err: ErrorText) -> Found | None:
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


def glued_colon(err: ErrorText) -> Found | None:
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


def colon_in_value(err: ErrorText) -> Found | None:
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


def deeper_key(err: ErrorText) -> Found | None:
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


def in_list(err: ErrorText) -> Found | None:
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


def in_mapping(err: ErrorText) -> Found | None:
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


def unclosed_bracket(err: ErrorText) -> Found | None:
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


def ends_inside(err: ErrorText) -> Found | None:
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


#: in the order they are tried (after the rules about characters and quotes)
LAYOUT_RULES: tuple[Callable[[ErrorText], Found | None], ...] = (
    no_colon,
    glued_colon,
    colon_in_value,
    deeper_key,
    in_list,
    in_mapping,
    unclosed_bracket,
    ends_inside,
)
