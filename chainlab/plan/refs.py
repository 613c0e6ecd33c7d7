"""References, templates and conditions: a small grammar of our own.

Nothing here ever reaches ``eval``/``exec`` or a template engine that can run code: the
input is parsed into tiny frozen AST nodes and evaluated by walking them.

Reference paths::

    context.x.y[0]          the run's context
    steps.ID.output.a[0].b  a step's output (ID may contain '-')
    memory.KEY.field        a value saved with ``save_as: KEY``
    KEY.field               the same, written bare
    input.x / output.y      only in rollback args: the step's resolved input / its output

Templates: ``"{{ ref }}"`` alone keeps the value's type; ``"Hi {{ ref }}!"`` interpolates
text (strings as they are, other values as JSON).

Conditions (``when:``)::

    expr := or ;  or := and ('or' and)* ;  and := not ('and' not)* ;  not := 'not' not | cmp
    cmp  := atom (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') atom)?
    atom := number | 'string' | "string" | true | false | null | [atom, ...] | (expr)
          | ref | {{ ref }}
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from chainlab._text import did_you_mean, int_digits_limit, safe_repr

__all__ = [
    "ROOTS",
    "Expr",
    "Ref",
    "RefError",
    "Template",
    "TemplateSyntaxError",
    "evaluate",
    "is_template",
    "iter_refs",
    "parse_condition",
    "parse_template",
    "render_value",
]

ROOTS = ("context", "steps", "memory", "input", "output")
_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null", "none"}
_KEY_RE = re.compile(r"[A-Za-z0-9_\-]+")
_IDENT_START = re.compile(r"[A-Za-z_]")


class TemplateSyntaxError(ValueError):
    """A template or condition does not parse. ``.pos`` is the 0-based offset."""

    def __init__(self, message: str, source: str, pos: int):
        self.source = source
        self.pos = pos
        super().__init__(f"{message} at position {pos} in {safe_repr(source, 200)}")


class RefError(LookupError):
    """A reference does not resolve at run time (missing key, index out of range...)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """A parsed reference. ``target`` is the step id (``steps``) or memory key (``memory``)."""

    root: Literal["context", "steps", "memory", "input", "output"]
    target: str | None
    path: tuple[str | int, ...]
    source: str

    def __str__(self) -> str:
        return self.source


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed string: literal text and references in order."""

    parts: tuple[str | Ref, ...]
    source: str
    refs: tuple[Ref, ...] = ()

    @property
    def whole(self) -> Ref | None:
        """The reference when the string is exactly one reference (type-preserving)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Ref):
            return self.parts[0]
        return None

    def render(self, resolve: Callable[[Ref], Any]) -> Any:
        whole = self.whole
        if whole is not None:
            return resolve(whole)
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                value = resolve(part)
                out.append(value if isinstance(value, str) else json.dumps(value, default=str))
        return "".join(out)


# --------------------------------------------------------------------------- parsing


class _Cursor:
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


def _parse_path(cur: _Cursor) -> Ref:
    """Parse ``root(.key|[int]|['key'])*`` at the cursor (no surrounding whitespace)."""
    start = cur.pos
    m = _KEY_RE.match(cur.src, cur.pos)
    if not m or not _IDENT_START.match(cur.src, cur.pos):
        raise cur.fail("expected a reference such as context.x or steps.ID.output")
    head = m.group()
    cur.pos = m.end()
    segments: list[str | int] = []
    while not cur.at_end():
        ch = cur.src[cur.pos]
        if ch == ".":
            cur.pos += 1
            m = _KEY_RE.match(cur.src, cur.pos)
            if not m:
                raise cur.fail("expected a key after '.'")
            segments.append(m.group())
            cur.pos = m.end()
        elif ch == "[":
            cur.pos += 1
            cur.skip_ws()
            m = re.compile(r"-?\d+").match(cur.src, cur.pos)
            if m:
                segments.append(_int(m.group(), cur.src, m.start()))
                cur.pos = m.end()
            elif cur.peek("'") or cur.peek('"'):
                segments.append(_parse_string(cur))
            else:
                raise cur.fail("expected an index or a quoted key inside [...]")
            cur.skip_ws()
            if not cur.peek("]"):
                raise cur.fail("expected ']'")
            cur.pos += 1
        else:
            break
    return _make_ref(head, segments, cur.src[start : cur.pos], cur, start)


def _int(digits: str, source: str, pos: int) -> int:
    """``int(digits)``; a number longer than Python's int-to-str limit is a syntax error
    here, not a ValueError from deep inside the parser."""
    if len(digits.lstrip("-")) > int_digits_limit():
        raise TemplateSyntaxError(
            f"a number may have at most {int_digits_limit()} digits", source, pos
        )
    return int(digits)


