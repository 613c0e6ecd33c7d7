"""The static fallback a run's widget carries (issue 18): what nbconvert, GitHub and a
reopened notebook show where the live widget was.

The widget is displayed with a display id and a ``text/html`` picture of the run
(:func:`chainlab.render.display.run_html`: the DAG with statuses as SVG and a status table)
next to its widget view. When the run settles (ends, or waits for a person) that output is
replaced through ``update_display``, so the saved notebook holds the last state.

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
from typing import Any

__all__ = ["publish_update"]


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
