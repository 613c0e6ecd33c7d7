"""The run widget's toolbar and the two lines around it, as pure functions of what is drawn
(a :class:`~.host.RunView`): which buttons work in a run's state, the header line (name,
id, status, where the run is driven) and the ready-queue line (what Step would release,
the breakpoints still ahead). No widgets here; :class:`~.widget.RunWidget` draws them."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from chainlab.events.status import RUN_TERMINAL, RunStatus, StepStatus
from chainlab.events.usage import usage_text
from chainlab.jupyter.run_widget.scrubber import RunAt
from chainlab.jupyter.run_widget.starting import Unstarted
from chainlab.render.display import agent_turns, reason_text
from chainlab.runtime.coordination.watching import WatchedRun

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunView

__all__ = ["BUTTONS", "QUEUE_SHOWN", "enabled", "failure_html", "first_failure", "header_html",
           "pending_breakpoints", "queue_html"]

QUEUE_SHOWN = 8  # ready steps named in the queue line (a 30-step fan-out took three lines)
BUTTONS = [  # name, label, icon, tooltip
    ("continue", "Continue", "play",
     "leave step-through mode and run to the end (run.unpause())"),
    ("pause", "Pause", "pause", "start nothing new; running steps finish (run.pause())"),
    ("step", "Step", "step-forward", "release exactly one ready step (run.step())"),
    ("resume", "Resume", "repeat", "drive this stored run from this kernel (runtime.resume)"),
    ("cancel", "Cancel", "stop", "cancel running calls, then compensate (run.cancel())"),
    ("rollback", "Rollback", "undo",
     "compensate completed steps in reverse completion order (run.rollback())"),
]
_ACTIVE = (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.SUSPENDED, RunStatus.COMPENSATING)


def enabled(view: RunView, status: RunStatus, ready: list[str]) -> dict[str, bool]:
    """Button name -> whether it works now. Nothing works on a past state (scrubbing) or on
    a run driven elsewhere (watching: only its decisions do)."""
    live, ended = view.active, status in RUN_TERMINAL
    can = {
        "continue": live and view.paused,
        "pause": live and not view.paused and status in (RunStatus.RUNNING,
                                                         RunStatus.SUSPENDED),
        "step": live and bool(ready) and not ended,
        "resume": not live and status in _ACTIVE,
        "cancel": live and status in (RunStatus.RUNNING, RunStatus.PAUSED,
                                      RunStatus.SUSPENDED),
        "rollback": status not in (RunStatus.ROLLED_BACK, RunStatus.COMPENSATING)
        and bool(view.undoable()),  # the saga's own plan has something to undo
    }
    if isinstance(view, RunAt | WatchedRun | Unstarted):  # history, driven elsewhere, or
        can = dict.fromkeys(can, False)  # not created yet
    return can


def pending_breakpoints(view: RunView) -> list[str]:
    """Breakpoints still ahead: their step has not started, and the run goes on."""
    if view.status in RUN_TERMINAL:
        return []
    return [b for b in view.record.options.get("breakpoints", [])
            if b in view.steps and view.steps[b].status in (StepStatus.PENDING,
                                                            StepStatus.READY)]


def header_html(view: RunView, status: RunStatus, *, last_seq: int) -> str:
    """The line above the toolbar: chain, run id, status, step counts, and where the run is
    (stored, watched, or the scrubbed event out of ``last_seq``)."""
    counts: dict[str, int] = {}
    for st in view.steps.values():
        counts[str(st.status)] = counts.get(str(st.status), 0) + 1
    summary = " · ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items()))
    where = "" if view.active else (
        " · <i>stored run, not driven by this kernel</i>" if status not in RUN_TERMINAL
        else " · <i>from the store</i>")
    driver = view.record.driver
    if not view.active and status not in RUN_TERMINAL and driver is not None \
            and driver.worker:  # a fleet worker drives it (DESIGN §19)
        where = f" · <i>driven by {html.escape(driver.describe())}</i>"
    if isinstance(view, WatchedRun):  # its driver is elsewhere: only decisions work here
        where = f" · <i>watching: {html.escape(view.driven_by())}</i>"
    if isinstance(view, Unstarted):  # shown before the run exists (it starts right after)
        where = " · <i>starting…</i>"
    if status == RunStatus.QUEUED:
        queue = html.escape(str(view.record.queue))
        where = f" · <i>queued in <code>{queue}</code>: a worker of the fleet starts it</i>"
    if isinstance(view, RunAt):
        where = (f' · <span class="cl-scrub-mark" style="font-weight:600">◀ history: '
                 f"after event {view.seq} of {last_seq} (read-only)</span>")
    paused = ""
    at = view.state.paused_at
    if view.paused and at and at in pending_breakpoints(view):  # not once Step passed it
        paused = f" at breakpoint <code>{html.escape(at)}</code>"
    spent = usage_text(view.state.usage)  # the run's totals: tokens and cost
    spent = f' · <span class="cl-usage">{html.escape(spent)}</span>' if spent else ""
    return (f'<div class="cl-head"><b>{html.escape(view.chain.name)}</b> '
            f'<span class="cl-runid">{html.escape(view.run_id)}</span> '
            f'<span class="cl-badge cl-r-{status}">{_words(status)}</span>{paused} '
            f'<span class="cl-summary">{html.escape(summary)}</span>{spent}{where}</div>')


def _words(status: object) -> str:
    """A status as words (``rolled back``, not ``rolled_back``); its class keeps the name."""
    return str(status).replace("_", " ")


def first_failure(view: RunView) -> tuple[str, str] | None:
    """(step id, its error) of the first step that failed (or waits in doubt), in the
    order the steps ended; None when none did."""
    bad = [st for st in view.steps.values() if st.status in _FAILED]
    if not bad:
        return None
    st = min(bad, key=lambda s: (s.ended_at is None, s.ended_at or 0.0))
    # a rejection's reason is what the person typed (issue 40: the line read "rejected:
    # step send_invoice · rejected")
    said = st.error or reason_text(st.status, st.reason)
    return st.step_id, said or str(st.status).replace("_", " ")


_FAILED = frozenset({StepStatus.FAILED, StepStatus.IN_DOUBT, StepStatus.REJECTED})


def failure_html(view: RunView, found: tuple[str, str] | None = None) -> str:
    """The line that names the first failed step and its error ("" when none failed);
    ``found``: :func:`first_failure` of ``view``, when the caller has it already."""
    found = found if found is not None else first_failure(view)
    if found is None:
        return ""
    step_id, error = found
    status = str(view.steps[step_id].status).replace("_", " ")
    return (f'<div class="cl-failure"><b>{html.escape(status)}:</b> step '
            f"<code>{html.escape(step_id)}</code> · {html.escape(error)}</div>")


def queue_html(view: RunView, ready: list[str]) -> str:
    """The ready queue (while paused: what Step would release, in release order; an agent
    step between turns says which model turn Step would ask for) and the breakpoints still
    ahead; "" when there is neither."""
    bps = pending_breakpoints(view)
    parts = []
    if ready and (view.paused or view.status == RunStatus.PAUSED):
        more = len(ready) - QUEUE_SHOWN  # the `next` dropdown lists them all
        turns = agent_turns(view)
        asks = {s: f" (model turn {t[-1].turn})" for s, t in turns.items() if t[-1].next}
        parts.append("ready queue: " + ", ".join(f"<code>{html.escape(s)}</code>"
                                                 + asks.get(s, "")
                                                 for s in ready[:QUEUE_SHOWN])
                     + (f" and {more} more" if more > 0 else ""))
    if bps:
        parts.append("breakpoints: " + ", ".join(f"<code>{html.escape(b)}</code>"
                                                 for b in bps))
    return f'<div class="cl-queue">{" · ".join(parts)}</div>' if parts else ""
