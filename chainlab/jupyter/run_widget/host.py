"""What the run widget's panels need from the widget they sit in, as protocols.

Every panel (the approvals inbox and its cards, the step inspector and its fork panel, the
timeline tab, the faults section, the rollback confirmation, the scrubber) takes a host,
never the whole :class:`~chainlab.jupyter.run_widget.widget.RunWidget`. So a panel reads in
one place what it depends on, it can sit in another widget (the team inbox hosts cards of
many runs, :mod:`chainlab.jupyter.remote`), and the panels import nothing of the widget.

Two runs are in play: :attr:`CardHost.run`, the handle the controls act on (live, stored or
watched), and :attr:`CardHost.view`, what the panels draw: the run itself, or while the
scrubber is moved back, the run as it was at that event (a read-only
:class:`~chainlab.jupyter.run_widget.scrubber.RunAt`). Both satisfy :class:`RunView`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ipywidgets as W

    from chainlab.events import Event
    from chainlab.events.fold import RunState, StepState
    from chainlab.events.status import RunStatus
    from chainlab.events.writing import Writing
    from chainlab.jupyter.session import NotebookSession
    from chainlab.plan.schema import Chain
    from chainlab.runtime.run import RunOwner
    from chainlab.runtime.runtime import Run
    from chainlab.store.base import RunRecord

__all__ = ["CardHost", "RunHost", "RunView"]


class RunView(Protocol):
    """What the panels read of a run to draw it: a :class:`~chainlab.runtime.Run`, or the
    scrubber's :class:`~chainlab.jupyter.run_widget.scrubber.RunAt` (a past state)."""

    @property
    def run_id(self) -> str: ...

    @property
    def chain(self) -> Chain: ...

    @property
    def record(self) -> RunRecord: ...

    @property
    def runtime(self) -> RunOwner: ...

    @property
    def state(self) -> RunState: ...

    @property
    def steps(self) -> dict[str, StepState]: ...

    @property
    def status(self) -> RunStatus: ...

    @property
    def active(self) -> bool:
        """True when this kernel drives the run (never for a past state)."""
        ...

    @property
    def paused(self) -> bool: ...

    def ready_steps(self) -> list[str]: ...

    def undoable(self) -> list[str]: ...

    def waiting(self) -> dict[str, str]: ...

    def event_list(self) -> list[Event]: ...


class CardHost(Protocol):
    """What an approval or doubt card needs from the widget it sits in: the run its
    decisions go to, the run it is drawn from, and ``act``, which runs a decision and shows
    its error. The run widget is one; the team inbox (``%chain approvals``) hosts cards of
    many runs."""

    @property
    def run(self) -> Run:
        """The handle decisions and controls act on."""
        ...

    @property
    def view(self) -> RunView:
        """What to draw: the run, or the run at the scrubbed event."""
        ...

    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], *,
            on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run the coroutine ``make()`` on the run's loop now; an error it raises goes to
        ``on_error`` when given (shown once, where the action was), else is shown in the
        host's error line (``could not WHAT``)."""
        ...


class RunHost(CardHost, Protocol):
    """What every panel of the run widget may use, beyond a card's needs: the notebook
    session, the error line, a redraw, and the run's other handles (resumed, taken over,
    forked). Which panel uses what:

    - ``run`` and ``view``: every panel (controls act on ``run``, drawing reads ``view``);
    - ``act``: the cards, the fork panel, the faults section, the rollback confirmation;
    - ``session``: the fork panel (the runtime of the notebook's toolbox), the faults section;
    - ``show_error``: the fork panel, the timeline tab, the scrubber;
    - ``refresh``: the scrubber (redraw at the scrubbed event);
    - ``live``: the rollback confirmation (resume the run here, then roll it back);
    - ``attach``: the faults section (a second driver took the run over);
    - ``widget_for``: the fork panel (the forked run's own widget);
    - ``on_loop``: every panel's buttons, slider and pickers (their callbacks);
    - ``selected_step``: the scrubber (to the selected step's previous / next event);
    - ``pieces``: the inspector (an agent step's turn being written, as it streams).
    """

    @property
    def session(self) -> NotebookSession | None:
        """The notebook session the widget belongs to (None: a bare widget)."""
        ...

    def show_error(self, exc: BaseException, action: str | None = None) -> None:
        """Show ``exc`` in the widget's error line."""
        ...

    def refresh(self) -> None:
        """Redraw every panel from :attr:`view`."""
        ...

    async def live(self) -> Run:
        """The run driven by this kernel: itself, or resumed from its store (and shown)."""
        ...

    def attach(self, run: Run) -> None:
        """Show ``run``, another handle of the same run (after a resume or a takeover)."""
        ...

    def widget_for(self, run: Run) -> W.Widget:
        """A new run widget for ``run`` in the same session (a fork's)."""
        ...

    @property
    def selected_step(self) -> str | None:
        """The step shown in the Inspector (None: none yet)."""
        ...

    #: the turns the run's agent steps are streaming now (``model_delta`` pieces, never
    #: stored), by step
    pieces: Writing

    def on_loop(self, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn`` as a front-end callback (a click, a slider move) that runs on the run's
        loop: the widget is changed only there (:mod:`chainlab.jupyter.runloop`)."""
        ...
