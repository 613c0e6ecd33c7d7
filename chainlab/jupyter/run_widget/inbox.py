"""The approvals inbox: one card per step that waits for a person.

A step waiting for confirmation gets an :class:`ApprovalCard` (tool, resolved args, preview,
Approve / Reject with a reason, optional edit of the args; "Approve all N" when it is one of
several waiting steps a step grew, e.g. a for_each step's instances); an in-doubt step gets a
:class:`DoubtCard` (what went wrong, then: it took effect with this output / retry / fail).
Cards call the run's public API through their host (:class:`~.host.CardHost`: the run
widget, or the team inbox of :mod:`chainlab.jupyter.remote`), like a script would.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from chainlab.events.status import StepStatus
from chainlab.jupyter.views import error_html, pretty, tool_of

if TYPE_CHECKING:
    from chainlab.events.fold_state import StepState
    from chainlab.jupyter.run_widget.host import CardHost

__all__ = ["ApprovalCard", "DoubtCard", "Inbox", "waiting_groups"]


class _Card(W.VBox):
    """A card: drawn from ``host.view`` when made, its decisions go to ``host.run``."""

    key: tuple[Any, ...]

    def __init__(self, widget: CardHost, step_id: str, children: list[W.Widget]):
        self.widget = widget
        self.step_id = step_id
        self.message = W.HTML()
        super().__init__([*children, self.message])
        self.add_class("cl-card")

    def act(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self.message.value = ""
        self.widget.act(what, make, on_error=self.fail)

    def fail(self, exc: BaseException) -> None:
        self.message.value = error_html(exc)

    def parse_json(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, "
                             f"column {exc.colno})") from None


class ApprovalCard(_Card):
    """Approve or reject one step that waits for confirmation."""

    def __init__(self, widget: CardHost, step_id: str, group: tuple[str, int] | None = None):
        st = widget.view.steps[step_id]
        self.key = ("confirm", step_id, st.args_hash)
        over = st.reason == "budget_exceeded"  # the run's budget stops it, not its tool
        tool = tool_of(widget.view.chain, step_id, widget.view.state)
        title = W.HTML(f'<div class="cl-card-title">☐ <b>{html.escape(step_id)}</b> '
                       f"<code>{html.escape(tool)}</code> "
                       + ("would cross the run's budget" if over else "waits for approval")
                       + "</div>")
        # a tool without a preview of its own previews its args: say so once, not twice
        # (issue 40: PREVIEW and RESOLVED ARGS showed the same JSON)
        self.preview = W.HTML(
            '<div class="cl-note">(no preview: the tool runs with the args below)</div>'
            if st.preview == st.args else
            f'<div class="cl-label">preview</div>{pretty(st.preview)}')
        # a budget stop: the raised budget goes with the approval (empty: only this step)
        self.budget = W.Text(placeholder='raise the budget: {"max_cost": 2.0}',
                             layout=W.Layout(width="24em", display="" if over else "none"))
        args = W.HTML(f'<div class="cl-label">resolved args</div>{pretty(st.args)}')
        self.edit_toggle = W.Checkbox(description="edit args before approving", indent=False)
        self.edit = W.Textarea(value=json.dumps(st.args, indent=2, sort_keys=True, default=str),
                               layout=W.Layout(width="100%", height="8em", display="none"))
        self.edit_toggle.observe(self._toggle, names="value")
        self.approve_button = W.Button(description="Approve", button_style="success",
                                       icon="check", tooltip=f"run {step_id} with these args")
        self.reason = W.Text(placeholder="reason (required to reject)",
                             layout=W.Layout(width="18em"))
        self.reject_button = W.Button(description="Reject", button_style="danger",
                                      icon="times", tooltip=f"do not run {step_id}")
        # one of several waiting steps a step grew (a for_each step's instances): all at once
        self.all_button = W.Button(button_style="success", icon="check-double",
                                   layout=W.Layout(display="none"))
        self.group: str | None = None
        self.set_group(group)
        self.approve_button.on_click(lambda _: self.approve())
        self.all_button.on_click(lambda _: self.approve_all())
        self.reject_button.on_click(lambda _: self.reject())
        buttons = W.HBox([self.approve_button, self.all_button, self.reason,
                          self.reject_button])
        self.similar = _Similar(self, st.args or {}) if not over else None
        super().__init__(widget, step_id, [title, self.preview, args, self.budget,
                                           self.edit_toggle, self.edit, buttons,
                                           *([self.similar] if self.similar else [])])

    def _toggle(self, change: dict[str, Any]) -> None:
        self.edit.layout.display = "" if change["new"] else "none"

    def approve(self) -> None:
        """What the Approve button does (the edited args when "edit" is ticked)."""
        args = None
        if self.edit_toggle.value:
            try:
                args = self.parse_json(self.edit.value, "the edited args")
            except ValueError as exc:
                self.fail(exc)
                return
            if not isinstance(args, dict):
                self.fail(ValueError("the edited args must be a JSON object"))
                return
            if args == self.widget.run.steps[self.step_id].args:
                args = None  # unchanged: approve what was shown
        budget = None
        if self.budget.value.strip():
            try:
                budget = self.parse_json(self.budget.value, "the raised budget")
            except ValueError as exc:
                self.fail(exc)
                return
        run, step_id = self.widget.run, self.step_id
        if budget is not None:
            self.act("approve", lambda: run.approve(step_id, args, note="budget raised in the "
                                                    "widget", budget=budget))
            return
        self.act("approve", lambda: run.approve(step_id, args, note="approved in the widget"))

    def set_group(self, group: tuple[str, int] | None) -> None:
        """``(parent, n)``: this step is one of ``n`` waiting steps ``parent`` grew; the
        card then offers to approve them all (each with its own args). None: it is not."""
        self.group = group[0] if group else None
        self.all_button.layout.display = "" if group else "none"
        if group:
            parent, n = group
            self.all_button.description = f"Approve all {n}"
            self.all_button.tooltip = (f"approve the {n} waiting steps of {parent}, each "
                                       "with its own args (each recorded as its own approval)")

    def approve_all(self) -> None:
        """What the "Approve all N" button does: every waiting step of this step's parent,
        each with its own args (``run.approve_all``)."""
        if self.group is None:
            return
        run, parent = self.widget.run, self.group
        self.act("approve", lambda: run.approve_all(parent, note="approved in the widget "
                                                                 "(approve all)"))

    def reject(self) -> None:
        """What the Reject button does (a reason is required)."""
        reason = self.reason.value.strip()
        if not reason:
            self.fail(ValueError("write a reason before rejecting"))
            return
        run, step_id = self.widget.run, self.step_id
        self.act("reject", lambda: run.reject(step_id, reason))


class _Similar(W.VBox):
    """"Approve and allow similar…" (DESIGN §21): the approval with a grant, its condition
    prefilled from the call's args (editable, checked before it is sent), its scope and how
    long it lasts. The runtime checks it again (an arg the tool lacks, a TTL that is not a
    duration) and the card shows what it refused; nothing is recorded then."""

    def __init__(self, card: ApprovalCard, args: Mapping[str, Any]):
        from chainlab.plan.policies import condition_like

        self.card = card
        self.toggle = W.Checkbox(description="approve and allow similar…", indent=False)
        self.when = W.Text(value=condition_like(args), description="when",
                           layout=W.Layout(width="95%"))
        self.scope = W.Dropdown(options=["step", "run"], value="step", description="scope",
                                layout=W.Layout(width="12em"))
        self.ttl = W.Text(value="10m", description="for", layout=W.Layout(width="10em"))
        # (its label does not say "approve": a page's "Approve" button stays the only one)
        self.button = W.Button(description="Allow similar", icon="check-double",
                               button_style="success", layout=W.Layout(width="auto"),
                               tooltip="approve this call, and the calls of the same tool in "
                                       "this scope whose args match, until it expires")
        self.button.on_click(lambda _: self.grant())
        self.form = W.VBox([self.when, W.HBox([self.scope, self.ttl, self.button])],
                           layout=W.Layout(display="none"))
        self.toggle.observe(self._toggle, names="value")
        super().__init__([self.toggle, self.form])
        self.add_class("cl-grant")
        self.when.add_class("cl-grant-when")

    def _toggle(self, change: dict[str, Any]) -> None:
        self.form.layout.display = "" if change["new"] else "none"

    def grant(self) -> None:
        """What the button does: the condition checked here first, then ``run.approve(step,
        grant=...)``."""
        from chainlab.plan.policies import condition

        card = self.card
        try:
            condition(self.when.value)
        except ValueError as exc:
            card.fail(ValueError(f"the grant's {exc}"))
            return
        grant = {"when": self.when.value, "scope": self.scope.value, "ttl_s": self.ttl.value}
        run, step_id = card.widget.run, card.step_id
        card.act("approve", lambda: run.approve(step_id, note="approved in the widget, with "
                                                "a grant", grant=grant))


class DoubtCard(_Card):
    """Decide a step whose unsafe call may or may not have taken effect."""

    def __init__(self, widget: CardHost, step_id: str):
        st = widget.view.steps[step_id]
        self.key = ("in_doubt", step_id, st.attempts)
        tool = tool_of(widget.view.chain, step_id, widget.view.state)
        title = W.HTML(
            f'<div class="cl-card-title">⚠ <b>{html.escape(step_id)}</b> '
            f"<code>{html.escape(tool)}</code> is in doubt "
            "after attempt "
            f"{st.attempts}: {html.escape(st.error_kind or '')} {html.escape(st.error or '')}"
            "</div><div class='cl-note'>The tool has side effects and is not idempotent, so "
            "chainlab did not repeat it. Check the outside world (idempotency key "
            f"<code>{html.escape(st.idempotency_key or '-')}</code>), then decide.</div>")
        self.output = W.Textarea(value="null", layout=W.Layout(width="100%", height="4em"),
                                 placeholder="the output it produced (JSON)")
        self.took_effect_button = W.Button(description="It took effect", button_style="success",
                                           tooltip="mark succeeded with the output above")
        self.retry_button = W.Button(description="Retry", button_style="warning",
                                     tooltip="it did not happen: call the tool again")
        self.fail_button = W.Button(description="Mark failed", button_style="danger")
        self.took_effect_button.on_click(lambda _: self.took_effect())
        self.retry_button.on_click(lambda _: self.decide(retry=True))
        self.fail_button.on_click(lambda _: self.decide(fail=True))
        buttons = W.HBox([self.took_effect_button, self.retry_button, self.fail_button])
        super().__init__(widget, step_id, [title, W.HTML('<div class="cl-label">output</div>'),
                                           self.output, buttons])

    def took_effect(self) -> None:
        try:
            output = self.parse_json(self.output.value, "the output")
        except ValueError as exc:
            self.fail(exc)
            return
        run, step_id = self.widget.run, self.step_id
        self.act("resolve", lambda: run.resolve(step_id, output=output,
                                                note="resolved in the widget"))

    def decide(self, *, retry: bool = False, fail: bool = False) -> None:
        run, step_id = self.widget.run, self.step_id
        self.act("resolve", lambda: run.resolve(step_id, retry=retry, fail=fail,
                                                note="resolved in the widget"))


class Inbox(W.VBox):
    """Cards for every step waiting for a person, kept in step order; a card survives
    refreshes (so a half-typed reason is not lost) until its step stops waiting.

    While the scrubber shows the past (``host.view`` is not ``host.run``), the cards are of
    that moment and read-only; back live, they are drawn again from the run."""

    def __init__(self, widget: CardHost):
        self.widget = widget
        self.cards: dict[str, _Card] = {}
        self.empty = W.HTML('<div class="cl-note">Nothing waits for a decision.</div>')
        self._historic = False  # the cards were drawn from a past state
        super().__init__([self.empty])
        self.add_class("cl-inbox")

    def sync(self) -> None:
        """Add cards for new waiting steps, drop cards of steps that stopped waiting."""
        view = self.widget.view
        historic = view is not self.widget.run
        if self._historic and not historic:  # back live: cards drawn from history go
            self.cards.clear()
            self.children = [self.empty]
        self._historic = historic
        steps = view.steps
        waiting = {step_id: st.status for step_id, st in steps.items()
                   if st.status in (StepStatus.WAITING_CONFIRMATION, StepStatus.IN_DOUBT)}
        changed = False
        for step_id in list(self.cards):
            card = self.cards[step_id]
            if step_id not in waiting or card.key != self._key(step_id):
                del self.cards[step_id]
                changed = True
        groups = waiting_groups(steps, [s for s, status in waiting.items()
                                        if status == StepStatus.WAITING_CONFIRMATION])
        for step_id, status in waiting.items():
            found = self.cards.get(step_id)
            if found is None:
                self.cards[step_id] = ApprovalCard(self.widget, step_id, groups.get(step_id)) \
                    if status == StepStatus.WAITING_CONFIRMATION else \
                    DoubtCard(self.widget, step_id)
                changed = True
            elif isinstance(found, ApprovalCard):  # (a trait set to its value sends nothing)
                found.set_group(groups.get(step_id))
        if changed:
            self.children = [self.cards[s] for s in steps if s in self.cards] or [self.empty]
        if historic:
            for card in self.cards.values():  # history is read-only
                _disable(card)

    def _key(self, step_id: str) -> tuple[Any, ...]:
        st = self.widget.view.steps[step_id]
        if st.status == StepStatus.WAITING_CONFIRMATION:
            return ("confirm", step_id, st.args_hash)
        return ("in_doubt", step_id, st.attempts)

    def card(self, step_id: str) -> _Card:
        """The card of ``step_id`` (brought up to date first). Raises KeyError listing the
        waiting steps."""
        self.sync()
        try:
            return self.cards[step_id]
        except KeyError:
            raise KeyError(f"no card for step {step_id!r}; waiting: "
                           f"{', '.join(self.cards) or 'nothing'}") from None


def waiting_groups(steps: Mapping[str, StepState], waiting: Iterable[str]
                   ) -> dict[str, tuple[str, int]]:
    """For each of the ``waiting`` steps (waiting for confirmation) that a step grew, with
    others of that parent waiting too: ``(parent, how many of its steps wait)``."""
    waiting = [s for s in waiting if steps[s].parent is not None]
    count = Counter(steps[s].parent for s in waiting)
    return {s: (p, count[p]) for s in waiting if count[p := steps[s].parent or ""] > 1}


def _disable(widget: W.Widget) -> None:
    """Disable every control inside ``widget`` (a card drawn from history)."""
    if hasattr(widget, "disabled"):
        widget.disabled = True
    for child in getattr(widget, "children", ()):
        _disable(child)
