"""Conditions (``when:``): parsed into tiny frozen AST nodes and evaluated by walking them;
nothing ever reaches ``eval``/``exec``.

Grammar::

    expr := or ;  or := and ('or' and)* ;  and := not ('and' not)* ;  not := 'not' not | cmp
    cmp  := atom (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') atom)?
    atom := number | 'string' | "string" | true | false | null | [atom, ...] | (expr)
          | ref | {{ ref }}

References follow :mod:`chainlab.plan.syntax`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from chainlab._text import safe_repr
from chainlab.plan.syntax import (
    IDENT_START,
    KEY_RE,
    Cursor,
    Ref,
    TemplateSyntaxError,
    parse_braced_ref,
    parse_int,
    parse_path,
    parse_string,
)

__all__ = ["BoolOp", "Cmp", "Expr", "ListExpr", "Lit", "Not", "RefExpr", "evaluate", "iter_refs",
           "parse_condition"]


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


def _word_at(cur: Cursor, word: str) -> bool:
    end = cur.pos + len(word)
    return cur.src[cur.pos : end].lower() == word and (
        end >= len(cur.src) or not KEY_RE.match(cur.src[end])
    )


class _ConditionParser:
    def __init__(self, text: str):
        self.cur = Cursor(text)

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
            return RefExpr(parse_braced_ref(cur))
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
            return Lit(parse_string(cur))
        m = _NUMBER.match(cur.src, cur.pos)
        if m and (ch.isdigit() or ch == "-"):
            cur.pos = m.end()
            text = m.group()
            is_float = any(c in text for c in ".eE")
            return Lit(float(text) if is_float else parse_int(text, cur.src, m.start()))
        for word, value in (("true", True), ("false", False), ("null", None), ("none", None)):
            if _word_at(cur, word):
                cur.pos += len(word)
                return Lit(value)
        if IDENT_START.match(ch):
            return RefExpr(parse_path(cur))
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
