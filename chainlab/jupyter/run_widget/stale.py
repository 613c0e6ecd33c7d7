"""The line a run widget shows once its kernel session has ended (issue 29 item 10).

After a kernel restart, or in a reopened notebook whose widget state was saved, an old
widget no longer reaches its run. The note is in every run widget from the start, hidden by
the CSS (``widgets/``) while the widget's kernel is connected; once the front end marks the
views ``jupyter-widgets-disconnected`` it shows instead of dead buttons, with the commands
that reattach."""

from __future__ import annotations

import html

import ipywidgets as W

__all__ = ["stale_html", "stale_note"]


def stale_html(run_id: str) -> str:
    """The one line a run widget shows once its kernel session has ended (a restart, a
    reopened notebook): what happened and the commands that reattach to the run."""
    rid = html.escape(run_id)
    return ("<div class=\"cl-stale-line\">This run widget belongs to a kernel session that "
            "has ended, so its buttons no longer reach the run. Reattach: "
            f"<code>%chain show {rid}</code> (or <code>%chain resume {rid}</code> to drive "
            "it on)</div>")


def stale_note(run_id: str) -> W.HTML:
    """The note of ``run_id``'s widget (class ``cl-stale``: hidden while connected)."""
    note = W.HTML(stale_html(run_id))
    note.add_class("cl-stale")
    return note
