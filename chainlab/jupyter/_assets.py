"""Front-end assets of the notebook widgets (the CSS; the ES modules of the run widget's DAG
and of the designer's canvas, each after the viewport they share), read from disk, never
fetched. Their sources are ``widgets/`` at the repository's top
(``widgets/README.md``): the wheel carries them inside the package, at
``chainlab/_widgets/`` (``pyproject.toml``, ``force-include``); a source checkout, and so an
editable install, reads ``widgets/`` itself. :func:`asset_dir` finds whichever is there.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["ASSET_DIRS", "asset_dir", "badge_css", "css", "dag_js", "designer_js", "style_tag"]

_PACKAGE = Path(__file__).resolve().parents[1]  # chainlab/
#: where the assets are looked for, in order: inside the installed package (a wheel), then
#: the checkout's widgets/ next to the package (a source tree, an editable install)
ASSET_DIRS = (_PACKAGE / "_widgets", _PACKAGE.parent / "widgets")
_FILES = ("chainlab.css", "dagview.js", "rundag.js", "designer.js")


def asset_dir() -> Path:
    """The directory holding the assets. Raises FileNotFoundError naming where it looked."""
    for candidate in ASSET_DIRS:
        if all((candidate / name).is_file() for name in _FILES):
            return candidate
    raise FileNotFoundError(
        f"chainlab's widget assets are missing: no {' and '.join(_FILES)} in "
        f"{' or '.join(str(d) for d in ASSET_DIRS)}; reinstall chainlab")


@functools.cache
def css() -> str:
    """The widgets' stylesheet (every rule is scoped under a ``cl-`` class)."""
    return (asset_dir() / "chainlab.css").read_text(encoding="utf-8")


def _read(name: str) -> str:
    return (asset_dir() / name).read_text(encoding="utf-8")


@functools.cache
def dag_js() -> str:
    """The run widget's live DAG, an anywidget ES module (``dagview.js``, the viewport,
    then ``rundag.js``)."""
    return _read("dagview.js") + "\n" + _read("rundag.js")


@functools.cache
def designer_js() -> str:
    """The chain designer's clickable DAG, an anywidget ES module (``dagview.js``, the
    viewport, then ``designer.js``)."""
    return _read("dagview.js") + "\n" + _read("designer.js")


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
    runs = {"queued": "pending", "running": "running", "paused": "ready",
            "suspended": "waiting_confirmation",
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
