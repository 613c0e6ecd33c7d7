"""Small text helpers shared by error messages (stdlib only)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest candidate, or a list of the known
    names when there are few, or ``""``."""
    names = sorted({c for c in candidates if isinstance(c, str)})
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    if 0 < len(names) <= 8:
        return f" (known: {', '.join(names)})"
    return ""
