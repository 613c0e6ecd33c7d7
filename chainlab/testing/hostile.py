"""Hostile JSON values: a hypothesis strategy to push through every door a value enters by
(DESIGN §20), and what a door must do with them.

    from hypothesis import given
    from chainlab.testing.hostile import hostile_json, refusal, same_json

    @given(hostile_json())
    def test_my_door(value):
        why = refusal(value)           # None: chainlab must take it as it is
        ...                            # a clear error when why is not None; else success,
        assert same_json(kept, value)  # and the value kept exactly (1 is not true nor 1.0)

:func:`hostile_json` mixes plain JSON with what broke doors before: lone surrogates in text
and in keys, NaN and infinities at any depth, integers over the digit limit, nesting past
:data:`~chainlab._json.MAX_DEPTH`, strings and totals past the size limits, and values that
are fine but easy to change by mistake (``true`` beside ``1``, ``2.0`` beside ``2``,
``-0.0``, ``1e308``, keys such as ``""``, ``"a.b"`` or ``"[0]"``, NUL and emoji).

:func:`refusal` says whether a value must be refused, worked out independently of the gate
(the stdlib's JSON encoder, UTF-8 and a depth and size count), so a test is not the gate
checking itself. :func:`json_text` writes any of these values as JSON text, the hostile ones
too (``NaN``, ``\\ud800`` escapes, 5,000-digit integers), for doors that read text: an HTTP
body, a query value. Needs ``hypothesis`` (``pip install "chainlab[test]"``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from typing import Any

from chainlab._json import MAX_DEPTH, MAX_STRING_CHARS, MAX_VALUE_SIZE
from chainlab._text import int_digits_limit
from chainlab.errors import MissingExtraError

try:
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("hypothesis", "test", "the hostile JSON strategy") from None

__all__ = ["hostile_json", "hostile_numbers", "hostile_text", "json_text", "refusal",
           "same_json", "text_refusal"]

_SURROGATES = ["\ud800", "\udfff", "\udc00x", "a\ud83d", "\ud83d\ude00"]  # last: a "pair"
_TRICKY_TEXT = ["", " ", "\x00", "a.b", "[0]", "{{ context.x }}", "é", "😀", "\u2028",
                "²", "١٢", "true", "null", "-0", "1e999", "\ufeff"]


def _huge_int(digits: int) -> int:
    return 10 ** (digits - 1)


def hostile_numbers() -> st.SearchStrategy[Any]:
    """Numbers: ordinary ones and every kind a door must refuse or keep exactly."""
    limit = int_digits_limit()
    return st.one_of(
        st.integers(-(10**18), 10**18),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([0, -0.0, 1.0, 2, 2.0, 1e308, -1e308, 5e-324, 2**53 + 1, -(2**63),
                         float("nan"), float("inf"), float("-inf"), True, False]),
        st.sampled_from([limit, limit + 1, 5000]).map(_huge_int),
        st.sampled_from([limit, limit + 1]).map(lambda d: -_huge_int(d)),
    )


def hostile_text(*, max_size: int = 12) -> st.SearchStrategy[str]:
    """Text: ordinary, tricky, and with surrogate code points (lone, or two that look like
    a pair: neither is Unicode text)."""
    return st.one_of(
        st.text(max_size=max_size),
        st.sampled_from(_TRICKY_TEXT),
        st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), st.sampled_from(_SURROGATES),
                  st.text(max_size=4)),
    )


def _nest(depth: int, leaf: Any, as_list: bool) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if as_list or i % 2 else {"k": value}
    return value


def _large() -> st.SearchStrategy[Any]:
    """Values past the size limits; cheap to make (one long string shared many times)."""
    long = "x" * (MAX_STRING_CHARS + 1)
    chunk = "y" * (MAX_STRING_CHARS // 2)
    many = MAX_VALUE_SIZE // len(chunk) + 1
    return st.sampled_from([long, [chunk] * many, {"a": "z" * MAX_STRING_CHARS},
                            {long[:MAX_STRING_CHARS + 1]: 1}])


def hostile_json(*, max_leaves: int = 12, large: bool = True) -> st.SearchStrategy[Any]:
    """JSON-shaped values, hostile ones among them (see the module docstring). ``large``:
    include values past the size limits (megabytes each)."""
    scalars = st.none() | st.booleans() | hostile_numbers() | hostile_text()
    keys = hostile_text(max_size=8)
    tree = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=max_leaves,
    )
    deep = st.builds(_nest, st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3) | st.just(1000),
                     scalars, st.booleans())
    parts = [tree, tree, tree, deep]
    if large:
        parts.append(_large())
    return st.one_of(*parts)


# ---------------------------------------------------------------------------- the oracle


def refusal(value: Any) -> str | None:
    """Why a door must refuse ``value`` (None: it must take it, unchanged). Worked out
    without the gate: the stdlib's JSON encoder (NaN, infinities, integers too long to
    write), UTF-8 (surrogates), a depth count and a size count (strings and keys by their
    characters, anything else as 1)."""
    depth, size, longest = _measure(value)
    if depth > MAX_DEPTH:
        return f"nested {depth} deep"
    if longest > MAX_STRING_CHARS:
        return f"a string of {longest} characters"
    if size > MAX_VALUE_SIZE:
        return f"a size of {size}"
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "surrogates"
    except ValueError as exc:  # NaN/inf, an integer too long to write
        return str(exc)[:80]
    except TypeError as exc:  # a key that is not a string, an object that is not JSON
        return str(exc)[:80]
    return None


def args_refusal(value: Any) -> str | None:
    """:func:`refusal` for a value written as a step's args, where ``{{`` in a string (not a
    key) opens a template: the plan language refuses it unless it names something the run
    has, and the hostile strategies only make templates of names no test defines
    (``{{ context.x }}``) or broken ones (``a{{b``)."""
    why = refusal(value)
    if why is None and any("{{" in s for s in _strings(value)):
        return "a template of nothing the run has"
    return why


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def text_refusal(text: str) -> str | None:
    """:func:`refusal` for JSON text, as a door that reads text sees it: an escaped
    surrogate PAIR (``\\ud83d\\ude00``) is one character there, text that does not parse
    (an integer too long to read, nesting past the parser's limit) is refused."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"does not parse: {str(exc)[:80]}"
    return refusal(value)


def _measure(value: Any) -> tuple[int, int, int]:
    """(depth, size, longest string) without recursion (a value 200,000 deep is fine)."""
    depth = size = longest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list | tuple):
            depth = max(depth, level + 1)
            size += 1
            if isinstance(item, dict):
                for k, v in item.items():
                    if isinstance(k, str):
                        size += len(k)
                        longest = max(longest, len(k))
                    stack.append((v, level + 1))
            else:
                stack.extend((v, level + 1) for v in item)
        elif isinstance(item, str):
            size += len(item)
            longest = max(longest, len(item))
        else:
            size += 1
    return depth, size, longest


def same_json(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same JSON value, types included: ``1`` is neither
    ``true`` nor ``1.0``, ``-0.0`` is not ``0.0``, and lists and tuples are both arrays."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        return (type(a) is type(b) and (a == b or (math.isnan(a) and math.isnan(b)))
                and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, int) or isinstance(b, int):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def json_text(value: Any) -> str:
    """``value`` as JSON text, whatever it holds: ``NaN``/``Infinity`` literals (what
    Python's encoder writes), surrogates as ``\\ud800`` escapes, integers of any length,
    nesting of any depth. What a hostile client sends."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:  # (no recursion: 200,000 deep is fine)
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            out.append("{")
            parts: list[Any] = []
            for i, (k, v) in enumerate(item.items()):
                parts += [_Raw("," if i else ""), _Raw(json.dumps(str(k)) + ":"), v]
            stack.append(_Raw("}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list | tuple):
            out.append("[")
            parts = []
            for i, v in enumerate(item):
                parts += [_Raw("," if i else ""), v]
            stack.append(_Raw("]"))
            stack.extend(reversed(parts))
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(_digits(item))
        else:
            out.append(json.dumps(item))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _digits(n: int) -> str:
    old = sys.get_int_max_str_digits()
    if old == 0 or abs(n) < 10**1000:
        return str(n)
    sys.set_int_max_str_digits(0)
    try:
        return str(n)
    finally:
        sys.set_int_max_str_digits(old)
