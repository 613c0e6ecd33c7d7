"""Front-end assets of the notebook widgets (CSS), read from the package, never fetched:
they live in ``chainlab/jupyter/assets/`` and ship inside the wheel like any package file.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["asset_dir", "badge_css", "css", "style_tag"]

_ASSETS = Path(__file__).resolve().parent / "assets"


def asset_dir() -> Path:
    """The directory holding the assets. Raises FileNotFoundError naming it."""
    if not (_ASSETS / "chainlab.css").is_file():
        raise FileNotFoundError(
            f"chainlab's widget assets are missing: no chainlab.css in {_ASSETS}; "
            "reinstall chainlab")
    return _ASSETS


@functools.cache
def css() -> str:
    """The widgets' stylesheet (every rule is scoped under a ``cl-`` class)."""
    return (asset_dir() / "chainlab.css").read_text(encoding="utf-8")


@functools.cache
def badge_css() -> str:
    """Badge colours for every step and run status, from the one palette
    (``chainlab.render.style.STATUS_STYLE``); "" if that module is unavailable."""
    try:
        from chainlab.render.style import STATUS_STYLE
    except ImportError:
        return ""
    rules = [f".cl-s-{status}{{background:{s.fill};border-color:{s.stroke};color:{s.text}}}"
             for status, s in STATUS_STYLE.items()]
    runs = {"running": "running", "paused": "ready", "suspended": "waiting_confirmation",
            "succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled",
            "compensating": "compensating", "rolled_back": "compensated",
            "rollback_failed": "compensation_failed"}
    rules += [f".cl-r-{run}{{background:{STATUS_STYLE[step].fill};"
              f"border-color:{STATUS_STYLE[step].stroke};color:{STATUS_STYLE[step].text}}}"
              for run, step in runs.items()]
    return "\n".join(rules)


def style_tag() -> str:
    """``<style>`` holding :func:`css` and :func:`badge_css`, for HTML outputs and the
    widgets' style holder."""
    return f"<style>{css()}\n{badge_css()}</style>"