def _make_ref(head: str, segments: list[str | int], source: str, cur: _Cursor, start: int) -> Ref:
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


def _parse_string(cur: _Cursor) -> str:
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


def _parse_braced_ref(cur: _Cursor) -> Ref:
    """Parse ``{{ ref }}`` with the cursor on the opening braces."""
    cur.pos += 2
    cur.skip_ws()
    if cur.peek("}}"):
        raise cur.fail("empty reference '{{ }}'")
    ref = _parse_path(cur)
    cur.skip_ws()
    if not cur.peek("}}"):
        raise cur.fail("expected '}}' to close the reference")
    cur.pos += 2
    return ref


def is_template(value: object) -> bool:
    """True for a string that contains a reference opener."""
    return isinstance(value, str) and "{{" in value


@functools.lru_cache(maxsize=65536)
def parse_template(text: str) -> Template:
    """Parse a string with ``{{ ref }}`` parts. Raises :class:`TemplateSyntaxError`.
    Cached: templates are immutable and a plan's strings are parsed by validation, the
    graph and the runtime."""
    parts: list[str | Ref] = []
    cur = _Cursor(text)
    literal_start = 0
    while True:
        idx = text.find("{{", cur.pos)
        if idx < 0:
            break
        if idx > literal_start:
            parts.append(text[literal_start:idx])
        cur.pos = idx
        parts.append(_parse_braced_ref(cur))
        literal_start = cur.pos
    if literal_start < len(text):
        parts.append(text[literal_start:])
    return Template(tuple(parts), text, tuple(p for p in parts if isinstance(p, Ref)))


# --------------------------------------------------------------------------- conditions


@dataclass(frozen=True, slots=True)
class Lit:
    value: Any


@dataclass(frozen=True, slots=True)
class ListExpr:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class RefExpr:
    ref: Ref


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: Literal["and", "or"]
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Cmp:
    op: str
    left: Expr
    right: Expr


Expr: TypeAlias = Lit | ListExpr | RefExpr | Not | BoolOp | Cmp
_CMP_OPS = ("==", "!=", "<=", ">=", "<", ">")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _word_at(cur: _Cursor, word: str) -> bool:
    end = cur.pos + len(word)
    return cur.src[cur.pos : end].lower() == word and (
        end >= len(cur.src) or not _KEY_RE.match(cur.src[end])
    )


class _ConditionParser:
    def __init__(self, text: str):
        self.cur = _Cursor(text)

    def parse(self) -> Expr:
        self.cur.skip_ws()
        if self.cur.at_end():
            raise self.cur.fail("empty condition")
        expr = self.or_()
        self.cur.skip_ws()
        if not self.cur.at_end():
            raise self.cur.fail("unexpected text")
        return expr

    def or_(self) -> Expr:
        left = self.and_()
        while True:
            self.cur.skip_ws()
            if not _word_at(self.cur, "or"):
                return left
            self.cur.pos += 2
            left = BoolOp("or", left, self.and_())

    def and_(self) -> Expr:
        left = self.not_()
        while True:
            self.cur.skip_ws()
            if not _word_at(self.cur, "and"):
                return left
            self.cur.pos += 3
            left = BoolOp("and", left, self.not_())

    def not_(self) -> Expr:
        self.cur.skip_ws()
        if _word_at(self.cur, "not"):
            self.cur.pos += 3
            return Not(self.not_())
        return self.cmp()

    def cmp(self) -> Expr:
        left = self.atom()
        self.cur.skip_ws()
        cur = self.cur
        for op in _CMP_OPS:
            if cur.peek(op):
                cur.pos += len(op)
                return Cmp(op, left, self.atom())
        if _word_at(cur, "in"):
            cur.pos += 2
            return Cmp("in", left, self.atom())
        if _word_at(cur, "not"):
            save = cur.pos
            cur.pos += 3
            cur.skip_ws()
            if _word_at(cur, "in"):
                cur.pos += 2
                return Cmp("not in", left, self.atom())
            cur.pos = save
        return left

    def atom(self) -> Expr:
        cur = self.cur
        cur.skip_ws()
        if cur.at_end():
            raise cur.fail("expected a value")
        ch = cur.src[cur.pos]
        if cur.peek("{{"):
            return RefExpr(_parse_braced_ref(cur))
        if ch == "(":
            cur.pos += 1
            inner = self.or_()
            cur.skip_ws()
            if not cur.peek(")"):
                raise cur.fail("expected ')'")
            cur.pos += 1
            return inner
        if ch == "[":
            cur.pos += 1
            items: list[Expr] = []
            cur.skip_ws()
            if cur.peek("]"):
                cur.pos += 1
                return ListExpr(())
            while True:
                items.append(self.atom())
                cur.skip_ws()
                if cur.peek(","):
                    cur.pos += 1
                    continue
                if cur.peek("]"):
                    cur.pos += 1
                    return ListExpr(tuple(items))
                raise cur.fail("expected ',' or ']'")
        if ch in "'\"":
            return Lit(_parse_string(cur))
        m = _NUMBER.match(cur.src, cur.pos)
        if m and (ch.isdigit() or ch == "-"):
            cur.pos = m.end()
            text = m.group()
            return Lit(
                float(text) if any(c in text for c in ".eE") else _int(text, cur.src, m.start())
            )
        for word, value in (("true", True), ("false", False), ("null", None), ("none", None)):
            if _word_at(cur, word):
                cur.pos += len(word)
                return Lit(value)
        if _IDENT_START.match(ch):
            return RefExpr(_parse_path(cur))
        raise cur.fail(f"unexpected character {ch!r}")


