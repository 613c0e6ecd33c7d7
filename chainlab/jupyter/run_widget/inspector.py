"""The step inspector (with "Fork from here"), the event log tail and the timeline tab of
the run widget; the panels take their widget as a :class:`~.host.RunHost`."""

from __future__ import annotations

import asyncio
import html
import json
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events import Event
from chainlab.events.fold import BACKGROUND_NOTE
from chainlab.events.status import RUN_TERMINAL, RunStatus
from chainlab.events.usage import usage_text
from chainlab.jupyter.views import error_html, pretty, tool_of
from chainlab.render.display import reason_text
from chainlab.render.json import job_dict

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost

__all__ = ["EventLog", "ForkPanel", "StepInspector", "TimelineTab", "event_line"]

esc = html.escape
# the attempts table in the Timeline tab (run.attempts() has every column)
SHOWN_COLUMNS = ("step_id", "tool", "kind", "attempt", "epoch", "status", "error_kind", "error",
                 "duration_s")


class StepInspector(W.VBox):
    """Pick a step: its status, resolved args, output, attempts, error, idempotency key."""

    def __init__(self, widget: RunHost):
        self.widget = widget
        self.picker = W.Dropdown(description="step", options=[],
                                 style={"description_width": "initial"})
        self.details = W.HTML()
        self.picker.observe(self._picked, names="value")
        self._quiet = False
        self.picked = False
        # a remote job that waits: cancel it where it runs (run.cancel_job), this step only
        self.cancel_job = W.Button(description="Cancel job", icon="stop", button_style="danger",
                                   tooltip="send cancel(handle) to the job's backend; the step "
                                           "fails, the run goes on as after any failure",
                                   layout=W.Layout(display="none"))
        self.cancel_job.on_click(lambda _: self._cancel_job())
        self.fork = ForkPanel(widget, self)
        super().__init__([self.picker, self.details, self.cancel_job, self.fork])
        self.add_class("cl-inspector")
        self._last = ""

    def select(self, step_id: str) -> None:
        """Show ``step_id``. Raises ValueError listing the steps."""
        if step_id not in self.picker.options:
            raise ValueError(f"no step {step_id!r}; steps: {', '.join(self.picker.options)}")
        self.picker.value = step_id

    def select_quietly(self, step_id: str) -> None:
        """Preselect ``step_id`` (the failed step) without counting as a person's pick."""
        self._quiet = True
        try:
            self.select(step_id)
        finally:
            self._quiet = False

    def _picked(self, _: Any) -> None:
        if not self._quiet:
            self.picked = True  # a person's (or a script's) choice: not preselected again
        self.refresh()

    def refresh(self) -> None:
        run = self.widget.view
        ids = tuple(run.steps)
        if tuple(self.picker.options) != ids:
            current = self.picker.value
            self._quiet = True
            try:
                self.picker.options = ids
                self.picker.value = current if current in ids else (ids[0] if ids else None)
            finally:
                self._quiet = False
        step_id = self.picker.value
        if step_id is None:
            return
        text = self.render(step_id)
        if text != self._last:
            self._last = self.details.value = text
        st = self.widget.view.steps[step_id]
        waits = (st.job is not None and st.status == "running" and st.job.get("phase") == "waiting"
                 and self.widget.run.active)
        self.cancel_job.layout.display = None if waits else "none"
        self.fork.refresh()

    def _cancel_job(self) -> None:
        step_id = self.picker.value
        run = self.widget.run
        if step_id is not None:
            self.widget.act("cancel job", lambda: run.cancel_job(step_id))

    def render(self, step_id: str) -> str:
        run = self.widget.view  # while scrubbing: the run as it was at that event
        st = run.steps[step_id]
        why = reason_text(st.status, st.reason)
        rows = [("status", st.status + (f" ({why})" if why else "")
                 + (f" · {BACKGROUND_NOTE}" if st.background else "")),
                ("tool", tool_of(run.chain, step_id)),
                ("attempts", str(st.attempts) + (f", compensations {st.compensations}"
                                                 if st.compensations else "")),
                ("idempotency key", st.idempotency_key or "-")]
        if step_id in run.state.estimates:
            rows.append(("expected", f"~{run.state.estimates[step_id]:.3g} s "
                                     f"(release order: {run.state.priority})"))
        if st.usage:
            rows.append(("usage", usage_text(st.usage)))
        if st.job is not None:  # a remote job: what it waits on, how often it asked
            job = job_dict(st) or {}
            progress = job["progress"]
            rows += [("job", f"{job['caption'] or job['phase']} (state {job['state'] or '-'}"
                             + (f", {round(progress * 100)}%" if progress is not None else "")
                             + f"; {job['how'] or 'not recorded yet'})"),
                     ("job handle", json.dumps(job["handle"])),
                     ("job polls", f"{job['polls']}" + (f", {job['poll_errors']} failed in a "
                                                        f"row: {job['error']}"
                                                        if job["poll_errors"] else ""))]
        if st.error:
            rows.append(("error", error_text(st.error_kind, st.error)))
        if st.approval:
            edited = " (args edited)" if st.approval.get("edited") else ""
            rows.append(("approval", f"{st.approval.get('note') or 'approved'}{edited}"))
        table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        parts = [f'<table class="cl-kv">{table}</table>',
                 f'<div class="cl-label">resolved args</div>{pretty(st.args)}']
        if st.output is not None or st.status == "succeeded":
            parts.append(f'<div class="cl-label">output</div>{pretty(st.output)}')
        attempts = [a for a in run.state.attempts if a.step_id == step_id]
        if attempts:
            lines = "".join(
                f"<tr><td>{a.kind} #{a.attempt}</td><td>epoch {a.epoch}</td>"
                f"<td>{esc(str(a.status))}</td>"
                f"<td>{'' if a.duration_s is None else f'{a.duration_s:.3f} s'}</td>"
                f"<td>{esc(error_text(a.error_kind, a.error))}</td>"
                f"<td>{esc(usage_text(a.usage))}</td></tr>"
                for a in attempts)
            head = ("<tr><th>attempt</th><th>epoch</th><th>status</th><th>duration</th>"
                    "<th>error</th><th>usage</th></tr>")
            parts.append(f'<div class="cl-label">attempts</div><table class="cl-table">{head}'
                         f"{lines}</table>")
        return "".join(parts)


