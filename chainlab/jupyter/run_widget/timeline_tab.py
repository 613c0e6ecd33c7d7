"""The Timeline tab of the run widget: the attempts table and the Gantt chart of
:mod:`chainlab.timeline`, drawn on demand from the store. It takes its widget as a
:class:`~.host.RunHost`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost

__all__ = ["SHOWN_COLUMNS", "TimelineTab"]

# the attempts table in the Timeline tab (run.attempts() has every column)
SHOWN_COLUMNS = ("step_id", "tool", "kind", "attempt", "epoch", "status", "error_kind", "error",
                 "duration_s")


class TimelineTab(W.VBox):
    """The attempts table and the Gantt chart, drawn on demand from the store.

    Importing matplotlib and the first draw take a second or two: until the chart replaces
    it, :attr:`loading` says "drawing timeline..." with a spinner (its widget message leaves
    before the drawing starts, so the browser shows it meanwhile)."""

    def __init__(self, widget: RunHost):
        self.widget = widget
        self.draw_button = W.Button(description="Redraw", icon="refresh",
                                    tooltip="read the attempts from the store again")
        self.out = W.Output(layout=W.Layout(overflow="auto"))
        self.loading = W.HTML('<div class="cl-loading"><span class="cl-spinner"></span>'
                              "drawing timeline…</div>", layout=W.Layout(display="none"))
        self.drawn_at: int | None = None  # the run's last event seq when drawn
        self.frame: Any = None  # what is shown: the attempts DataFrame and the Gantt chart
        self.figure: Any = None
        self.draw_button.on_click(widget.on_loop(lambda _: self.draw()))
        super().__init__([self.draw_button, self.loading, self.out])

    @property
    def drawing(self) -> bool:
        """True from a draw request until the chart (or the error) is shown."""
        return self.loading.layout.display != "none"

    def shown(self) -> None:
        """The tab was selected: draw unless what is drawn is still current."""
        if self.drawn_at != self.widget.run.state.last_seq:
            self.draw()

    def draw(self) -> None:
        """(Re)draw the table and the chart (needs chainlab[jupyter]: pandas, matplotlib):
        the loading note first; the drawing in a worker thread (matplotlib's first draw
        takes a second, and the run's loop must not wait for it), shown once done (at once
        without a running loop)."""
        self.drawn_at = self.widget.run.state.last_seq
        self.out.outputs = ()
        self.loading.layout.display = ""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._show(self._drawn)
            return
        loop.run_in_executor(None, self._drawn).add_done_callback(
            lambda done: self._show(done.result))

    def _drawn(self) -> tuple[Any, Any, Any]:
        """The attempts frame, the Gantt chart and what the tab shows of them (any thread:
        the figure is matplotlib's plain Figure, no pyplot)."""
        from chainlab.timeline import attempts_frame, plot_timeline

        run = self.widget.run
        frame = attempts_frame(run.runtime.store, run.run_id)
        frame = frame[[c for c in frame.columns if c in SHOWN_COLUMNS]]
        figure = plot_timeline(run.runtime.store, run.run_id)
        return frame, figure, _chart(figure)

    def _show(self, drawn: Callable[[], tuple[Any, Any, Any]]) -> None:
        # outputs are set on the widget, not captured with `with self.out:`: a capture is
        # routed by the parent message of the moment, which a deferred call no longer has
        try:
            self.frame, self.figure, chart = drawn()
            self.out.outputs = ()
            # blanks, not None/NaN, where an attempt has no value (issue 29)
            blank = self.frame.astype(object).where(self.frame.notna(), "")
            self.out.append_display_data(blank)
            self.out.append_display_data(chart)
        except Exception as exc:
            self.widget.show_error(exc, action="draw the timeline")
        finally:
            self.loading.layout.display = "none"


def _chart(figure: Any) -> Any:
    """What the tab shows of the Gantt chart: only its HTML (a light and a dark picture, the
    theme shows one) when it has one. Displaying the figure itself renders every format it
    offers: a third PNG that the tab never shows (about a third of the drawing time)."""
    from IPython.display import HTML

    html_of = getattr(figure, "_repr_html_", None)
    return HTML(html_of()) if callable(html_of) else figure
