"""The step inspector of the run widget (its Inspector tab): pick a step and see its status,
resolved args, output, attempts, error and idempotency key (an agent step: its transcript,
:mod:`.transcript`), cancel the remote job it waits on, and fork the run from it (the "Fork
from here" panel, :mod:`.fork`). It takes its widget as a :class:`~.host.RunHost`."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events.fold import BACKGROUND_NOTE
from chainlab.events.usage import usage_text
from chainlab.jupyter.run_widget.fork import ForkPanel
from chainlab.jupyter.run_widget.transcript import transcript_html
from chainlab.jupyter.views import pretty, tool_of
from chainlab.render.display import reason_text
from chainlab.render.json import job_dict

if TYPE_CHECKING:
    from chainlab.events.fold_state import StepState
    from chainlab.jupyter.run_widget.host import RunHost

__all__ = ["StepInspector", "error_text"]

esc = html.escape


class StepInspector(W.VBox):
    """Pick a step: its status, resolved args, output, attempts, error, idempotency key."""

    def __init__(self, widget: RunHost):
        self.widget = widget
        self.picker = W.Dropdown(description="step", options=[],
                                 style={"description_width": "initial"})
        self.details = W.HTML()
        self.picker.observe(widget.on_loop(self._picked), names="value")
        self._quiet = False
        self.picked = False
        # a remote job that waits: cancel it where it runs (run.cancel_job), this step only
        self.cancel_job = W.Button(description="Cancel job", icon="stop", button_style="danger",
                                   tooltip="send cancel(handle) to the job's backend; the step "
                                           "fails, the run goes on as after any failure",
                                   layout=W.Layout(display="none"))
        self.cancel_job.on_click(widget.on_loop(lambda _: self._cancel_job()))
        self.fork = ForkPanel(widget, self.picker)
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
                ("tool", tool_of(run.chain, step_id, run.state)),
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
        grown = run.state.children.get(step_id)
        if grown:  # a for_each step's instances, an agent's calls: each an ordinary step
            parts.append(grown_table(run.steps, grown))
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
        parts.append(transcript_html(run.state, step_id,  # an agent step's turns and calls
                                     self.widget.pieces.of(step_id)))
        return "".join(parts)


GROWN_ROWS = 25  # rows of a grown step's table; the rest are counted (each is in the list)


def grown_table(steps: Mapping[str, StepState], ids: Sequence[str]) -> str:
    """The steps a step grew, in order: status, args, output (or error), attempts; the
    first :data:`GROWN_ROWS`, then how many more (each one opens from the step list)."""
    def cut(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
        return text if len(text) <= 80 else text[:79] + "…"

    rows = []
    for sid in ids[:GROWN_ROWS]:
        st = steps[sid]
        result = error_text(st.error_kind, st.error) if st.error else \
            (cut(st.output) if st.status == "succeeded" else "")
        rows.append(f"<tr><td><code>{esc(sid)}</code></td><td>{esc(str(st.status))}</td>"
                    f"<td>{esc(cut(st.args) if st.args is not None else '')}</td>"
                    f"<td>{esc(result)}</td><td>{st.attempts}</td></tr>")
    more = len(ids) - GROWN_ROWS
    tail = (f'<div class="cl-note">… and {more} more: pick one in the step list above to '
            "open it</div>" if more > 0 else
            '<div class="cl-note">pick one in the step list above to open it</div>')
    head = "<tr><th>step</th><th>status</th><th>args</th><th>output</th><th>attempts</th></tr>"
    return (f'<div class="cl-label">its {len(ids)} grown steps</div>'
            f'<table class="cl-table cl-grown">{head}{"".join(rows)}</table>{tail}')


def error_text(kind: str | None, error: str | None) -> str:
    """``"timeout: took over 5 s"``; the kind alone when the message only repeats it
    (``"cancelled"``, not ``"cancelled: cancelled"``)."""
    if not error or error == kind:
        return kind or ""
    return f"{kind}: {error}" if kind else error