def error_text(kind: str | None, error: str | None) -> str:
    """``"timeout: took over 5 s"``; the kind alone when the message only repeats it
    (``"cancelled"``, not ``"cancelled: cancelled"``)."""
    if not error or error == kind:
        return kind or ""
    return f"{kind}: {error}" if kind else error


def event_line(ev: Event) -> str:
    """One line per event: ``[12] step_failed fetch #2  transient: flaky failure``."""
    p = ev.payload
    extra = ""
    if ev.kind in ("step_failed", "step_retry_scheduled", "step_in_doubt",
                   "compensation_failed"):
        extra = f"{p.get('error_kind') or p.get('reason') or ''}: {p.get('error') or ''}"
        if "delay_s" in p:
            extra += f" (retry in {p['delay_s']:g} s)"
    elif ev.kind in ("step_rejected", "step_skipped", "step_cancelled", "run_paused"):
        word = ev.kind.removeprefix("step_").removeprefix("run_")
        extra = reason_text(word, p.get("reason"))  # never "step_cancelled a  cancelled"
    elif ev.kind == "run_resumed":
        extra = f"{p.get('reason', '')}" + (f", epoch {p['epoch']}" if "epoch" in p else "")
    elif ev.kind == "run_suspended":
        extra = ", ".join(f"{k}: {v}" for k, v in p.get("waiting", {}).items())
    elif ev.kind == "fault_injected":  # issue 19: what was injected, and by whom
        extra = " ".join(str(p[k]) for k in ("fault", "error_kind") if p.get(k)) + \
            f" (by {p.get('by', '?')})"
    elif ev.kind == "write_refused":
        extra = f"epoch {p.get('stale_epoch')} fenced: {', '.join(p.get('refused', []))}"
    elif ev.kind == "step_approved" and p.get("args") is not None:
        extra = "with edited args"
    return f"{ev}  {extra}".rstrip() if extra else str(ev)


