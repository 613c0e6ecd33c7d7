"""Who lays a drawing out: Graphviz, or chainlab's own layered layout. The one place that
decides, for every picture (the live widget's DAG, a chain's or a run's ``_repr_mimebundle_``,
``chain_svg`` / ``run_svg``, the CLI's and the HTTP service's SVG).

Graphviz draws best what is small or irregular and what has frames (a sub-chain or an agent
step drawn around its steps); its layout grows steeply with the graph (a 3,332-step chain:
8.7 s, issue 49). chainlab's layered layout (:mod:`chainlab.render.layered`, drawn by
:mod:`chainlab.render.scene_svg` in Graphviz's own form) takes a few milliseconds per
hundred steps. So a drawing is laid out by chainlab when it has no frame, runs top to
bottom and either has at least :data:`LAYERED_FROM` nodes or holds a fan-out grid (a
regular shape, a block of rows either way); every other drawing by Graphviz.
``CHAINLAB_LAYOUT=graphviz`` or ``=layered`` forces one (``layered`` still leaves a drawing
with frames, a cycle or ``LR`` to Graphviz).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from chainlab.render.dot import Drawing

__all__ = ["LAYERED_FROM", "Layout", "layout_of", "layout_svg"]

#: the fewest nodes laid out by chainlab rather than Graphviz. Measured with
#: ``benchmarks/bench_first_open.py --only threshold`` (this 2-core machine, load 4-8):
#: Graphviz took 51 / 93 / 181 ms for 100 / 150 / 200 steps of bench_render's DAG, chainlab
#: 13 / 27 / 69 ms; from about 150 steps Graphviz passes 0.1 s, what
#: :data:`chainlab.render.svg.DISK_AFTER_S` already calls a slow layout
LAYERED_FROM = 150

Layout = Literal["auto", "graphviz", "layered"]


def _wanted(layout: Layout) -> Layout:
    if layout != "auto":
        if layout not in ("graphviz", "layered"):
            raise ValueError(f"layout={layout!r}: expected 'auto', 'graphviz' or 'layered'")
        return layout
    env = os.environ.get("CHAINLAB_LAYOUT", "").strip().lower()
    if env in ("", "auto"):
        return "auto"
    if env not in ("graphviz", "layered"):
        raise ValueError(f"CHAINLAB_LAYOUT={env!r}: expected 'graphviz', 'layered' or 'auto'")
    return env  # type: ignore[return-value]


def layout_of(drawing: Drawing, layout: Layout = "auto") -> Literal["graphviz", "layered"]:
    """Which layout :func:`layout_svg` uses for ``drawing`` (see the module docstring).
    Raises ValueError for an unknown ``layout`` or ``CHAINLAB_LAYOUT``."""
    scene = drawing.scene
    if scene.clusters or scene.rankdir != "TB" or not scene.shapes:
        return "graphviz"
    wanted = _wanted(layout)
    if wanted != "auto":
        return wanted
    return "layered" if len(scene.shapes) >= LAYERED_FROM or scene.grids else "graphviz"


def layout_svg(drawing: Drawing, *, backend: str = "auto", layout: Layout = "auto") -> str:
    """The drawing laid out, as SVG markup of Graphviz's form (:func:`~chainlab.render.to_svg`'s
    cleaning: no prolog, the classes ``cl-dag`` and the scope on the root).

    Raises GraphvizUnavailable / GraphvizError (a drawing Graphviz lays out), ValueError.
    """
    from chainlab.render.svg import to_svg

    if layout_of(drawing, layout) == "layered":
        from chainlab.render.scene_svg import scene_svg

        svg = scene_svg(drawing.scene, drawing.scope, drawing.scene.name)
        if svg is not None:  # (None: a cycle, which only Graphviz draws)
            return svg
    return to_svg(drawing.dot, backend=backend)  # type: ignore[arg-type]
