"""Static displays of the magics (a chain with its problems, the tools, the runs) and the
HTML helpers every widget shares (an error box, a JSON value, a step's tool, a problem list).

Each display has a deterministic ``text/plain`` (what nbval checks and what a terminal
shows) and an HTML form for the notebook. The DAG comes from :mod:`chainlab.render`;
without Graphviz the view says so and lists the steps instead.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from collections.abc import Sequence
from typing import Any

from chainlab.errors import ChainlabError, Problem
from chainlab.events.fold import RunState
from chainlab.jupyter._assets import style_tag
from chainlab.plan.schema import Chain
from chainlab.store.base import RunRecord
from chainlab.tools import Toolbox

__all__ = ["ChainView", "RunsTable", "ToolsTable", "dag_svg", "error_html", "pretty",
           "problems_html", "tool_of", "where"]

esc = html.escape


def error_html(exc: BaseException, action: str | None = None) -> str:
    """The one way a widget shows an error: ``⚠ could not ACTION: message`` (the exception's
    class only in the tooltip, or as the text when it has no message: issue 29)."""
    what = f"could not {action}: " if action else ""
    kind = type(exc).__name__
    message = str(exc).strip() or kind
    return (f'<div class="cl-error" title="{html.escape(kind)}">⚠ {html.escape(what)}'
            f"{html.escape(message)}</div>")


def pretty(value: Any, limit: int = 4000) -> str:
    """``value`` as indented JSON (or its str), HTML-escaped, cut at ``limit`` characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    if len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit} more characters)"
    return f'<pre class="cl-pre">{html.escape(text, quote=False)}</pre>'


def tool_of(chain: Chain, step_id: str, state: RunState | None = None) -> str:
    """The tool ``step_id`` calls: a call an agent's model made, its own tool (the run's
    ``state`` records it; the chain names only the agent); a sub-chain's step,
    ``"(in sub-chain NAME)"``; another step grown at run time (a for_each step's instance),
    its parent's; ``"?"`` for a step the chain does not have."""
    if state is not None and state.growth:  # (a run that grew nothing has no agent's call)
        from chainlab.agent.turns import call_tools

        made = call_tools(state).get(step_id)
        if made is not None:
            return made
    top = step_id.split("/")[0]
    for step in chain.steps:
        if step.id == top:
            return step.tool if top == step_id else f"(in sub-chain {step.tool})"
    st = state.steps.get(step_id) if state is not None else None
    if st is not None and st.parent is not None:
        return tool_of(chain, st.parent, state)
    return "?"


def where(p: Problem) -> str:
    """Where a problem is, as a prefix of its message: ``"line 3, step 'a', args.n: "``."""
    bits = []
    if p.line is not None:
        bits.append(f"line {p.line}")
    if p.step_id:
        bits.append(f"step {p.step_id!r}")
    if p.field:
        bits.append(p.field)
    return f"{', '.join(bits)}: " if bits else ""


def problems_html(problems: Sequence[Problem], css_class: str = "cl-problems") -> str:
    """The problems as a list (code, where, message); "" when there are none."""
    if not problems:
        return ""
    items = "".join(f'<li><code>{esc(p.code)}</code> {esc(where(p))}{esc(p.message)}'
                    "</li>" for p in problems)
    return f'<ul class="{css_class}">{items}</ul>'


def dag_svg(chain: Chain, toolbox: Toolbox | None, problems: Sequence[Problem] = ()) -> str:
    """The chain's DAG as SVG markup with faulty steps marked, or a short HTML note saying
    why it cannot be drawn (Graphviz missing)."""
    try:
        from chainlab.render import chain_svg

        chains = dict(toolbox.chains) if toolbox is not None else None
        return str(chain_svg(chain, toolbox, problems=list(problems) or None, chains=chains))
    except (ImportError, ChainlabError) as exc:  # GraphvizUnavailable, GraphvizError
        return f'<div class="cl-note">DAG not drawn: {esc(str(exc))}</div>'


