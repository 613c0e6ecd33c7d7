"""How wide a line of text is drawn in the DAG's font (DejaVu Sans), without a font file.

Graphviz measures labels with the installed font (the system ``dot``) or with a built-in
table (the WebAssembly build); chainlab's own layout (:mod:`chainlab.render.layered`) sizes
its boxes from this table: the advance widths of DejaVu Sans Book, in 1/2048 em, for
printable ASCII, Latin-1 and the marks chainlab draws (read from ``DejaVuSans.ttf`` with
fontTools: ``TTFont(path)["hmtx"]`` of ``getBestCmap()[ord(c)]``). A character not in it
counts as a wide letter (an East Asian wide or full-width one as a whole em), so a box is
never narrower than its text.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

__all__ = ["text_width"]

_EM = 2048
_ASCII = (  # U+0020 .. U+007E
    "651 821 942 1716 1303 1946 1597 563 799 799 1024 1716 651 739 651 690 1303 1303 1303 "
    "1303 1303 1303 1303 1303 1303 1303 690 690 1716 1716 1716 1087 2048 1401 1405 1430 1577 "
    "1294 1178 1587 1540 604 604 1343 1141 1767 1532 1612 1235 1612 1423 1300 1251 1499 1401 "
    "2025 1403 1251 1403 799 690 799 1716 1024 1024 1255 1300 1126 1300 1260 721 1300 1298 "
    "569 569 1186 569 1995 1298 1253 1300 1300 842 1067 803 1298 1212 1675 1212 1212 1075 "
    "1303 690 1303 1716")
_LATIN1 = (  # U+00A0 .. U+00FF
    "651 821 1303 1303 1303 1303 690 1024 1024 2048 965 1253 1716 739 2048 1024 1024 1716 821 "
    "821 1024 1303 1303 651 1024 821 965 1253 1985 1985 1985 1087 1401 1401 1401 1401 1401 "
    "1401 1995 1430 1294 1294 1294 1294 604 604 604 604 1587 1532 1612 1612 1612 1612 1612 "
    "1716 1612 1499 1499 1499 1499 1251 1239 1290 1255 1255 1255 1255 1255 1255 2011 1126 "
    "1260 1260 1260 1260 569 569 569 569 1253 1298 1253 1253 1253 1253 1253 1716 1253 1298 "
    "1298 1298 1298 1212 1300 1212")
_MARKS = {
    "…": 2048, "↩": 1716, "↯": 1716, "↶": 1716, "↻": 1716, "⇢": 1716, "⇥": 1716, "⊘": 1716,
    "■": 1935, "▤": 1935, "▶": 1575, "◇": 1575, "○": 1787, "◔": 1787, "◷": 1787, "☐": 1836,
    "⚠": 1836, "⚡": 1438, "✓": 1716, "✗": 1716, "✦": 1716, "→": 1716,
    "\u2014": 2048, "\u2013": 1024, "\u2018": 651, "\u2019": 651, "\u201c": 1061,
    "\u201d": 1061, "€": 1303, "≥": 1716, "≤": 1716,
}
_WIDTHS: dict[str, int] = {
    **{chr(0x20 + i): int(w) for i, w in enumerate(_ASCII.split())},
    **{chr(0xA0 + i): int(w) for i, w in enumerate(_LATIN1.split())},
    **_MARKS,
}
_OTHER = 1612  # a wide letter (O)


@lru_cache(maxsize=4096)
def _units(text: str) -> int:
    total = 0
    for c in text:
        w = _WIDTHS.get(c)
        if w is None:
            w = _EM if unicodedata.east_asian_width(c) in ("W", "F") else (
                0 if unicodedata.combining(c) else _OTHER)
        total += w
    return total


def text_width(text: str, size: float) -> float:
    """The width in points of ``text`` set in DejaVu Sans at ``size`` points."""
    return _units(text) * size / _EM
