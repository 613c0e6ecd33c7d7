"""The designer's "Write cell": the ``%%chain NAME [--tools VAR]`` cell that defines the
draft without the widget, and how it gets into the notebook. With the clickable canvas the
front end inserts it below the designer's cell (``widgets/designer.js``; the clipboard where
cells cannot be inserted) and answers with a ``write_cell_done`` message; without it,
IPython puts it in the next input."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

import ipywidgets as W

from chainlab.tools import Toolbox, default_toolbox

__all__ = ["cell_text", "identifier", "reply_note", "toolbox_var", "write"]


def identifier(name: str) -> str:
    """``name`` made a Python identifier (``NAME`` of ``%%chain`` becomes a variable)."""
    ident = re.sub(r"\W+", "_", name).strip("_") or "draft"
    return f"chain_{ident}" if ident[0].isdigit() else ident


def toolbox_var(toolbox: Toolbox, user_ns: Mapping[str, Any]) -> str | None:
    """The notebook variable holding ``toolbox`` (None for the default toolbox, which
    ``%%chain`` uses without ``--tools``, or when no variable holds it)."""
    if toolbox is default_toolbox:
        return None
    names = sorted(k for k, v in user_ns.items() if v is toolbox and not k.startswith("_"))
    return names[0] if names else None


def cell_text(yaml_text: str, name: str, tools: str | None) -> str:
    """The cell: ``%%chain NAME [--tools VAR]`` and the YAML."""
    head = f"%%chain {name}" + (f" --tools {tools}" if tools else "")
    return f"{head}\n{yaml_text.rstrip()}\n"


def write(text: str, canvas: W.DOMWidget, model_id: str) -> str:
    """Have ``text`` inserted as a cell below the output of the widget ``model_id``: by
    the front end of a clickable ``canvas``, else as IPython's next input. Returns the note
    to show (HTML)."""
    if getattr(canvas, "clickable", False):
        canvas.send({"type": "write_cell", "text": text, "host": model_id})
        return "Writing a %%chain cell below the designer…"
    try:  # no front-end module: IPython can still put it in the next cell
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:  # pragma: no cover - IPython is in chainlab[jupyter]
        ip = None
    if ip is not None:
        ip.set_next_input(text, replace=False)
    return ("The cell text (run <code>designer.write_cell()</code> in a cell to insert "
            f'it):<pre class="cl-pre">{html.escape(text)}</pre>')


def reply_note(content: Any) -> tuple[str, bool] | None:
    """(note, is an error) for the front end's answer to :func:`write`; None for any other
    message."""
    if not isinstance(content, dict) or content.get("type") != "write_cell_done":
        return None
    how = content.get("how")
    if how == "inserted":
        return ("Inserted a <code>%%chain</code> cell below the designer: run it to define "
                "the chain without the widget.", False)
    if how == "replaced":
        return ("Replaced the <code>%%chain</code> cell the designer wrote before with the "
                "current draft.", False)
    if how == "clipboard":
        return ("This front end cannot insert cells: the <code>%%chain</code> cell was copied "
                "to the clipboard; paste it into a new cell.", False)
    return f"could not write the cell: {content.get('detail') or 'unknown reason'}", True
