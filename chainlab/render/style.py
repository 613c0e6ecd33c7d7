"""The one palette of chainlab: how every step status (and step kind) looks, everywhere.

:func:`step_kind` says which kind a step is (its shape and markers in the DAG).

The DAG (:mod:`chainlab.render`), the live widget and the timeline plot
(:mod:`chainlab.timeline`) all take their colours from :data:`STATUS_STYLE`, so a status
looks the same in every view.

Design rules:

* **Readable in light and dark themes.** Nodes are self-contained "cards": a light tint as
  fill with near-black text (contrast >= 10:1), a saturated border that stands out on white
  and on JupyterLab's dark background alike. Everything drawn directly on the page background
  (edges, edge labels, titles, cluster borders) is a mid grey that works on both.
* **Colour-blind safe.** Hues come from the Okabe-Ito palette (blue, sky blue, bluish green,
  yellow, orange, vermillion, reddish purple) plus greys, and colour is never the only cue:
  every status also has a symbol and a word (``badge`` + ``label``, drawn in the node as text)
  and a border pattern (``line``: solid / dashed / dotted) and width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from chainlab.events.status import StepStatus

if TYPE_CHECKING:
    from chainlab.plan.parts import Step
    from chainlab.tools import Tool, Toolbox

__all__ = [
    "CLUSTER_FILL",
    "CLUSTER_STROKE",
    "EDGE_COLOR",
    "FONT",
    "FONT_NAME",
    "JOB_CAPTIONS",
    "KIND_MARK",
    "LONGEST_CAPTION",
    "MUTED_TEXT",
    "NEUTRAL",
    "PROBLEM",
    "RESERVED_COUNTS_LINE",
    "RESERVED_LINE",
    "STATUS_STYLE",
    "TIMES",
    "WAITING_MARK",
    "Kind",
    "StatusStyle",
    "dasharray",
    "status_line",
    "status_style",
    "step_kind",
]

LineStyle = Literal["solid", "dashed", "dotted"]

#: the font Graphviz lays out with: the system ``dot`` measures it with the installed font,
#: the WebAssembly build with its built-in metrics table (a family list would make it fall
#: back to Times metrics and draw boxes too narrow); matplotlib ships it too
FONT_NAME = "DejaVu Sans"
#: what the SVG asks the browser for (``clean_svg`` widens Graphviz's ``font-family``)
FONT = "DejaVu Sans,Verdana,sans-serif"
#: edges and their arrows (on the page background: mid grey works on light and dark)
EDGE_COLOR = "#7f7f7f"
#: text drawn on the page background (titles, edge labels, legend caption)
MUTED_TEXT = "#767676"


@dataclass(frozen=True, slots=True)
class StatusStyle:
    """How one status is drawn.

    ``fill`` node background, ``stroke`` border, ``text`` text colour, ``badge`` a one-character
    symbol and ``label`` a short word (both shown in the node, so colour is never the only
    cue), ``line`` the border pattern and ``width`` the border width in points.
    """

    fill: str
    stroke: str
    text: str
    badge: str
    label: str
    line: LineStyle = "solid"
    width: float = 1.0

    @property
    def caption(self) -> str:
        """Badge and label: ``"✓ succeeded"``."""
        return f"{self.badge} {self.label}"


#: the multiplication sign of attempt badges (``f"{TIMES}3"``: third attempt)
TIMES = "\u00d7"
_DARK = "#1a1a1a"
S = StepStatus

#: status -> style, for all 14 step statuses (a read-only mapping; keys are the status values)
STATUS_STYLE: Mapping[str, StatusStyle] = MappingProxyType({
    S.PENDING: StatusStyle("#f4f4f4", "#8c8c8c", _DARK, "○", "pending", "dashed", 1.0),
    S.READY: StatusStyle("#e3f1fb", "#56b4e9", _DARK, "◔", "ready", "solid", 1.5),
    S.RUNNING: StatusStyle("#cce4f6", "#0072b2", _DARK, "▶", "running", "solid", 2.5),
    S.RETRY_WAIT: StatusStyle("#fdf2c4", "#b58900", _DARK, "↻", "retry wait", "dashed", 2.0),
    S.WAITING_CONFIRMATION: StatusStyle("#ffe2b0", "#e69f00", _DARK, "☐", "awaiting approval",
                                        "solid", 2.5),
    S.SUCCEEDED: StatusStyle("#cdeee0", "#009e73", _DARK, "✓", "succeeded", "solid", 1.5),
    S.FAILED: StatusStyle("#f8d0bc", "#d55e00", _DARK, "✗", "failed", "solid", 2.5),
    S.SKIPPED: StatusStyle("#fafafa", "#b3b3b3", "#595959", "⇥", "skipped", "dotted", 1.0),
    S.REJECTED: StatusStyle("#f4d6e6", "#cc79a7", _DARK, "⊘", "rejected", "solid", 2.0),
    S.IN_DOUBT: StatusStyle("#fff1a6", "#a07a00", _DARK, "⚠", "in doubt", "dashed", 2.5),
    S.CANCELLED: StatusStyle("#e6e6e6", "#6b6b6b", _DARK, "■", "cancelled", "dotted", 1.5),
    S.COMPENSATING: StatusStyle("#e8dcf3", "#8f5fb8", _DARK, "↶", "compensating", "dashed", 2.0),
    S.COMPENSATED: StatusStyle("#efe6f7", "#7d5ba6", _DARK, "↩", "compensated", "solid", 1.5),
    S.COMPENSATION_FAILED: StatusStyle("#f8d0bc", "#8f5fb8", _DARK, "↯", "compensation failed",
                                       "solid", 2.5),
})

#: a step of a chain drawn without a run (no status)
NEUTRAL = StatusStyle("#ffffff", "#595959", _DARK, "", "", "solid", 1.2)
#: the border of a step that has plan problems (``%%chain`` with errors)
PROBLEM = StatusStyle("#ffffff", "#d55e00", _DARK, "⚠", "problem", "dashed", 2.5)
#: a sub-chain cluster without status: translucent grey works on light and dark pages
CLUSTER_FILL = "#8080801a"
CLUSTER_STROKE = "#808080"

#: step kind -> the marker printed before the tool name
KIND_MARK: Mapping[str, str] = MappingProxyType({
    "plain": "",
    "effect": "⚡",  # side effects (not idempotent)
    "idempotent": "⚡=",  # side effects, safe to repeat
    "confirm": "☐",  # needs a person's approval first
    "subchain": "⇢",  # a sub-chain (drawn as a cluster when its chain is known)
    "for_each": "▤",  # runs once per item of a list known at run time (one node for all)
    "agent": "✦",  # a model choosing tool calls turn by turn (a cluster of its turns)
})

#: the longest status line, reserved in live views so a node never grows when it changes
LONGEST_CAPTION = max((s.caption for s in STATUS_STYLE.values()), key=len)

_DASH = {"solid": "none", "dashed": "5,2", "dotted": "1,5"}


def dasharray(line: str) -> str:
    """SVG ``stroke-dasharray`` value that Graphviz emits for the style ``line``."""
    return _DASH[line]


def status_style(status: str) -> StatusStyle:
    """The style of ``status``. Raises ValueError naming the valid statuses."""
    try:
        return STATUS_STYLE[status]
    except KeyError:
        valid = ", ".join(STATUS_STYLE)
        raise ValueError(f"unknown step status {status!r}; expected one of: {valid}") from None


def status_line(status: str, badge: str | None = None) -> str:
    """The text line a node shows for its status: caption, then `` · badge`` if any. A
    running remote job that waits shows what it waits for instead of ``running``:
    ``"◷ waiting · job 7f3c · 40%"`` (the badge :func:`chainlab.render.json.job_caption`
    makes)."""
    if badge and status == "running" and badge.startswith(JOB_CAPTIONS):
        return f"{WAITING_MARK} {badge}"
    caption = status_style(status).caption
    return f"{caption} · {badge}" if badge else caption


#: the status line a live view lays out in every node (so a node never grows when it
#: changes): the longest caption, or the usual badged lines if longer ("⇥ skipped · upstream
#: failed", "✓ succeeded · approved"), which were cut to "upstream…" / "approv…" (issue 29);
#: a rarer, longer line still ends in an ellipsis inside the node (the tooltip has it all)
RESERVED_LINE = max([LONGEST_CAPTION, status_line("skipped", "upstream failed"),
                     status_line("compensated", "approved"),
                     status_line("succeeded", f"{TIMES}2 · approved")], key=len)

#: how a remote job's caption begins (chainlab.render.json.job_caption), and its mark
JOB_CAPTIONS = ("waiting · job", "submitting · job")
WAITING_MARK = "◷"
#: the same for a for_each step, whose line counts its instances by status
RESERVED_COUNTS_LINE = status_line("running", "✓ 9,999 · ◔ 99 · ☐ 9,999 awaiting approval")

#: a step's kind, which decides its shape in the DAG
Kind = Literal["plain", "effect", "idempotent", "confirm", "subchain"]


def step_kind(step: Step, toolbox: Toolbox | None) -> tuple[Kind, str]:
    """The step's kind (which decides its shape) and its markers (``"☐⚡"``; a for_each
    step's begin with ``▤``, an agent step's with ``✦``)."""
    kind, marks = _kind(step, toolbox)
    tool = toolbox.get(step.tool) if toolbox is not None and step.tool in toolbox else None
    if tool is not None and tool.kind in KIND_MARK:  # the tool's own attempt kind ("agent")
        marks = KIND_MARK[tool.kind] + marks
    return kind, (KIND_MARK["for_each"] + marks if step.for_each is not None else marks)


def _kind(step: Step, toolbox: Toolbox | None) -> tuple[Kind, str]:
    if step.is_subchain:
        return "subchain", KIND_MARK["subchain"]
    tool: Tool | None = toolbox.get(step.tool) if toolbox is not None and \
        step.tool in toolbox else None
    confirm: bool | str = False
    if step.confirm is not None:
        confirm = step.confirm
    elif tool is not None and tool.requires_confirmation:
        confirm = True if tool.requires_confirmation is True else "maybe"
    effect: Kind = "plain"
    if tool is not None and tool.side_effects:
        effect = "idempotent" if tool.idempotent else "effect"
    marks = ""
    if confirm:
        marks += KIND_MARK["confirm"] + ("?" if confirm == "maybe" else "")
    marks += KIND_MARK[effect]
    if step.when:
        marks += "◇"
    return ("confirm" if confirm else effect), marks
