"""An agent step's transcript in the run widget's inspector (DESIGN §18): a table with a row
per call the model made (its turn, what the model said, the call as the model wrote it, the
step it became and its status, what the model was told) and a row for the final answer;
while the model streams a turn (an agent with ``stream=True``), a row with its text so far.

The turns are read by the agent's read side (:mod:`chainlab.agent.turns`) from the state the
inspector draws (the live run, or the run at the scrubbed event), so the inspector asks no
step which kind it is: a step with no recorded turn gets no transcript. A call's step shows
its own tool (:func:`chainlab.jupyter.views.tool_of`), not the agent's."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from chainlab.events.status import STEP_TERMINAL
from chainlab.events.usage import usage_text
from chainlab.plan.parts import names_an_agent

if TYPE_CHECKING:
    from chainlab.events.fold import RunState

__all__ = ["transcript_html"]

esc = html.escape
_HEAD = ("turn", "model said", "call", "step", "status", "told to the model", "usage")
_CLIP = 240  # characters of a text shown in a cell (the whole text in its tooltip)


def transcript_html(state: RunState, step_id: str,
                    writing: tuple[int, str] | None = None) -> str:
    """The transcript of agent step ``step_id`` as an HTML table under a label, or ``""``
    for a step that is not an agent step (or has asked its model nothing yet).
    ``writing``: ``(turn, text so far)`` of the turn the model is streaming, shown last
    (its end, when longer than a cell) until the turn is recorded."""
    if not any(rec.step_id == step_id and names_an_agent(rec.tool) for rec in state.attempts):
        return ""  # never ran an agent: no transcript (and nothing of the agent package read)
    from chainlab.agent.turns import agent_step_ids, transcript

    if step_id not in agent_step_ids(state):
        return ""
    rows = []
    turns = transcript(state, step_id)
    for turn in turns:
        calls: list[dict[str, Any] | None] = list(turn["calls"]) or [None]
        span = len(calls)
        for n, call in enumerate(calls):
            cells = []
            if n == 0:  # the turn's own cells span its calls' rows
                said = turn["content"] or ""
                if turn.get("feedback"):
                    said = f"{said} (sent back: {turn['feedback']})".strip()
                cells += [_cell(str(turn["turn"]), span), _cell(said, span)]
            cells += _call_cells(call, final=bool(turn.get("final")))
            if n == 0:
                cells.append(_cell(usage_text(turn["usage"], turn.get("usage_unknown")), span))
            rows.append(f"<tr>{''.join(cells)}</tr>")
    if writing is not None and writing[0] > len(turns):
        said = writing[1] if len(writing[1]) <= _CLIP else "…" + writing[1][-(_CLIP - 1):]
        rows.append(f"<tr>{_cell(str(writing[0]))}{_cell(said)}{_cell('')}{_cell('')}"
                    f"{_cell('writing…')}{_cell('')}{_cell('')}</tr>")
    head = "".join(f"<th>{h}</th>" for h in _HEAD)
    return (f'<div class="cl-label">transcript</div><table class="cl-table cl-transcript">'
            f"<tr>{head}</tr>{''.join(rows)}</table>")


def _call_cells(call: dict[str, Any] | None, *, final: bool) -> list[str]:
    if call is None:
        return [_cell(""), _cell(""), _cell("final answer" if final else ""), _cell("")]
    written = f"{call['function']}({call['arguments']})"
    if call["step_id"] is None:  # refused to the model: never a step
        return [_cell(written), _cell("-"), _cell("refused"), _cell(call["result"])]
    told = call["result"] if call["status"] in STEP_TERMINAL else ""  # not settled: not yet
    return [_cell(written), _cell(call["step_id"], code=True),
            f'<td><span class="cl-badge cl-s-{esc(call["status"])}">'
            f'{esc(call["status"].replace("_", " "))}</span></td>', _cell(told)]


def _cell(text: str, span: int = 1, *, code: bool = False) -> str:
    shown = text if len(text) <= _CLIP else text[:_CLIP - 1] + "…"
    title = f' title="{esc(text)}"' if shown != text else ""
    rowspan = f' rowspan="{span}"' if span > 1 else ""
    body = f"<code>{esc(shown)}</code>" if code else esc(shown)
    return f"<td{rowspan}{title}>{body}</td>"