@functools.lru_cache(maxsize=16384)
def parse_condition(text: str) -> Expr:
    """Parse a ``when:`` condition. Raises :class:`TemplateSyntaxError`."""
    try:
        return _ConditionParser(text).parse()
    except RecursionError:  # the parser recurses per '(' / 'not' / '['
        raise TemplateSyntaxError("condition is nested too deeply", text, 0) from None


def iter_refs(expr: Expr) -> Iterator[Ref]:
    """Every reference in a condition, left to right."""
    if isinstance(expr, RefExpr):
        yield expr.ref
    elif isinstance(expr, Not):
        yield from iter_refs(expr.operand)
    elif isinstance(expr, BoolOp | Cmp):
        yield from iter_refs(expr.left)
        yield from iter_refs(expr.right)
    elif isinstance(expr, ListExpr):
        for item in expr.items:
            yield from iter_refs(item)


def evaluate(expr: Expr, resolve: Callable[[Ref], Any]) -> Any:
    """Evaluate a condition. Comparing values that cannot be compared raises ``TypeError``."""
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, RefExpr):
        return resolve(expr.ref)
    if isinstance(expr, Not):
        return not evaluate(expr.operand, resolve)
    if isinstance(expr, BoolOp):
        left = evaluate(expr.left, resolve)
        if expr.op == "and":
            return left and evaluate(expr.right, resolve)
        return left or evaluate(expr.right, resolve)
    if isinstance(expr, ListExpr):
        return [evaluate(i, resolve) for i in expr.items]
    left, right = evaluate(expr.left, resolve), evaluate(expr.right, resolve)
    return _compare(expr.op, left, right)


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op in ("in", "not in"):
        if not isinstance(right, list | dict | str):
            raise TypeError(
                f"'{op}' needs a list, object or string on the right, got {safe_repr(right)}"
            )
        if isinstance(right, str) and not isinstance(left, str):
            raise TypeError(
                f"'{op}' on a string needs a string on the left, got {safe_repr(left)}"
            )
        found = left in right
        return found if op == "in" else not found
    numeric = (int, float)
    comparable = (
        isinstance(left, numeric)
        and isinstance(right, numeric)
        and not isinstance(left, bool)
        and not isinstance(right, bool)
    ) or (isinstance(left, str) and isinstance(right, str))
    if not comparable:
        raise TypeError(f"cannot compare {safe_repr(left)} {op} {safe_repr(right)}")
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def render_value(value: Any, resolve: Callable[[Ref], Any]) -> Any:
    """Resolve every template inside a JSON value (dicts and lists walked recursively)."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        return parse_template(value).render(resolve)
    if isinstance(value, dict):
        return {k: render_value(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, resolve) for v in value]
    return value


def walk_path(value: Any, path: tuple[str | int, ...], source: str) -> Any:
    """Follow ``path`` into ``value``; a missing key or index raises :class:`RefError`."""
    for depth, seg in enumerate(path):
        if isinstance(seg, int):
            if not isinstance(value, list):
                raise RefError(f"{source}: cannot index {_kind(value)} with [{seg}]")
            if not -len(value) <= seg < len(value):
                raise RefError(f"{source}: index [{seg}] out of range (length {len(value)})")
            value = value[seg]
        else:
            if not isinstance(value, dict):
                done = ".".join(str(s) for s in path[:depth]) or "the value"
                raise RefError(
                    f"{source}: {done} is {_kind(value)}, it has no key {safe_repr(seg)}"
                )
            if seg not in value:
                raise RefError(f"{source}: no key {safe_repr(seg)}{did_you_mean(seg, value)}")
            value = value[seg]
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), f"a {type(value).__name__}"
    )
