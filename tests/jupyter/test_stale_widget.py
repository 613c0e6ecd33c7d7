"""Issue 29, item 10: a run widget left from a kernel session that has ended (a restart, a
reopened notebook) says so in one line with the commands that reattach to its run.

After a restart JupyterLab keeps the old views on screen and marks each one whose model has
no live comm ``jupyter-widgets-disconnected`` (ipywidgets' ``_comm_live_update``), drawing a
broken-link icon before it. The widget carries the line from the start; its stylesheet hides
it while connected and shows it (and hides the icons, disables the dead controls) once the
widget's root is marked disconnected."""

from __future__ import annotations

import re

import pytest

from chainlab import Chain, Toolbox
from chainlab.jupyter import RunWidget
from chainlab.jupyter._assets import css
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio


def rule(selector: str) -> str:
    """The declarations of the stylesheet's rule whose selector list contains ``selector``."""
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css()):
        names = [s.strip() for s in re.sub(r"/\*.*?\*/", "", selectors, flags=re.S).split(",")]
        if selector in names:
            return body
    raise AssertionError(f"no CSS rule for {selector!r}")


async def test_the_widget_carries_the_reattach_line() -> None:
    toolbox = Toolbox("stale")

    @toolbox.tool
    def work(tag: str) -> str:
        return tag

    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(Chain.from_dict(
        {"name": "s", "steps": [{"id": "a", "tool": "work", "args": {"tag": "x"}}]}))
    widget = RunWidget(run)
    note = widget.stale_note
    assert note in widget.children
    assert widget.children.index(note) < widget.children.index(widget.header)
    assert "cl-stale" in note._dom_classes
    text = re.sub(r"<[^>]+>", "", note.value)
    assert "kernel session that has ended" in text
    assert f"%chain show {run.run_id}" in text and f"%chain resume {run.run_id}" in text
    await run.wait()
    assert widget.stale_note in widget.children  # a redraw keeps it


def test_the_stylesheet_shows_the_line_only_when_disconnected() -> None:
    assert "display: none" in rule(".cl-run .cl-stale")
    assert "display: block" in rule(".cl-run.jupyter-widgets-disconnected > .cl-stale")
    # ipywidgets' broken-link icons inside the widget are hidden, the dead buttons inert
    assert "display: none" in rule(
        ".cl-run.jupyter-widgets-disconnected .jupyter-widgets-disconnected::before")
    assert "pointer-events: none" in rule(".cl-run.jupyter-widgets-disconnected button")
