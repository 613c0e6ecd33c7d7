"""The static fallback a run's widget carries (issue 18): what nbconvert, GitHub and a
reopened notebook show where the live widget was.

The widget is displayed with a display id and a ``text/html`` picture of the run
(:func:`chainlab.render.display.run_html`: the DAG with statuses as SVG and a status table)
in an output of its own, right after the widget view's output (issue 29 item 7). When the run
settles (ends, or waits for a person) that output is replaced through ``update_display``, so
the saved notebook holds the last state.

Why two outputs: ``jupyter nbconvert --execute`` saves the widget state, and nbconvert then
renders an output's widget view instead of its ``text/html``; an exported widget view needs
require.js and the widget manager from a CDN, so offline it shows nothing. A picture in its
own output is rendered whatever happens to the widget view. Where the live widget shows, the
widget's stylesheet hides the picture next to it (``widgets/chainlab.css``: the rule is there
only once the widget has rendered, and it spares a widget whose kernel has gone). A run that
has not ended when the picture is drawn also gets one line saying what it waits for and the
commands that act on it (:func:`next_html`).

An update sent from the run's driver task would carry the parent header of the cell that
STARTED the run; nbclient (``jupyter nbconvert --execute``) keeps only messages of the cell
it is executing, so the update is sent with the kernel's latest parent instead. A run that
ends between two cells (the cell that started it is done, the next one not started yet)
would still be parented to a finished cell and dropped: the update is therefore sent once
more when the next cell starts (``pre_run_cell``), parented to that cell. Replacing an
output with the same picture twice changes nothing a person sees.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
from typing import TYPE_CHECKING, Any

from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus

if TYPE_CHECKING:
    from chainlab.runtime.runtime import Run

__all__ = ["next_html", "picture_bundle", "publish_update"]

_NEXT_STYLE = ("background:#fff4ce;color:#5c4400;border:1px solid #c9a400;border-radius:4px;"
               "padding:4px 8px;margin:4px 0;font-size:13px")
_WAITS = {StepStatus.WAITING_CONFIRMATION: "waits for approval",
          StepStatus.IN_DOUBT: "is in doubt (did its call take effect?)"}


def _next_text(run: Run) -> list[tuple[str, bool]]:
    """The pieces of :func:`next_html`, ``(text, is_code)``; empty for a run that ended."""
    status, rid = run.status, run.run_id
    if status in RUN_TERMINAL:
        return []
    waiting = [(s, st.status) for s, st in run.steps.items() if st.status in _WAITS]
    look = [(f"%chain show {rid}", True), (" shows where it is now.", False)]
    if status == RunStatus.SUSPENDED and waiting:
        said = [piece for step, st in waiting
                for piece in ((step, True), (f" {_WAITS[st]}", False), ("; ", False))][:-1]
        confirm = [s for s, st in waiting if st == StepStatus.WAITING_CONFIRMATION]
        also = ([(" or ", False), (f"%chain approve {rid} {confirm[0]}", True)] if confirm
                else [])
        return [("This run waits for a person: ", False), *said,
                (". To act on it, in a kernel that reaches its store: ", False),
                (f"%chain resume {rid}", True), (" (the widget's cards)", False), *also,
                ("; ", False), *look]
    return [(f"This picture was saved while the run was {status}; ", False), *look]


def next_html(run: Run) -> str:
    """One line under the picture of a run that has not ended: what it waits for and the
    commands that act on it (``%chain resume`` / ``%chain approve`` / ``%chain show``);
    "" once the run has ended. Inline style: an export carries no chainlab stylesheet."""
    parts = _next_text(run)
    if not parts:
        return ""
    body = "".join(f"<code>{html.escape(t)}</code>" if code else html.escape(t)
                   for t, code in parts)
    return f'<div class="cl-static-next" style="{_NEXT_STYLE}">{body}</div>'


def picture_bundle(run: Run, picture: str) -> dict[str, Any]:
    """The static output of a run's widget: ``picture`` (:func:`run_html`) and
    :func:`next_html` as ``text/html``. Its ``text/plain`` names the run and never changes:
    a front end that ignores display updates (nbval) keeps the first one."""
    return {"text/html": picture + next_html(run),
            "text/plain": f"picture of run {run.run_id} (chain {run.chain.name!r})"}


def publish_update(bundle: dict[str, Any], display_id: str) -> None:
    """Replace the output shown under ``display_id`` with ``bundle`` (a no-op outside IPython)."""
    from IPython import get_ipython
    from IPython.display import update_display

    shell = get_ipython()
    if shell is None:
        return
    pub = getattr(shell, "display_pub", None)
    var = getattr(pub, "_parent_header", None)
    latest = getattr(pub, "_parent_header_global", None)
    if not isinstance(var, contextvars.ContextVar) or not latest:
        update_display(bundle, raw=True, display_id=display_id)
        return

    def send() -> None:
        var.set(latest)
        update_display(bundle, raw=True, display_id=display_id)

    contextvars.copy_context().run(send)
    _again_at_next_cell(shell, bundle, display_id)


def _again_at_next_cell(shell: Any, bundle: dict[str, Any], display_id: str) -> None:
    """Send the same update once more from the next cell (see the module docstring)."""
    from IPython.display import update_display

    events = getattr(shell, "events", None)
    if events is None:
        return

    def again(*_: Any) -> None:
        with contextlib.suppress(ValueError):
            events.unregister("pre_run_cell", again)
        update_display(bundle, raw=True, display_id=display_id)

    events.register("pre_run_cell", again)
