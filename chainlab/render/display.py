"""Drawings of chains and runs as SVG and as Jupyter mime bundles (``_repr_mimebundle_``).

A bundle holds ``image/svg+xml`` (static: it survives nbconvert to HTML and GitHub's
notebook viewer) and ``text/plain``; a run's also holds ``text/html`` (:func:`run_html`: the
same SVG and a table of step statuses), the fallback the live widget carries too. Without
any Graphviz it holds ``text/plain`` only, with the fix in it, so a bare ``chain`` in a
cell never prints a traceback.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from chainlab.events.status import StepStatus
from chainlab.render.dot import Drawing, draw_chain
from chainlab.render.json import job_caption
from chainlab.render.markup import add_legend
from chainlab.render.style import TIMES

if TYPE_CHECKING:
    from chainlab.agent.turns import TurnShape
    from chainlab.events.fold import RunState, StepState
    from chainlab.plan.schema import Chain
    from chainlab.runtime.runtime import Run
    from chainlab.tools import Toolbox

__all__ = [
    "agent_turns",
    "chain_mimebundle",
    "chain_svg",
    "drawing_svg",
    "drawn_steps",
    "reason_text",
    "run_badges",
    "run_dot",
    "run_drawing",
    "run_html",
    "run_mimebundle",
    "run_notes",
    "run_status_table",
    "run_statuses",
    "run_svg",
    "step_badges",
]

S = StepStatus


def reason_text(status: str, reason: object) -> str:
    """A step's reason as shown after its status, without repeating the status: ``""`` for
    ``cancelled`` / ``cancelled``, ``"by a person"`` for ``cancelled`` / ``cancelled by a
    person``, ``"upstream failed"`` for ``skipped`` / ``upstream_failed`` (never "cancelled ·
    cancelled", issue 18)."""
    text = str(reason or "").replace("_", " ").strip()
    word = str(status).replace("_", " ")
    if text == word:
        return ""
    if text.startswith(word + " "):
        return text[len(word) + 1:]
    return text


#: how a for_each step's instances are counted on its node, in this order: (symbol, word,
#: the statuses counted)
_COUNTED = (
    ("✓", "", (S.SUCCEEDED,)),
    ("◔", "", (S.RUNNING, S.READY, S.RETRY_WAIT)),
    ("☐", " awaiting approval", (S.WAITING_CONFIRMATION,)),
    ("⚠", " in doubt", (S.IN_DOUBT,)),
    ("✗", "", (S.FAILED, S.REJECTED, S.COMPENSATION_FAILED)),
    ("↩", " undone", (S.COMPENSATED, S.COMPENSATING)),
    ("⇥", " skipped", (S.SKIPPED,)),
    ("■", " cancelled", (S.CANCELLED,)),
    ("○", " pending", (S.PENDING,)),
)


def instance_counts(steps: Mapping[str, StepState], ids: list[str]) -> str:
    """A grown step's instances counted by status: ``"✓ 12 · ◔ 3 · ☐ 2 awaiting approval ·
    ✗ 1"`` (one node stands for them all, whatever their number)."""
    tally: dict[str, int] = {}
    for step_id in ids:
        st = steps.get(step_id)
        status = st.status if st is not None else S.PENDING
        tally[status] = tally.get(status, 0) + 1
    parts = []
    for symbol, word, statuses in _COUNTED:
        n = sum(tally.get(s, 0) for s in statuses)
        if n:
            parts.append(f"{symbol} {n:,}{word}")
    return " · ".join(parts) if parts else "0 items"


#: how a confirmed step's badge says who decided it when a person did not (DESIGN §21)
_BY = {"policy": " by rule", "grant": " by grant"}


def step_badges(steps: Mapping[str, StepState]) -> dict[str, str]:
    """Short texts shown after a step's status: the attempt count when above one (``TIMES``
    and the number), repeated compensations (``undo`` and the count), why it was skipped /
    is in doubt / was cancelled, and ``approved`` (``approved by rule``, ``approved by
    grant``) or ``edited`` for a confirmed step, ``by rule`` for one a rule rejected (a
    for_each step's instances counted: :func:`run_badges`)."""
    out: dict[str, str] = {}
    for step_id, st in steps.items():
        parts = []
        if st.attempts > 1:
            parts.append(f"{TIMES}{st.attempts}")
        if st.compensations > 1:
            parts.append(f"undo {TIMES}{st.compensations}")
        if st.status in (S.SKIPPED, S.IN_DOUBT, S.CANCELLED) and st.reason:
            reason = reason_text(st.status, st.reason)
            if reason:
                parts.append(reason if len(reason) <= 20 else reason[:19] + "…")
        by = (st.decided or {}).get("by") or ""
        if st.approval and st.status != S.WAITING_CONFIRMATION:
            parts.append("edited" if st.approval.get("edited") else "approved"
                         + _BY.get(by.partition(":")[0], ""))
        elif st.status == S.REJECTED and by.startswith("policy:"):
            parts.append("by rule")  # (the status line reads "rejected · by rule")
        job = job_caption(st) if st.job is not None else None
        if job is not None:  # a remote job: the status line reads "waiting · job 7f3c · 40%"
            parts.insert(0, job)
        if parts:
            out[step_id] = " · ".join(parts)
    return out


class Shown(Protocol):
    """What a drawing reads of a run: a live ``Run``, or the run at an earlier event (the
    widget's scrubber)."""

    @property
    def steps(self) -> Mapping[str, StepState]: ...
    @property
    def state(self) -> RunState: ...
    @property
    def chain(self) -> Chain: ...
    @property
    def runtime(self) -> Any: ...
    @property
    def toolbox(self) -> Any: ...
    @property
    def record(self) -> Any: ...


def drawn_steps(run: Shown) -> Mapping[str, StepState]:
    """The run's steps that its DAG draws, by id: every step of its chain and of its
    sub-chains (``parent/child``) and the calls of each agent step drawn as the cluster of
    its turns (:func:`agent_turns`), but not the instances of a for_each step (its one node
    counts them): what a drawing reads costs the same whatever the number of instances."""
    steps = run.steps
    if not run.state.children:
        return steps
    out: dict[str, StepState] = {}
    agents = agent_turns(run)

    def add(step_id: str) -> None:
        st = steps.get(step_id)
        if st is not None:
            out[step_id] = st
        for turn in agents.get(step_id, ()):
            for call_id, _ in turn.calls:
                add(call_id)

    def walk(chain: Chain, prefix: str, seen: tuple[str, ...]) -> None:
        for step in chain.steps:
            step_id = prefix + step.id
            add(step_id)
            sub = chains.get(step.subchain_name or "") if step.is_subchain else None
            if sub is not None and step.for_each is None and sub.name not in seen:
                walk(sub, step_id + "/", (*seen, sub.name))

    chains = _run_chains(run)
    walk(run.chain, "", (run.chain.name,))
    return out


class _Recorded(Protocol):
    @property
    def state(self) -> RunState: ...


def agent_turns(run: _Recorded) -> dict[str, tuple[TurnShape, ...]]:
    """The turns of each agent step of the run that has grown (the agent's read side,
    :func:`~chainlab.agent.turns.turn_shapes`): what its cluster draws. A run that grew
    nothing has none (and loads nothing of the agent package)."""
    if not run.state.growth:
        return {}
    from chainlab.agent.turns import turn_shapes

    return turn_shapes(run.state)


def run_statuses(run: Shown) -> dict[str, str]:
    """``{step_id: status}`` of every step the run's DAG draws (sub-chain steps as
    ``parent/child``; a for_each step's instances are counted on it, not listed)."""
    return {step_id: str(st.status) for step_id, st in drawn_steps(run).items()}


def run_badges(run: Shown) -> dict[str, str]:
    """:func:`step_badges` of the steps the run's DAG draws (feed it to ``LiveDag.css``)."""
    drawn = drawn_steps(run)
    children = run.state.children
    badges = step_badges(drawn)
    for step_id, ids in children.items():  # a for_each step: its instances counted
        if step_id in drawn:
            badges[step_id] = " · ".join(
                b for b in (instance_counts(run.steps, ids), badges.get(step_id)) if b)
    return badges


def run_notes(run: Run) -> dict[str, str]:
    """Tooltip text per drawn step: status, attempts, reason and the last error."""
    out: dict[str, str] = {}
    for step_id, st in drawn_steps(run).items():
        lines = [f"status: {st.status}" + (f" ({st.reason})" if st.reason else "")]
        if st.attempts:
            lines.append(f"attempts: {st.attempts}")
        if st.error:
            error = f"{st.error_kind}: {st.error}" if st.error_kind else st.error
            lines.append(error if len(error) <= 300 else error[:299] + "…")
        out[step_id] = "\n".join(lines)
    return out


def _run_chains(run: Shown) -> dict[str, Chain]:
    from chainlab.plan.schema import Chain

    chains = dict(getattr(run.runtime, "chains", {}) or {})
    chains.update({name: Chain.from_dict(data) for name, data in run.record.chains.items()})
    return chains


def run_drawing(run: Run, *, scope: str | None = None,
                rankdir: Literal["TB", "LR"] = "TB") -> Drawing:
    """The :class:`~chainlab.render.dot.Drawing` of a run: its chain with every step's status,
    badges and tooltips, titled with the run's status (no run id or time, so a drawing of the
    same state is the same text)."""
    return draw_chain(run.chain, run.toolbox, run_statuses(run), None, _run_chains(run),
                      badges=run_badges(run), notes=run_notes(run),
                      title=f"{run.chain.name} · run {run.status}", rankdir=rankdir,
                      scope=scope, agents=agent_turns(run))


def run_dot(run: Run) -> str:
    """DOT text of a run: its chain drawn with each step's status (see :func:`chain_dot`)."""
    return run_drawing(run).dot


def drawing_svg(drawing: Drawing, *, legend: bool = True, backend: str = "auto",
                present: Iterable[str] | None = None) -> str:
    """SVG of a drawing (laid out by Graphviz, see :func:`to_svg`, or for a large one by
    chainlab: :mod:`chainlab.render.layout`), with its legend beside it; with ``present``
    (the statuses that occur), the legend lists only those statuses.

    Raises GraphvizUnavailable, GraphvizError.
    """
    from chainlab.render.layout import layout_svg

    svg = layout_svg(drawing, backend=backend)
    if not legend:
        return svg
    statuses = drawing.statuses and (True if present is None else frozenset(present))
    return add_legend(svg, drawing.scope, statuses=statuses, kinds=drawing.kinds,
                      edge_kinds=drawing.edge_kinds)


def chain_svg(chain: Chain, toolbox: Toolbox | None = None,
              statuses: Mapping[str, str] | None = None, problems: Iterable[Any] | None = None,
              chains: Mapping[str, Chain] | None = None, *, legend: bool = True,
              backend: str = "auto", **options: Any) -> str:
    """SVG of :func:`chain_dot` (same arguments; ``options`` are its keyword arguments) with a
    legend. Raises GraphvizUnavailable, GraphvizError, ValueError (unknown status)."""
    drawing = draw_chain(chain, toolbox, statuses, problems, chains, **options)
    return drawing_svg(drawing, legend=legend, backend=backend)


def run_svg(run: Run, *, legend: bool = True, backend: str = "auto") -> str:
    """SVG of a run's DAG with statuses and a legend. Raises GraphvizUnavailable,
    GraphvizError."""
    return drawing_svg(run_drawing(run), legend=legend, backend=backend,
                       present=set(run_statuses(run).values()))


def _chain_text(chain: Chain) -> str:
    ids = [s.id for s in chain.steps]
    shown = ", ".join(ids[:10]) + (", …" if len(ids) > 10 else "")
    n = len(ids)
    listed = f" ({shown})" if ids else ""
    return f"<Chain {chain.name!r}: {n} step{'s' if n != 1 else ''}{listed}>"


def _bundle(drawing: Drawing, text: str, present: Iterable[str] | None = None
            ) -> dict[str, Any]:
    from chainlab.render.svg import GraphvizError, GraphvizUnavailable

    try:
        return {"image/svg+xml": drawing_svg(drawing, present=present), "text/plain": text}
    except (GraphvizUnavailable, GraphvizError) as exc:
        return {"text/plain": f"{text}\n(not drawn: {exc})"}


def chain_mimebundle(chain: Chain, toolbox: Toolbox | None = None,
                     problems: Iterable[Any] | None = None,
                     chains: Mapping[str, Chain] | None = None) -> dict[str, Any]:
    """The Jupyter display of a chain: its DAG as SVG plus a one-line text. Without a
    ``toolbox`` the default toolbox (tools registered with ``@chainlab.tool``) tells step
    kinds. Never raises for a missing Graphviz (the text says how to install one)."""
    if toolbox is None:
        from chainlab.tools import default_toolbox

        toolbox = default_toolbox
    return _bundle(draw_chain(chain, toolbox, None, problems, chains), _chain_text(chain))


def run_mimebundle(run: Run) -> dict[str, Any]:
    """The Jupyter display of a run: its DAG with step statuses, as SVG, plus its repr and a
    count of step statuses, and :func:`run_html` (the static fallback as ``text/html``)."""
    counts: dict[str, int] = {}
    for st in run.steps.values():
        counts[str(st.status)] = counts.get(str(st.status), 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    bundle = _bundle(run_drawing(run), f"{run!r} steps: {summary}", present=counts)
    svg = bundle.get("image/svg+xml", "")
    bundle["text/html"] = run_html(run, svg=svg, svg_titled=bool(svg))
    return bundle


def run_status_table(run: Run) -> str:
    """An HTML table of the run's steps: step, tool, status (with its badge), attempts, and
    the reason or last error."""
    tools = {s.id: s.tool for s in run.chain.steps}
    if run.state.growth:  # an agent's calls: the tool the model chose
        from chainlab.agent.turns import call_tools

        tools.update(call_tools(run.state))
    badges = run_badges(run)
    rows = []
    for step_id, st in drawn_steps(run).items():  # (a for_each step's instances counted)
        status = str(st.status) + (f" · {badges[step_id]}" if step_id in badges else "")
        why = st.error if st.error and st.error != str(st.status) else reason_text(
            st.status, st.reason)
        rows.append(
            f'<tr class="cl-row-{html.escape(str(st.status))}">'
            f"<td><code>{html.escape(step_id)}</code></td>"
            f"<td>{html.escape(tools.get(step_id, ''))}</td>"
            f"<td>{html.escape(status)}</td><td>{st.attempts}</td>"
            f"<td>{html.escape(why[:300])}</td></tr>")
    return ('<table class="cl-status-table"><thead><tr><th>step</th><th>tool</th>'
            "<th>status</th><th>attempts</th><th>reason / error</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def run_html(run: Run, *, svg: str | None = None, svg_titled: bool = False) -> str:
    """The static picture of a run as HTML: a title with the run's status, its DAG (``svg``,
    drawn here when not given; left out without Graphviz) and :func:`run_status_table`.
    Plain markup, no script: nbconvert, GitHub and a reopened notebook show it as it was.
    The title is written once: not above an SVG that carries it (``svg_titled``, as the
    one drawn here does; an export printed it twice, issue 40)."""
    from chainlab.render.svg import GraphvizError, GraphvizUnavailable

    if svg is None:
        try:
            svg, svg_titled = run_svg(run), True
        except (GraphvizUnavailable, GraphvizError):
            svg = ""
    title = "" if svg and svg_titled else (
        f"<p><b>{html.escape(run.chain.name)}</b> · run "
        f'<span class="cl-run-status">{html.escape(str(run.status).replace("_", " "))}'
        "</span></p>")
    return (f'<div class="cl-static-run">{title}{svg}{run_status_table(run)}</div>')
