"""The root of chainlab's exception tree, :class:`ChainlabError`, alone at the bottom.

Its public home is :mod:`chainlab.errors`, which draws the whole tree and re-exports it.
The root sits in a module of its own so that a branch of the tree can live in a private
module too (:mod:`chainlab._store_errors`): that branch and :mod:`chainlab.errors` both
derive from the root, and neither imports the other back (no import cycle).
"""

from __future__ import annotations

__all__ = ["ChainlabError"]


class ChainlabError(Exception):
    """Root of every error chainlab raises on purpose."""