class EventLog(W.HTML):
    """The last ``lines`` events (the whole log: ``run.event_log()``)."""

    def __init__(self, lines: int = 14):
        super().__init__()
        self.events: deque[Event] = deque(maxlen=500)
        self.lines = lines
        self.gap = False
        self.upto: int | None = None  # the scrubber's event: show the log up to it
        self._shown = ""
        self.add_class("cl-log")

    def reset(self, events: Iterable[Event]) -> None:
        self.events.clear()
        self.fill(events)

    def add(self, ev: Event) -> None:
        """A live event. One that skips a seq marks a gap (:meth:`fill` closes it)."""
        last = self.events[-1].seq if self.events else 0
        if ev.seq <= last:
            return
        if ev.seq != last + 1:
            self.gap = True
        self.events.append(ev)

    def fill(self, stored: Iterable[Event]) -> None:
        """Merge stored events in (events emitted before we subscribed, once committed)."""
        merged = {ev.seq: ev for ev in stored}
        merged.update((ev.seq, ev) for ev in self.events)
        self.events.clear()
        self.events.extend(merged[seq] for seq in sorted(merged))
        seqs = [ev.seq for ev in self.events]
        if not seqs:
            self.gap = False
            return
        contiguous = seqs[-1] - seqs[0] + 1 == len(seqs)
        from_the_start = seqs[0] == 1 or len(seqs) == self.events.maxlen  # or trimmed
        self.gap = not (contiguous and from_the_start)

    def refresh(self) -> None:
        events = [ev for ev in self.events if self.upto is None or ev.seq <= self.upto]
        tail = events[-self.lines:]
        hidden = len(events) - len(tail)
        head = f"... {hidden} earlier events (run.event_log() has them all)\n" if hidden else ""
        text = head + "\n".join(event_line(ev) for ev in tail)
        if self.upto is not None:
            later = sum(1 for ev in self.events if ev.seq > self.upto)
            text += f"\n◀ scrubbed to event {self.upto}; {later} later events hidden"
        value = f'<pre class="cl-pre">{esc(text)}</pre>'
        if value != self._shown:
            self._shown = self.value = value


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
        self.draw_button.on_click(lambda _: self.draw())
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
        the loading note first, the drawing on the next turn of the loop (at once without
        a running loop)."""
        self.drawn_at = self.widget.run.state.last_seq
        self.out.outputs = ()
        self.loading.layout.display = ""
        try:
            asyncio.get_running_loop().call_soon(self._draw_now)
        except RuntimeError:
            self._draw_now()

    def _draw_now(self) -> None:
        # outputs are set on the widget, not captured with `with self.out:`: a capture is
        # routed by the parent message of the moment, which a deferred call no longer has
        run = self.widget.run
        try:
            from chainlab.timeline import attempts_frame, plot_timeline

            frame = attempts_frame(run.runtime.store, run.run_id)
            self.frame = frame[[c for c in frame.columns if c in SHOWN_COLUMNS]]
            self.figure = plot_timeline(run.runtime.store, run.run_id)
            self.out.outputs = ()
            # blanks, not None/NaN, where an attempt has no value (issue 29)
            blank = self.frame.astype(object).where(self.frame.notna(), "")
            self.out.append_display_data(blank)
            self.out.append_display_data(_chart(self.figure))
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


class ForkPanel(W.VBox):
    """"Fork from here" on the inspected step: a new run that runs this step (with the args
    typed here) and what depends on it again, and reuses everything else that did not
    change. **Preview** shows the fork plan (nothing runs); **Fork** starts it and shows
    its widget below."""

    def __init__(self, widget: RunHost, inspector: StepInspector):
        self.widget = widget
        self.inspector = inspector
        self.open_button = W.Button(description="Fork from here", icon="code-branch",
                                    tooltip="start a new run from this step (runtime.fork)")
        self.args = W.Textarea(description="args", layout=W.Layout(width="95%", height="6em"),
                               style={"description_width": "initial"})
        self.preview_button = W.Button(description="Preview", icon="list",
                                       tooltip="the fork plan: what is reused, what runs")
        self.fork_button = W.Button(description="Fork", icon="play", button_style="warning",
                                    tooltip="start the fork")
        self.plan = W.HTML()
        self.out = W.Output()
        self.forked: Any = None  # the last Run this panel started
        self.editor = W.VBox([self.args, W.HBox([self.preview_button, self.fork_button]),
                              self.plan])
        self.editor.layout.display = "none"
        self.open_button.on_click(lambda _: self.toggle())
        self.preview_button.on_click(lambda _: self.preview())
        self.fork_button.on_click(lambda _: self.start())
        self._step: str | None = None
        super().__init__([self.open_button, self.editor, self.out])
        self.add_class("cl-fork")

    def refresh(self) -> None:
        real = self.widget.run  # while scrubbing too: the run itself, not its past
        step_id = self.inspector.picker.value
        ended = real.status in RUN_TERMINAL or real.status == RunStatus.SUSPENDED
        top = step_id is not None and "/" not in step_id
        self.open_button.disabled = not (ended and top)
        if step_id != self._step:
            self._step = step_id
            st = real.steps.get(step_id) if step_id is not None else None
            self.args.value = json.dumps((st.args if st is not None else None) or
                                         self._declared_args(step_id), indent=1)
            self.plan.value = ""

    def _declared_args(self, step_id: str | None) -> dict[str, Any]:
        for step in self.widget.run.chain.steps:
            if step.id == step_id:
                return dict(step.args)
        return {}

    def toggle(self) -> None:
        shown = self.editor.layout.display != "none"
        self.editor.layout.display = "none" if shown else ""
        if not shown:
            self.preview()

    def edits(self) -> dict[str, Any]:
        """``runtime.fork`` arguments: rerun the step, with the args typed here when they
        differ from what it ran with. Raises ValueError for text that is not a JSON object."""
        step_id = self.inspector.picker.value
        try:
            args = json.loads(self.args.value or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"args are not JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(args, dict):
            raise ValueError(f"args must be a JSON object, got {type(args).__name__}")
        st = self.widget.run.steps.get(step_id)
        edits: dict[str, Any] = {"rerun": [step_id]}
        declared = self._declared_args(step_id)
        if args != ((st.args if st is not None else None) or declared):
            edits["args"] = {step_id: args}
        return edits

    def _runtime(self) -> Any:
        widget = self.widget
        if widget.session is not None:
            try:
                toolbox, _ = widget.session.toolbox(None)
            except Exception:
                return widget.run.runtime
            if toolbox is not widget.run.runtime.toolbox:
                return widget.session.runtime(
                    toolbox, widget.session.run_stores.get(widget.run.run_id))
        return widget.run.runtime

    def preview(self) -> None:
        """Show the fork plan as a table (nothing runs, nothing is written)."""
        try:
            plan = self._runtime().fork_plan_sync(self.widget.run.run_id, **self.edits())
        except Exception as exc:
            self.plan.value = error_html(exc)
            return
        head = "".join(f"<th>{esc(c)}</th>" for c in ("step", "parent", "decision", "reason"))
        rows = "".join(
            f"<tr><td>{esc(r['step'])}</td><td>{esc(r['parent'])}</td>"
            f"<td><b>{esc(r['decision'])}</b></td><td>{esc(r['reason'])}</td></tr>"
            for r in plan.table())
        self.plan.value = (f'<div class="cl-label">fork plan</div><table class="cl-table">'
                           f"<tr>{head}</tr>{rows}</table>")

    def start(self) -> None:
        """Start the fork and show its widget under the panel."""
        try:
            edits = self.edits()
        except ValueError as exc:
            self.widget.show_error(exc, action="fork")
            return
        runtime = self._runtime()

        def shown(run: Any) -> None:
            self.forked = run
            session = self.widget.session
            if session is not None:
                session.remember(run, session.run_stores.get(self.widget.run.run_id))
            view = self.widget.widget_for(run)
            if session is not None:
                session.widgets[run.run_id] = view
            self.out.clear_output()
            with self.out:
                from IPython.display import display

                display(view)

        async def go() -> None:
            shown(await runtime.fork(self.widget.run.run_id, **edits))

        self.widget.act("fork", go)
