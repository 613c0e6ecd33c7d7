"""The live widget's legend: only what this run shows, one line unless asked for more.

Collapsed (the default) it is one strip above the DAG: a chip per step status present in the
run right now, drawn like the nodes (fill, border, pattern), then the marks of the step kinds
the chain uses (``⚡ side effects``, ``☐ needs approval``...) and ``● break`` while a
breakpoint is ahead. Statuses are what changes while a run goes, so they stay in view without
a click and cost one line instead of a box as large as the DAG (issue 18: all 17 entries,
clipped on a 1280 px window). **Legend** expands the drawn key (node shapes and borders, the
two edge styles, :func:`chainlab.render.legend.legend_svg`) for the reader who needs it once.

What is listed comes from :func:`chainlab.render.legend.legend_items`, the same function the
static pictures' legends use.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Iterable
from typing import Any

import ipywidgets as W

from chainlab.render.legend import LegendItem, legend_items, legend_svg
from chainlab.render.style import StatusStyle

__all__ = ["BREAK_MARK", "BREAK_NOTE", "LegendView"]

#: the badge a breakpoint still ahead adds to its step (see ``RunWidget.badges``)
BREAK_MARK = "● break"
#: how the legend explains it
BREAK_NOTE = f"{BREAK_MARK}: pauses before this step"
_BORDER = {"solid": "solid", "dashed": "dashed", "dotted": "dotted"}


def _chip(style: StatusStyle, label: str) -> str:
    width = min(style.width, 2.0)
    return (f'<span class="cl-chip" style="background:{style.fill};color:{style.text};'
            f'border:{width:g}px {_BORDER[style.line]} {style.stroke}">'
            f"{html.escape(label)}</span>")


class LegendView(W.VBox):
    """``update(statuses, marks)`` shows the statuses present; :attr:`toggle` expands the key.

    ``kinds`` and ``edge_kinds`` are those of the drawing (``LiveDag.drawing``); ``scope`` is
    the DAG's CSS scope (the key's element ids derive from it).
    """

    def __init__(self, scope: str, kinds: Collection[str], edge_kinds: Collection[str]):
        self.scope = scope
        self.kinds = frozenset(kinds)
        self.edge_kinds = frozenset(edge_kinds)
        self.statuses: tuple[str, ...] = ()  # what the strip shows, in palette order
        self.marks: tuple[str, ...] = ()  # kind marks and BREAK_MARK, as shown
        self.toggle = W.ToggleButton(value=False, description="Legend", icon="caret-right",
                                     tooltip="show the key: step shapes, borders and edges",
                                     layout=W.Layout(width="auto"))
        self.strip = W.HTML()
        self.key = W.HTML(layout=W.Layout(display="none"))
        self.toggle.observe(self._toggled, names="value")
        line = W.HBox([self.toggle, self.strip])
        line.add_class("cl-legend-line")
        super().__init__([line, self.key])
        self.add_class("cl-legend-view")

    @property
    def expanded(self) -> bool:
        """True while the drawn key is shown."""
        return bool(self.toggle.value)

    def items(self) -> list[LegendItem]:
        """What the expanded key lists now (the statuses present, the kinds and edges)."""
        return legend_items(statuses=self.statuses, kinds=self.kinds,
                            edge_kinds=self.edge_kinds)

    def update(self, statuses: Iterable[str], marks: Iterable[str] = ()) -> None:
        """Show these step statuses (e.g. ``run_statuses(run).values()``) and extra marks
        (``BREAK_NOTE``); a no-op when nothing changed."""
        present = frozenset(str(s) for s in statuses)
        items = legend_items(statuses=present, kinds=self.kinds, edge_kinds=self.edge_kinds)
        shown = tuple(i.name for i in items if i.section == "status")
        kind_marks = tuple(i.label for i in items if i.section == "kind" and i.name != "plain")
        extra = tuple(m for m in dict.fromkeys(marks) if m)
        if (shown, kind_marks + extra) == (self.statuses, self.marks):
            return
        self.statuses, self.marks = shown, kind_marks + extra
        chips = "".join(_chip(i.style, i.label) for i in items
                        if i.section == "status" and i.style is not None)
        notes = "".join(f'<span class="cl-legend-mark">{html.escape(m)}</span>'
                        for m in self.marks)
        self.strip.value = f'<div class="cl-legend-strip">{chips}{notes}</div>'
        if self.expanded:
            self._draw_key()

    def _draw_key(self) -> None:
        legend = legend_svg(f"{self.scope}-key", statuses=self.statuses, kinds=self.kinds,
                            edge_kinds=self.edge_kinds, columns=3)
        value = f'<div class="cl-legend-key">{legend.svg()}</div>'
        if self.key.value != value:
            self.key.value = value

    def _toggled(self, change: dict[str, Any]) -> None:
        open_ = bool(change["new"])
        self.toggle.icon = "caret-down" if open_ else "caret-right"
        if open_:
            self._draw_key()
        self.key.layout.display = "" if open_ else "none"