class ChainView:
    """A chain, its problems (if any) and its DAG."""

    def __init__(self, chain: Chain, toolbox: Toolbox | None, problems: Sequence[Problem],
                 *, note: str | None = None, report: Any = None):
        self.chain = chain
        self.toolbox = toolbox
        self.problems = list(problems)
        self.note = note
        self.report = report

    @property
    def ok(self) -> bool:
        return not self.problems

    def _head(self) -> str:
        n = len(self.chain.steps)
        where = f" (toolbox {self.toolbox.name!r})" if self.toolbox is not None else ""
        verdict = "valid" if self.ok else (
            f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}")
        return f"chain {self.chain.name!r}{where}: {n} step{'s' if n != 1 else ''}, {verdict}"

    def _report_lines(self, *, described: bool = False) -> list[str]:
        """How the chain was planned; ``described``: its description is shown too, so an
        adjustment it already says is not said twice (issue 40)."""
        r = self.report
        if r is None:
            return []
        who = getattr(r, "answered_by", None) or "nobody"
        rounds = len(getattr(r, "rounds", []) or [])
        line = f"planned by {who}"
        if getattr(r, "model", None) and who == "model":
            line += f" ({r.model}, {rounds} round{'s' if rounds != 1 else ''})"
        if getattr(r, "fallback_reason", None):
            line += f"; fallback because: {r.fallback_reason}"
        told = (self.chain.description or "") if described else ""
        return [line, *[f"adjusted: {a}" for a in dict.fromkeys(getattr(r, "adjustments", []))
                        if a not in told]]

    def __repr__(self) -> str:
        lines = [self._head()]
        if self.note:
            lines.append(f"note: {self.note}")
        lines += self._report_lines()
        derived = self.chain.dependencies() if self.ok else {}
        width = max([14, *(len(s.id) + 1 for s in self.chain.steps)])  # long ids stay apart
        for step in self.chain.steps:
            deps = sorted(derived.get(step.id, ())) if self.ok else step.depends_on
            after = f"  <- {', '.join(deps)}" if deps else ""
            lines.append(f"  {step.id:<{width}} {step.tool}{after}")
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [style_tag(), '<div class="cl-chain">',
                 f'<div class="cl-head">{esc(self._head())}</div>']
        if self.note:
            parts.append(f'<div class="cl-note">{esc(self.note)}</div>')
        if self.chain.description:
            parts.append(f'<div class="cl-desc">{esc(self.chain.description)}</div>')
        parts += [f'<div class="cl-note">{esc(line)}</div>'
                  for line in self._report_lines(described=bool(self.chain.description))]
        if self.problems:
            parts.append(problems_html(self.problems))
        parts.append(f'<div class="cl-dag">{dag_svg(self.chain, self.toolbox, self.problems)}'
                     "</div></div>")
        return "".join(parts)


def _flags(meta: dict[str, Any]) -> str:
    flags = []
    if meta["side_effects"]:
        flags.append("side effects" + ("" if not meta["idempotent"] else " (idempotent)"))
    if meta["requires_confirmation"]:
        flags.append("confirm" if meta["requires_confirmation"] is True else "confirm (by args)")
    if meta["compensate"]:
        flags.append(f"undo: {meta['compensate']}")
    if meta["serial_key"]:
        flags.append(f"serial: {meta['serial_key']}")
    flags = flags or ["read-only"]
    if meta.get("origin"):  # an MCP server's tool: where it comes from
        flags.append(meta["origin"])
    return ", ".join(flags)


def _params(meta: dict[str, Any]) -> str:
    props = meta["input_schema"].get("properties", {})
    required = set(meta["input_schema"].get("required", []))
    return ", ".join(p if p in required else f"{p}?" for p in props)


class ToolsTable:
    """The tools of a toolbox with their side-effect contract."""

    def __init__(self, toolbox: Toolbox):
        self.toolbox = toolbox
        self.rows = [(m["name"], _params(m), _flags(m), (m["description"] or "").split("\n")[0])
                     for m in toolbox.describe()]

    def __repr__(self) -> str:
        head = f"toolbox {self.toolbox.name!r}: {len(self.rows)} tools"
        w = max([len(r[0]) for r in self.rows] + [4])
        return "\n".join([head, *[f"  {n:<{w}}  ({p})  {f}" + (f"  - {d}" if d else "")
                                   for n, p, f, d in self.rows]])

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{esc(n)}</code></td><td>{esc(p)}</td><td>{esc(f)}</td>"
                       f"<td>{esc(d)}</td></tr>" for n, p, f, d in self.rows)
        return (f'{style_tag()}<div class="cl-head">toolbox {esc(self.toolbox.name)!r}</div>'
                '<table class="cl-table"><tr><th>tool</th><th>args</th><th>contract</th>'
                f"<th>description</th></tr>{rows}</table>")


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


class RunsTable:
    """Runs in a store, newest first."""

    def __init__(self, records: Sequence[RunRecord], where: str):
        self.records = list(records)
        self.where = where

    def __repr__(self) -> str:
        lines = [f"{len(self.records)} run{'s' if len(self.records) != 1 else ''} in "
                 f"{self.where}"]
        lines += [f"  {r.run_id}  {r.chain_name:<16} {r.status:<16} epoch {r.epoch}  "
                  f"{_when(r.created_at)}" + (f"  forked from {r.lineage}" if r.lineage else "")
                  for r in self.records]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        forks = any(r.lineage for r in self.records)
        rows = "".join(
            f"<tr><td><code>{esc(r.run_id)}</code></td><td>{esc(r.chain_name)}</td>"
            f'<td><span class="cl-badge cl-r-{esc(r.status)}">'
            f'{esc(str(r.status).replace("_", " "))}</span></td>'
            f"<td>{r.epoch}</td><td>{_when(r.created_at)}</td>"
            + (f"<td>{esc(r.lineage or '')}</td>" if forks else "") + "</tr>"
            for r in self.records)
        return (f'{style_tag()}<div class="cl-head">{esc(repr(self).splitlines()[0])}</div>'
                '<table class="cl-table"><tr><th>run</th><th>chain</th><th>status</th>'
                f"<th>epoch</th><th>created</th>{'<th>forked from</th>' if forks else ''}"
                f"</tr>{rows}</table>")
