"""Runs driven elsewhere: ``%chain watch RUN`` and the team inbox ``%chain approvals``.

``%chain watch`` shows the ordinary :class:`RunWidget` on a
:class:`chainlab.runtime.coordination.watching.WatchedRun`: the events come from the store
(``runtime.watch``), the approval cards decide through ``Runtime.decide``, and the controls
that need the driver are disabled, with a line naming who drives the run.

:class:`ApprovalsInbox` lists what ``Runtime.waiting_decisions()`` returns (every waiting
confirmation and in-doubt step of every unfinished run in the store) as the run widget's own
:class:`ApprovalCard` / :class:`DoubtCard`; their buttons call ``Runtime.decide``, then the
list is read again. It follows the store by itself; **Refresh** reads it at once. Above the
cards, the runs that stand still with no decision to make on a step
(:mod:`chainlab.runtime.coordination.stalls`: nobody drives one, ``%chain resume RUN``; one
queued behind the run that holds its concurrency key).
"""

from __future__ import annotations

import contextlib
import html
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import ipywidgets as W

from chainlab.jupyter._assets import style_tag
from chainlab.jupyter._loop import call_on, eager, home_loop, run_on
from chainlab.jupyter.run_widget.inbox import ApprovalCard, DoubtCard, waiting_groups
from chainlab.jupyter.runloop import RunLoop
from chainlab.jupyter.session import get_session
from chainlab.jupyter.views import error_html
from chainlab.runtime.coordination.inbox import WaitingDecision, follow_decisions
from chainlab.runtime.coordination.stalls import Stall, stalls
from chainlab.runtime.coordination.watching import WatchedRun
from chainlab.runtime.runtime import Run, Runtime
from chainlab.store.base import Notifier
from chainlab.store.queue import Queue

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.inbox import _Card
    from chainlab.jupyter.run_widget.widget import RunWidget
    from chainlab.jupyter.session import NotebookSession
    from chainlab.tools import Toolbox

__all__ = ["ApprovalsInbox", "watch_widget"]


def watch_widget(session: NotebookSession, run_id: str, db: str | None,
                 toolbox: Toolbox | None) -> RunWidget:
    """The live widget of ``run_id``, driven by another process, followed through the store
    (``toolbox``: the tools this kernel needs to take the run over when a decision is taken
    and nobody drives it; the widget then shows the live run, with every control). Raises
    RunNotFoundError."""
    from chainlab.jupyter.run_widget.widget import RunWidget
    from chainlab.jupyter.session import _NO_TOOLS

    runtime = session.runtime(toolbox if toolbox is not None else _NO_TOOLS, db)
    run = runtime.watch_run(run_id)
    widget = RunWidget(run, session=session)  # subscribes before the first read
    session.widgets[run_id] = widget  # the run's widget in this kernel (shown for the run)

    def taken_over(live: Run) -> None:  # a decision here took the run over: every control
        session.remember(live, db)  # (which attaches the live run to the session's widget)
        if widget.run is not live:
            widget.attach(live)

    run.on_taken_over(taken_over)
    run.start()
    return widget


def _move(stall: Stall) -> str:
    """What moves a stalled run on, as the notebook spells it (an in-doubt step has no
    magic: its card in the inbox decides it)."""
    if stall.action is None:
        return ""
    if stall.action == "resolve":
        return f" · resolve step {html.escape(str(stall.action_step))} of its card below"
    return f" · <code>{html.escape(stall.command('%chain'))}</code>"


class _RunHost:
    """What an inbox card needs of one run (a
    :class:`chainlab.jupyter.run_widget.host.CardHost`): the run, read at the last refresh,
    drawn as it is, and ``act``."""

    def __init__(self, inbox: ApprovalsInbox, run: WatchedRun):
        self.inbox = inbox
        self.run: WatchedRun = run

    @property
    def view(self) -> WatchedRun:
        return self.run

    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], *,
            on_error: Callable[[BaseException], None] | None = None) -> None:
        self.inbox.act(what, make, on_error=on_error)


