"""The syntax shared by templates and conditions: a reference path (``context.x``,
``steps.ID.output.a[0]``, ``memory.KEY``, a bare ``KEY``, ``input``/``output`` in rollback
args) parsed into a frozen :class:`Ref`, quoted strings and ``{{ ref }}``, read with one
:class:`Cursor`. A mistake is a :class:`TemplateSyntaxError` with the offset.

The grammar of paths is drawn in :mod:`chainlab.plan.refs`; nothing here evaluates anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from chainlab._text import int_digits_limit, safe_repr

__all__ = ["IDENT_START", "KEY_RE", "Cursor", "Ref", "TemplateSyntaxError", "parse_braced_ref",
           "parse_int", "parse_path", "parse_string", "parse_whole_path"]

_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "none"}
KEY_RE = re.compile(r"[A-Za-z0-9_\-]+")
IDENT_START = re.compile(r"[A-Za-z_]")


class TemplateSyntaxError(ValueError):
    """A template or condition does not parse. ``.pos`` is the 0-based offset."""

    def __init__(self, message: str, source: str, pos: int):
        self.source = source
        self.pos = pos
        super().__init__(f"{message} at position {pos} in {safe_repr(source, 200)}")


@dataclass(frozen=True, slots=True)
class Ref:
    """A parsed reference. ``target`` is the step id (``steps``) or memory key (``memory``)."""

    root: Literal["context", "steps", "memory", "input", "output"]
    target: str | None
    path: tuple[str | int, ...]
    source: str

    def __str__(self) -> str:
        return self.source


class Cursor:
    __slots__ = ("pos", "src")

    def __init__(self, src: str, pos: int = 0):
        self.src = src
        self.pos = pos

    def skip_ws(self) -> None:
        while self.pos < len(self.src) and self.src[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self, s: str) -> bool:
        return self.src.startswith(s, self.pos)

    def at_end(self) -> bool:
        return self.pos >= len(self.src)

    def fail(self, message: str) -> TemplateSyntaxError:
        return TemplateSyntaxError(message, self.src, self.pos)


def parse_path(cur: Cursor) -> Ref:
    """Parse ``root(.key|[int]|['key'])*`` at the cursor (no surrounding whitespace)."""
    start = cur.pos
    m = KEY_RE.match(cur.src, cur.pos)
    if not m or not IDENT_START.match(cur.src, cur.pos):
        raise cur.fail("expected a reference such as context.x or steps.ID.output")
    head = m.group()
    cur.pos = m.end()
    segments: list[str | int] = []
    while not cur.at_end():
        ch = cur.src[cur.pos]
        if ch == ".":
            cur.pos += 1
            m = KEY_RE.match(cur.src, cur.pos)
            if not m:
                raise cur.fail("expected a key after '.'")
            segments.append(m.group())
            cur.pos = m.end()
        elif ch == "[":
            cur.pos += 1
            cur.skip_ws()
            m = re.compile(r"-?\d+").match(cur.src, cur.pos)
            if m:
                segments.append(parse_int(m.group(), cur.src, m.start()))
                cur.pos = m.end()
            elif cur.peek("'") or cur.peek('"'):
                segments.append(parse_string(cur))
            else:
                raise cur.fail("expected an index or a quoted key inside [...]")
            cur.skip_ws()
            if not cur.peek("]"):
                raise cur.fail("expected ']'")
            cur.pos += 1
        else:
            break
    return _make_ref(head, segments, cur.src[start : cur.pos], cur, start)


def parse_int(digits: str, source: str, pos: int) -> int:
    """``int(digits)``; a number longer than Python's int-to-str limit is a syntax error
    here, not a ValueError from deep inside the parser."""
    if len(digits.lstrip("-")) > int_digits_limit():
        raise TemplateSyntaxError(
            f"a number may have at most {int_digits_limit()} digits", source, pos
        )
    return int(digits)


def _make_ref(head: str, segments: list[str | int], source: str, cur: Cursor, start: int) -> Ref:
    if head == "steps":
        if not segments or not isinstance(segments[0], str):
            raise TemplateSyntaxError("expected steps.ID.output", cur.src, start)
        if len(segments) < 2 or segments[1] != "output":
            raise TemplateSyntaxError(
                f"expected steps.{segments[0]}.output[...] (only a step's output can be "
                "referenced)",
                cur.src,
                start,
            )
        return Ref("steps", segments[0], tuple(segments[2:]), source)
    if head == "memory":
        if not segments or not isinstance(segments[0], str):
            raise TemplateSyntaxError("expected memory.KEY", cur.src, start)
        return Ref("memory", segments[0], tuple(segments[1:]), source)
    if head in ("context", "input", "output"):
        return Ref(head, None, tuple(segments), source)  # type: ignore[arg-type]
    if head.lower() in _KEYWORDS:
        raise TemplateSyntaxError(f"{head!r} is a keyword, not a reference", cur.src, start)
    return Ref("memory", head, tuple(segments), source)


def parse_string(cur: Cursor) -> str:
    quote = cur.src[cur.pos]
    cur.pos += 1
    out = []
    while True:
        if cur.at_end():
            raise cur.fail("unterminated string")
        ch = cur.src[cur.pos]
        if ch == "\\" and cur.pos + 1 < len(cur.src):
            out.append(cur.src[cur.pos + 1])
            cur.pos += 2
            continue
        cur.pos += 1
        if ch == quote:
            return "".join(out)
        out.append(ch)


# a string that is exactly one braced dotted path (the usual template, "{{ steps.a.output }}"):
# the grammar of parse_braced_ref and parse_path, keys only, in one regular expression
_WHOLE_PATH = re.compile(
    r"\{\{[ \t\r\n]*([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)[ \t\r\n]*\}\}")


def parse_whole_path(text: str) -> Ref | None:
    """The reference when ``text`` is exactly ``{{ root.key.key }}`` (keys only, no ``[...]``),
    read in one step; None for any other text (the general parser reads it, and says what
    is wrong). Raises TemplateSyntaxError as :func:`parse_braced_ref` does for such a text
    (``{{ steps.a }}``, a keyword)."""
    m = _WHOLE_PATH.fullmatch(text)
    if m is None:
        return None
    path = m.group(1)
    head, *segments = path.split(".")
    return _make_ref(head, list(segments), path, Cursor(text), m.start(1))


def parse_braced_ref(cur: Cursor) -> Ref:
    """Parse ``{{ ref }}`` with the cursor on the opening braces."""
    cur.pos += 2
    cur.skip_ws()
    if cur.peek("}}"):
        raise cur.fail("empty reference '{{ }}'")
    ref = parse_path(cur)
    cur.skip_ws()
    if not cur.peek("}}"):
        raise cur.fail("expected '}}' to close the reference")
    cur.pos += 2
    return ref
