"""Fault injection from the notebook (issue 19): the run widget's "Faults" section and
:func:`run_fault`, which it shares with the ``%chain fault`` magic
(:mod:`chainlab.jupyter.magics.faults`): both call the one API,
:func:`chainlab.runtime.faults.inject`, on the run's loop, with ``by="widget"`` /
``by="magic"`` so the event log says who injected what.

The section is collapsed and its buttons are off until "enable" is ticked: a demo tool, not
something a click should do by accident. ``kill`` is only offered in a disposable driver
process; a notebook kills a subprocess driver instead (``chainlab.testing.driver``).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events.status import RUN_TERMINAL
from chainlab.runtime.faults import RAISABLE, Fault, inject, is_disposable

if TYPE_CHECKING:
    from chainlab.jupyter.run_widget.host import RunHost
    from chainlab.jupyter.session import NotebookSession, ShownRun
    from chainlab.runtime.run import Run

__all__ = ["FaultsPanel", "fault_lines", "run_fault"]

_BUTTONS = [  # fault, label, tooltip
    (Fault.TIMEOUT, "Time out next attempt",
     "the step's next call runs, then its answer is lost: a timeout (inject(run, 'timeout'))"),
    (Fault.RAISE, "Raise once",
     "the step's tool raises the chosen error kind once, before its body runs"),
    (Fault.SECOND_DRIVER, "Second driver",
     "another driver takes the run over (next epoch); this one is fenced: its next write is "
     "refused"),
    (Fault.KILL, "Kill driver",
     "SIGKILL the driving process mid-step: only in a disposable driver process; from a "
     "notebook use chainlab.testing.driver.SubprocessDriver(..., kill_at=STEP)"),
]


async def run_fault(run: Run, fault: str, step_id: str | None = None, *, by: str,
                    session: NotebookSession | None = None, widget: ShownRun | None = None,
                    **options: Any) -> Any:
    """``await inject(run, ...)``; a second driver's run is then remembered by the session
    and shown by the widget (it took the run over)."""
    new = await inject(run, fault, step_id, by=by, **options)
    if new is not None:
        if session is not None:
            session.remember(new, session.run_stores.get(run.run_id))
        if widget is not None and widget.run is not new:
            widget.attach(new)
    return new


def fault_lines(view: Any) -> list[tuple[str, str]]:
    """``(state, text)`` per fault injected into the run: ``armed`` (waits for the step's
    next call), ``fired`` (that call failed with it), or ``did not fire`` (the step ended
    without another call). Issue 29: the panel said nothing of either."""
    out: list[tuple[str, str]] = []
    state = view.state
    for f in state.faults:
        step_id = f.get("step_id")
        what = f"{f.get('fault')}" + (f" ({f['error_kind']})" if f.get("error_kind") else "")
        by = f" by {f['by']}" if f.get("by") else ""
        if step_id is None:
            out.append(("fired", f"{what}{by}: hit the driver"))
            continue
        calls = [a for a in state.attempts if a.step_id == step_id and a.kind == "call"
                 and a.started_at >= f["ts"]]
        st = view.steps.get(step_id)
        if calls and calls[0].ended_at is not None:
            out.append(("fired", f"{what} on {step_id!r}{by}: fired at attempt "
                                 f"{calls[0].attempt}"))
        elif calls:
            out.append(("armed", f"{what} on {step_id!r}{by}: armed, its call is running"))
        elif st is not None and st.done:
            out.append(("did not fire", f"{what} on {step_id!r}{by}: did not fire (the step "
                                        f"ended {st.status} without another call)"))
        else:
            out.append(("armed", f"{what} on {step_id!r}{by}: armed, fires at its next call"))
    return out


class FaultsPanel(W.Accordion):
    """The widget's collapsed "Faults" section: pick a step (and an error kind), press."""

    def __init__(self, widget: RunHost):
        self.widget = widget
        self.enabled = W.Checkbox(value=False, description="enable fault injection (demo)",
                                  indent=False, layout=W.Layout(width="auto"))
        self.step = W.Dropdown(description="step", options=[], layout=W.Layout(width="16em"))
        self.error_kind = W.Dropdown(description="error", options=[str(k) for k in RAISABLE],
                                     value="transient", layout=W.Layout(width="14em"))
        self.buttons: dict[str, W.Button] = {}
        for fault, label, tip in _BUTTONS:
            b = W.Button(description=label, tooltip=tip, disabled=True,
                         layout=W.Layout(width="auto"))
            b.on_click(widget.on_loop(lambda _, f=fault: self.press(f)))
            self.buttons[str(fault)] = b
        self.note = W.HTML()
        self.status = W.HTML()  # what each injected fault did (armed, fired, did not fire)
        self.enabled.observe(widget.on_loop(lambda _: self.refresh()), names="value")
        body = W.VBox([self.enabled, W.HBox([self.step, self.error_kind]),
                       W.HBox(list(self.buttons.values())), self.note, self.status])
        super().__init__(children=[body], selected_index=None)
        self.set_title(0, "Faults")
        self.add_class("cl-faults")
        self.observe(widget.on_loop(lambda _: self.refresh()), names="selected_index")

    def targets(self) -> list[str]:
        """Steps a fault can hit: tool steps of the live run that have not finished (none
        while the scrubber shows the past)."""
        if not self.widget.view.active:
            return []
        run = self.widget.run
        compiled = run.compiled()
        nodes = compiled[0].nodes if compiled is not None else {}
        return [step_id for step_id, st in run.steps.items()
                if not st.done and step_id in nodes and nodes[step_id].tool is not None]

    def refresh(self) -> None:
        """Steps and buttons for the run's current state (cheap; only while expanded)."""
        lines = fault_lines(self.widget.view)
        status = "".join(
            f'<div class="cl-fault cl-fault-{state.replace(" ", "-")}"><b>{html.escape(state)}'
            f"</b> · {html.escape(text)}</div>" for state, text in lines)
        if self.status.value != status:
            self.status.value = status
        title = "Faults" + (f" ({sum(s == 'armed' for s, _ in lines)} armed)"
                            if any(s == "armed" for s, _ in lines) else "")
        if self.get_title(0) != title:
            self.set_title(0, title)
        if self.selected_index is None and not self.enabled.value:
            return
        targets = self.targets()
        if list(self.step.options) != targets:
            self.step.options = targets
        view = self.widget.view
        live = self.enabled.value and view.active and view.status not in RUN_TERMINAL
        for fault, button in self.buttons.items():
            ok = live and (bool(targets) or fault == Fault.SECOND_DRIVER)
            if fault == Fault.KILL:
                ok = ok and is_disposable()
            button.disabled = not ok

    def press(self, fault: str) -> None:
        """Inject ``fault`` into the widget's run (``panel.buttons[name].click()``)."""
        if not self.enabled.value:
            raise ValueError("fault injection is off: tick 'enable fault injection' first")
        w = self.widget
        step = None if fault == Fault.SECOND_DRIVER else self.step.value
        options = {"error_kind": self.error_kind.value} if fault == Fault.RAISE else {}
        what = f"inject {fault}" + (f" into {step}" if step else "")
        self.note.value = f"<span class='cl-muted'>{what} (by widget)</span>"
        w.act(what, lambda: run_fault(w.run, fault, step, by="widget", session=w.session,
                                      widget=w, **options))
