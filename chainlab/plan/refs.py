"""References, templates and conditions: a small grammar of our own.

Nothing here ever reaches ``eval``/``exec`` or a template engine that can run code: the
input is parsed into tiny frozen AST nodes and evaluated by walking them.

Reference paths (parsed in :mod:`chainlab.plan.syntax`)::

    context.x.y[0]          the run's context
    steps.ID.output.a[0].b  a step's output (ID may contain '-')
    memory.KEY.field        a value saved with ``save_as: KEY``
    KEY.field               the same, written bare
    input.x / output.y      only in rollback args: the step's resolved input / its output

Templates (here): ``"{{ ref }}"`` alone keeps the value's type; ``"Hi {{ ref }}!"``
interpolates text (strings as they are, other values as JSON).

Conditions (``when:``, :mod:`chainlab.plan.conditions`)::

    expr := or ;  or := and ('or' and)* ;  and := not ('and' not)* ;  not := 'not' not | cmp
    cmp  := atom (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') atom)?
    atom := number | 'string' | "string" | true | false | null | [atom, ...] | (expr)
          | ref | {{ ref }}

This module is the grammar's one entry point: the names of the other two are re-exported.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chainlab._text import did_you_mean, safe_repr
from chainlab.plan.conditions import Expr, evaluate, iter_refs, parse_condition
from chainlab.plan.syntax import (
    Cursor,
    Ref,
    TemplateSyntaxError,
    parse_braced_ref,
    parse_whole_path,
)

__all__ = [
    "ROOTS",
    "Expr",
    "Ref",
    "RefError",
    "Template",
    "TemplateSyntaxError",
    "evaluate",
    "has_template",
    "is_local",
    "is_template",
    "iter_refs",
    "parse_condition",
    "parse_template",
    "render_value",
    "walk_path",
]

ROOTS = ("context", "steps", "memory", "input", "output")


class RefError(LookupError):
    """A reference does not resolve at run time (missing key, index out of range...)."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed string: literal text and references in order."""

    parts: tuple[str | Ref, ...]
    source: str
    refs: tuple[Ref, ...] = ()
    #: the reference when the string is exactly one reference (type-preserving); a field, not
    #: a property: every call's args read it
    whole: Ref | None = None

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


def is_local(ref: Ref, names: tuple[str, ...]) -> bool:
    """Whether ``ref`` reads a name bound per instance of a ``for_each`` step (``names``:
    the step's item name and ``index``): a bare ``{{ item.x }}`` or ``{{ index }}``, never
    ``{{ memory.item }}``, which names a memory key."""
    return (bool(names) and ref.root == "memory" and ref.target in names
            and not ref.source.startswith("memory."))


def is_template(value: object) -> bool:
    """True for a string that contains a reference opener."""
    return isinstance(value, str) and "{{" in value


def has_template(value: Any) -> bool:
    """True for a JSON value with a template anywhere inside (its strings, at any depth)."""
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, dict):
        return any(has_template(v) for v in value.values())
    if isinstance(value, list):
        return any(has_template(v) for v in value)
    return False


@functools.lru_cache(maxsize=65536)
def parse_template(text: str) -> Template:
    """Parse a string with ``{{ ref }}`` parts. Raises :class:`TemplateSyntaxError`.
    Cached: templates are immutable and a plan's strings are parsed by validation, the
    graph and the runtime."""
    whole = parse_whole_path(text)  # the usual case, in one step
    if whole is not None:
        return Template((whole,), text, (whole,), whole)
    parts: list[str | Ref] = []
    cur = Cursor(text)
    literal_start = 0
    while True:
        idx = text.find("{{", cur.pos)
        if idx < 0:
            break
        if idx > literal_start:
            parts.append(text[literal_start:idx])
        cur.pos = idx
        parts.append(parse_braced_ref(cur))
        literal_start = cur.pos
    if literal_start < len(text):
        parts.append(text[literal_start:])
    refs = tuple(p for p in parts if isinstance(p, Ref))
    return Template(tuple(parts), text, refs,
                    refs[0] if len(parts) == 1 and len(refs) == 1 else None)


def render_value(value: Any, resolve: Callable[[Ref], Any]) -> Any:
    """Resolve every template inside a JSON value (dicts and lists walked recursively: new
    containers, every other value as it is). Every step's args are rendered through here,
    most of them a reference or two in a dict or a list: one plain loop (no comprehension
    frame) that renders a container's strings in its own frame."""
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    elif isinstance(value, str):
        if "{{" not in value:
            return value
        items = (value,)
    else:
        return value
    out: list[Any] = []
    for item in items:
        cls = item.__class__
        if cls is str:
            if "{{" in item:
                template = parse_template(item)
                whole = template.whole
                item = resolve(whole) if whole is not None else template.render(resolve)
        elif cls not in _SCALARS:
            item = render_value(item, resolve)
        out.append(item)
    if items is value:
        return out
    return out[0] if items.__class__ is tuple else dict(zip(value, out, strict=True))


_SCALARS = frozenset({int, float, bool, type(None)})  # (no template inside: kept as they are)


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
