"""How a drawn step is named, stably: its Graphviz node name (a repeated step id gets one node
per step, :func:`occurrence`) and the SVG element id a view addresses it by
(:func:`element_id`: the view's scope + the escaped step id). The same input always gives the
same names.
"""

from __future__ import annotations

__all__ = ["element_id", "escape_id", "occurrence", "step_of"]


def escape_id(step_id: str) -> str:
    """A step id as a CSS/XML-safe identifier fragment, injective and readable:
    letters, digits and ``-`` stay, ``_`` becomes ``__``, anything else ``_<hex>_``
    (``parent/child`` -> ``parent_2f_child``)."""
    if step_id.isascii() and step_id.replace("-", "a").isalnum():
        return step_id  # (nothing to escape: most ids, and a 3,332-step chain's all)
    out = []
    for c in step_id:
        if c.isascii() and (c.isalnum() or c == "-"):
            out.append(c)
        elif c == "_":
            out.append("__")
        else:
            out.append(f"_{ord(c):x}_")
    return "".join(out)


def occurrence(step_id: str, n: int) -> str:
    """The drawn name of the ``n``-th step (from 2) with ``step_id`` when a plan repeats an
    id: ``step_id#n`` ('#' is never part of a valid step id; the first keeps its id). Every
    repeat gets its own node, marked as a problem, instead of Graphviz merging them."""
    return f"{step_id}#{n}"


def step_of(name: str) -> str:
    """The step id of a drawn name (:func:`occurrence` undone)."""
    head, sep, tail = name.rpartition("#")
    return head if sep and tail.isdigit() else name


def element_id(scope: str, step_id: str) -> str:
    """The SVG element id of a step's node (or sub-chain cluster) in the view ``scope``."""
    return f"{scope}-n-{escape_id(step_id)}"
