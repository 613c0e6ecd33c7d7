"""Small text helpers shared by error messages (stdlib only)."""

from __future__ import annotations

import difflib
import functools
import reprlib
import sys
from collections.abc import Iterable
from typing import Any

# CPython refuses int <-> str conversions beyond this many digits (sys.get_int_max_str_digits,
# 4300 by default): such an integer cannot be written as JSON or YAML, nor shown in a message.
INT_DIGITS_LIMIT = 4300

_KNOWN_LISTED = 8  # list the known names when there are at most this many


def did_you_mean(word: object, candidates: Iterable[str], *, list_known: bool = False) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest candidate, or a list of the known
    names when there are few, or ``""``. With ``list_known``, a short list of the known
    names follows the suggestion too (``"; did you mean 'x'? (known: x, y)"``)."""
    names = sorted({c for c in candidates if isinstance(c, str)})
    short_list = f" (known: {', '.join(names)})" if 0 < len(names) <= _KNOWN_LISTED else ""
    if not isinstance(word, str):
        return short_list if list_known else ""
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?{short_list if list_known else ''}"
    return short_list


def int_digits_limit() -> int:
    """The most digits an integer in a plan may have (the interpreter's limit, if lower)."""
    limit = sys.get_int_max_str_digits()
    return min(limit, INT_DIGITS_LIMIT) if limit else INT_DIGITS_LIMIT


@functools.lru_cache(maxsize=4)
def _ten_to(n: int) -> int:
    return 10**n


def int_too_long(value: int) -> bool:
    """True when ``value`` has more digits than :func:`int_digits_limit` (``str()`` would
    raise ValueError). Cheap: no conversion to text."""
    limit = int_digits_limit()
    magnitude = abs(value)
    # a number of b bits has at most b*log10(2) + 1 digits: most ints stop here
    if magnitude.bit_length() * 0.30103 + 1 <= limit:
        return False
    return magnitude >= _ten_to(limit)


class _SafeRepr(reprlib.Repr):
    """reprlib with integers too long for ``str()`` shown as a placeholder."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 4
        self.maxstring = self.maxother = self.maxlong = 80
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 12

    def repr_int(self, x: int, level: int) -> str:
        if int_too_long(x):
            return f"<int with more than {int_digits_limit()} digits>"
        return super().repr_int(x, level)


_SAFE_REPR = _SafeRepr()


def shorten(text: str, width: int = 60) -> str:
    """``text`` cut to ``width`` characters, ``...`` marking the cut."""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def safe_repr(value: Any, width: int = 60) -> str:
    """``repr(value)`` shortened to ``width`` characters, for messages about user values.

    Never raises: an integer beyond Python's int-to-str digit limit (alone or inside a
    container) or an object whose ``__repr__`` fails is shown by a placeholder instead.
    """
    try:
        text = repr(value)
    except Exception:  # ValueError (digit limit), RecursionError, a broken __repr__
        text = _SAFE_REPR.repr(value)
    return shorten(text, width)
