"""The run widget's tabs: Approvals (the inbox, :mod:`.inbox`), Inspector
(:mod:`.inspector`), Events (the event log tail, :mod:`.event_log`) and Timeline
(:mod:`.timeline_tab`). The Approvals title counts the waiting cards and a new decision
brings its tab forward; the timeline is drawn when its tab is opened. The panels take the
widget as a :class:`~.host.RunHost`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import ipywidgets as W

from chainlab.jupyter.run_widget.inbox import Inbox
from chainlab.jupyter.run_widget.inspector import StepInspector
from chainlab.jupyter.run_widget.timeline_tab import TimelineTab

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.event_log import EventLog
    from chainlab.jupyter.run_widget.host import RunHost

__all__ = ["TITLES", "RunTabs"]

TITLES = ("Approvals", "Inspector", "Events", "Timeline")
_INBOX, _INSPECTOR, _TIMELINE = 0, 1, 3  # tab indexes


class RunTabs(W.Tab):
    """The four tabs; :meth:`sync` redraws the inbox and the inspector."""

    def __init__(self, widget: RunHost, event_log: EventLog):
        self.inbox = Inbox(widget)
        self.inspector = StepInspector(widget)
        self.event_log = event_log
        self.timeline = TimelineTab(widget)
        self._was_waiting = 0  # cards in the inbox at the last sync
        super().__init__(children=[self.inbox, self.inspector, self.event_log, self.timeline])
        self.titles = TITLES
        self.observe(widget.on_loop(self._tab_selected), names="selected_index")

    def sync(self) -> None:
        """Redraw the inbox and the inspector; count the cards in the Approvals title, and
        show the inbox when a decision became due."""
        self.inbox.sync()
        waiting = len(self.inbox.cards)
        titles = (f"Approvals ({waiting})" if waiting else "Approvals", *TITLES[1:])
        if tuple(self.titles) != titles:
            self.titles = titles
        shown = cast("Any", self).selected_index  # (ipywidgets' traits are untyped)
        if waiting and shown != _INBOX and self._was_waiting == 0:
            self.selected_index = _INBOX  # a new decision is due: show the inbox
        self._was_waiting = waiting
        self.inspector.refresh()

    def inspect(self, step_id: str) -> None:
        """Show ``step_id`` in the Inspector tab. Raises ValueError listing the steps."""
        self.inspector.select(step_id)
        self.selected_index = _INSPECTOR

    def _tab_selected(self, change: dict[str, Any]) -> None:
        if change["new"] == _TIMELINE:
            self.timeline.shown()