class ApprovalsInbox(W.VBox):
    """Every decision that waits in the store, one card each, oldest first
    (``display(ApprovalsInbox(runtime))``; ``%chain approvals`` shows one).

    It follows the store by itself (:func:`~chainlab.runtime.coordination.inbox.
    follow_decisions`: NOTIFY on PostgreSQL, a poll of the run list every ``poll_s`` seconds
    elsewhere), on the loop the session's runs are driven on, so it keeps up while later
    cells execute; **Refresh** reads it at once. Each run's line says who drives it, and
    that a driver whose process is gone is gone (re-read every few seconds)."""

    def __init__(self, runtime: Runtime, *, follow: bool = True, poll_s: float = 1.0):
        self.runtime = runtime
        home = getattr(runtime, "home", None)  # decide and redraw where the runs are driven
        self._loop = home.loop if isinstance(home, RunLoop) else home_loop()
        self.poll_s = poll_s
        self.items: list[WaitingDecision] = []
        self.cards: dict[tuple[str, str], _Card] = {}
        self.hosts: dict[str, _RunHost] = {}
        self._grouped: dict[str, dict[str, tuple[str, int]]] = {}  # run -> waiting_groups
        self.lines: dict[str, W.HTML] = {}
        self.last_error: BaseException | None = None
        self.reads = 0  # how many times the waiting decisions were read
        self.summary = W.HTML()
        self.error = W.HTML()
        self.stalled: list[Stall] = []  # runs that stand still: nobody drives one, a key...
        self.stalls = W.HTML()
        self.refresh_button = W.Button(description="Refresh", icon="refresh",
                                       tooltip="read the waiting decisions again now",
                                       layout=W.Layout(width="auto"))
        self.refresh_button.on_click(lambda _: self._on_loop(self.refresh))
        self.list = W.VBox()
        self.list.add_class("cl-inbox")
        head = W.HBox([self.summary, self.refresh_button],
                      layout=W.Layout(align_items="center", justify_content="space-between"))
        super().__init__([W.HTML(style_tag()), head, self.error, self.stalls, self.list])
        self.add_class("cl-run")
        self.add_class("cl-team-inbox")
        self._scope: anyio.CancelScope | None = None
        self.following = False
        self.refresh()
        if follow:
            run_on(self._loop, self.runtime.spawn, self._follow)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        if not call_on(self._loop, fn):
            fn()

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Read the waiting decisions again now and show them."""
        self.error.value = ""
        try:
            items = self.runtime.waiting_decisions()
        except Exception as exc:
            self.show_error(exc, action="read the waiting decisions")
            return
        self.show(items)

    async def _follow(self) -> None:
        self.following = True
        try:
            with anyio.CancelScope() as self._scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._age_lines)
                    async for items in follow_decisions(self.runtime.host, poll_s=self.poll_s):
                        self.error.value = ""
                        self.show(items)
                    tg.cancel_scope.cancel()
        except Exception as exc:  # the store went away: say so, keep what is shown
            self.show_error(exc, action="follow the store")
        finally:
            self.following = False

    async def _age_lines(self) -> None:
        # a driver's heartbeats stop without a commit: say it is gone once it is
        while True:
            await anyio.sleep(max(self.poll_s, 2.5))
            self._draw_lines()
            with contextlib.suppress(Exception):  # (the follower reports a store error)
                self._draw_stalls(await self.runtime.run_io(self._read_stalls))

    def stop(self) -> None:
        """Stop following the store (the widget was closed)."""
        scope = self._scope
        if scope is not None:
            self._on_loop(scope.cancel)

    def close(self) -> None:
        self.stop()
        super().close()

    def show(self, items: list[WaitingDecision]) -> None:
        """Show these waiting decisions: cards of decisions still waiting are kept (a
        half-typed reason survives), the others go."""
        try:
            runs = {d.run_id: self.runtime.watch_run(d.run_id) for d in items}
        except Exception as exc:
            self.show_error(exc, action="read the waiting decisions")
            return
        try:
            stalled = self._read_stalls()
        except Exception as exc:
            self.show_error(exc, action="read the runs that stand still")
            stalled = []
        self.items = items
        self.reads += 1
        self._draw_stalls(stalled)
        for run_id, run in runs.items():
            host = self.hosts.get(run_id)
            if host is None:
                self.hosts[run_id] = _RunHost(self, run)
            else:
                host.run = run
        shown: list[W.Widget] = []
        keep: dict[tuple[str, str], _Card] = {}
        lines: dict[str, W.HTML] = {}
        self._grouped = {}  # (per read: each run's waiting steps counted once)
        for item in items:
            card = self._card(item)
            if card is not None:
                keep[(item.run_id, item.step_id)] = card
                line = lines.get(item.run_id) or self.lines.get(item.run_id) or W.HTML()
                lines[item.run_id] = line
                shown += [line, card]
        self.cards, self.lines = keep, lines
        self.hosts = {run_id: h for run_id, h in self.hosts.items() if run_id in runs}
        self._draw_lines()
        children = shown or [W.HTML(
            '<div class="cl-note">Nothing waits for a decision in this store.</div>')]
        if list(self.list.children) != children:
            self.list.children = children
        n, m = len(keep), len(runs)
        how = ("follows the store (NOTIFY)" if isinstance(self.runtime.store, Notifier)
               else f"follows the store (read every {self.poll_s:g} s)")
        value = (f'<div class="cl-head"><b>Approvals</b> <span class="cl-summary">{n} '
                 f'decision{"s" if n != 1 else ""} wait{"s" if n == 1 else ""} in {m} run'
                 f'{"s" if m != 1 else ""} · read at {time.strftime("%H:%M:%S")} · {how}'
                 "</span></div>" + self._queues())
        self.summary.value = value

    def _draw_lines(self) -> None:
        for item in self.items:
            line = self.lines.get(item.run_id)
            if line is not None:
                value = self._run_line(item)
                if line.value != value:
                    line.value = value

    def _read_stalls(self) -> list[Stall]:
        return stalls(self.runtime.store, self.runtime.liveness)

    def _draw_stalls(self, found: list[Stall]) -> None:
        """The runs that stand still (nobody drives one; one queued behind the run holding
        its concurrency key), each with the magic that moves it on."""
        self.stalled = found
        value = "".join(f'<div class="cl-note cl-stalled">⚠ {html.escape(s.text)}'
                        f"{_move(s)}</div>" for s in found)
        if self.stalls.value != value:
            self.stalls.value = value

    def _queues(self) -> str:
        """How deep each queue of the worker fleet is ("" for a store without a queue)."""
        store = self.runtime.store
        depths = store.queue_depths() if isinstance(store, Queue) else []
        if not depths:
            return ""
        text = "; ".join(d.text() for d in depths)
        return f'<div class="cl-note cl-queues">queues: {html.escape(text)}</div>'

    def _card(self, item: WaitingDecision) -> _Card | None:
        host = self.hosts[item.run_id]
        st = host.run.steps.get(item.step_id)
        if st is None:
            return None
        cls = ApprovalCard if item.kind == "confirm" else DoubtCard
        key = ("confirm", item.step_id, st.args_hash) if item.kind == "confirm" else \
            ("in_doubt", item.step_id, st.attempts)
        card = self.cards.get((item.run_id, item.step_id))
        if card is None or not isinstance(card, cls) or card.key != key:
            card = cls(host, item.step_id)
        if isinstance(card, ApprovalCard):  # one of several a step grew: "Approve all N"
            card.set_group(self._groups(item.run_id).get(item.step_id))
        return card

    def _groups(self, run_id: str) -> dict[str, tuple[str, int]]:
        if run_id not in self._grouped:
            self._grouped[run_id] = waiting_groups(
                self.hosts[run_id].run.steps,
                [i.step_id for i in self.items if i.run_id == run_id and i.kind == "confirm"])
        return self._grouped[run_id]

    def _run_line(self, item: WaitingDecision) -> str:
        run = self.hosts[item.run_id].run
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.since))
        driver = ("driven here (by this kernel)" if self._driven_here(item.run_id, run)
                  else run.driven_by())
        return (f'<div class="cl-note">run <span class="cl-runid">{html.escape(item.run_id)}'
                f"</span> ({html.escape(item.chain)}) · waiting since {since} · "
                f"{html.escape(driver)}</div>")

    def _driven_here(self, run_id: str, run: Any) -> bool:
        """This kernel drives the run: a runtime of its session has it live, or the store
        names this process as its driver (issue 29: never "no live driver" or our pid)."""
        for runtime in (self.runtime, *get_session().runtimes.values()):
            live = runtime.get_run(run_id) if runtime.store is self.runtime.store else None
            if live is not None and live.active:
                return True
        info = run.driver() if isinstance(run, WatchedRun) else None
        me = self.runtime.liveness.identity()
        return info is not None and (info.host, info.pid) == (me.host, me.pid)

    def card(self, run_id: str, step_id: str) -> _Card:
        """The card of ``step_id`` of ``run_id``. Raises KeyError listing what waits."""
        try:
            return self.cards[(run_id, step_id)]
        except KeyError:
            waiting = ", ".join(f"{r}/{s}" for r, s in self.cards) or "nothing"
            raise KeyError(f"no card for step {step_id!r} of run {run_id!r}; waiting: "
                           f"{waiting}") from None

    # ------------------------------------------------------------------ deciding
    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], *,
            on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run a card's decision (``Runtime.decide`` through the watched run), then read
        the list again; an error is shown on the card (``on_error``), else above the list."""
        if call_on(self._loop, self.act, what, make, on_error=on_error):
            return
        self.error.value = ""

        def failed(exc: BaseException) -> None:
            if on_error is None:
                self.show_error(exc, action=what)
                return
            self.last_error = exc  # a card's action: the card shows it, once (issue 29)
            on_error(exc)

        async def decide_then_refresh() -> None:
            await make()
            self.refresh()  # at once, not at the follower's next read

        try:
            eager(decide_then_refresh(), on_error=failed)
        except Exception as exc:
            failed(exc)

    def show_error(self, exc: BaseException, action: str | None = None) -> None:
        """Show ``exc`` above the list (and keep it in ``last_error``)."""
        self.last_error = exc
        self.error.value = error_html(exc, action)

    def __repr__(self) -> str:
        return f"ApprovalsInbox({len(self.cards)} waiting)"
