"""How long steps take, and the critical-path release priority (DESIGN §12).

* :func:`history` reads successful call durations of recent runs from any store (the same
  fold every view uses): per step of a chain, per tool.
* :func:`estimate` gives each step of a compiled graph a duration: its own history (median,
  p90), else its tool's history, else the tool's ``expected_duration_s`` hint, else the median
  of the known ones (0 when nothing is known).
* :func:`usage_estimates` gives each step the median cost and tokens of its calls (its own
  history, else its tool's; nothing when no call ever reported usage): what a budget
  (``options.budget``) compares with before it releases a step.
* :func:`upward_ranks` is HEFT's upward rank: a step's estimate plus the longest ranked path
  below it. Releasing the highest rank first (ties by declaration order) starts the long
  chain before the short side branches.
"""

from __future__ import annotations

import graphlib
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from chainlab.events import AttemptStatus, read_run

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node

__all__ = [
    "Estimate",
    "History",
    "budget_estimates",
    "estimate",
    "history",
    "priority_of",
    "recorded_order",
    "release_order",
    "upward_ranks",
    "usage_estimates",
]

RECENT_RUNS = 200  # runs read for a history, newest first
SAME_CHAIN_RUNS = 20  # of which at most this many of the same chain
KEEP = 200  # most recent durations kept per step and per tool


@dataclass(frozen=True, slots=True)
class Estimate:
    """A step's expected duration. ``source``: step | tool | hint | default. ``cost`` and
    ``tokens``: median usage of one call (None when no call of it reported any)."""

    step_id: str
    tool: str
    median_s: float
    p90_s: float
    samples: int
    source: str
    cost: float | None = None
    tokens: float | None = None


@dataclass(slots=True)
class History:
    """Successful call durations: per (chain, step) and per tool, the most recent
    :data:`KEEP` of each, oldest first. Lists, not ``deque(maxlen=)``: a history keeps one
    per step, and a deque costs about 600 bytes even for one value (a 10,000-step chain
    learned 6 MB of them); :meth:`add_run`, the one writer, drops the oldest."""

    by_step: dict[tuple[str, str], list[float]] = field(
        default_factory=lambda: defaultdict(list))
    by_tool: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # usage of successful calls that reported any (cost, tokens), per (chain, step), per tool
    usage_by_step: dict[tuple[str, str], list[dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(list))
    usage_by_tool: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(list))

    runs: int = 0  # runs added so far

    def add_run(self, chain_name: str, attempts: Any) -> None:
        """Add the succeeded calls of one run (its folded ``AttemptRecord``s)."""
        self.runs += 1
        by_step, by_tool, succeeded = self.by_step, self.by_tool, AttemptStatus.SUCCEEDED
        for rec in attempts:
            if rec.kind != "call" or rec.status != succeeded or rec.ended_at is None \
                    or rec.tool is None:
                continue
            took = rec.ended_at - rec.started_at
            # a clock that jumped records nonsense (inf, nan, a negative span): never learn
            # it, so a release order and its recorded estimates stay plain numbers
            if not 0.0 <= took < math.inf:  # (False for nan too)
                continue
            recent = by_step[(chain_name, rec.step_id)]
            recent.append(took)
            if len(recent) > KEEP:
                del recent[0]
            recent = by_tool[rec.tool]
            recent.append(took)
            if len(recent) > KEEP:
                del recent[0]
            if rec.usage:
                for used in (self.usage_by_step[(chain_name, rec.step_id)],
                             self.usage_by_tool[rec.tool]):
                    used.append(rec.usage)
                    if len(used) > KEEP:
                        del used[0]


def history(store: Any, limit: int = RECENT_RUNS) -> History:
    """Durations of the store's recent runs (blocking reads; call from a worker thread)."""
    out = History()
    per_chain: dict[str, int] = defaultdict(int)
    for record in store.list_runs(limit):
        if per_chain[record.chain_name] >= SAME_CHAIN_RUNS:
            continue
        per_chain[record.chain_name] += 1
        _, _, state = read_run(store, record.run_id)
        out.add_run(record.chain_name, state.attempts)
    return out


def _stats(values: Any) -> tuple[float, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return statistics.median(ordered), p90


def estimate(nodes: Mapping[str, Node], chain_name: str, hist: History) -> dict[str, Estimate]:
    """An estimate for every step (sub-chain steps: 0, their children carry the time)."""
    out: dict[str, Estimate] = {}
    unknown: list[str] = []
    tool_stats: dict[str, tuple[float, float]] = {}
    for step_id, node in nodes.items():
        tool = node.tool
        if tool is None:
            out[step_id] = Estimate(step_id, node.step.tool, 0.0, 0.0, 0, "subchain")
            continue
        own = hist.by_step.get((chain_name, step_id))
        pool = hist.by_tool.get(tool.name)
        if own:
            out[step_id] = Estimate(step_id, tool.name, *_stats(own), len(own), "step")
        elif pool:
            if tool.name not in tool_stats:
                tool_stats[tool.name] = _stats(pool)
            out[step_id] = Estimate(step_id, tool.name, *tool_stats[tool.name], len(pool), "tool")
        elif tool.expected_duration_s is not None:
            hint = float(tool.expected_duration_s)
            out[step_id] = Estimate(step_id, tool.name, hint, hint, 0, "hint")
        else:
            unknown.append(step_id)
    known = [e.median_s for e in out.values() if e.source != "subchain"]
    fill = statistics.median(known) if known else 0.0
    for step_id in unknown:
        tool_name = nodes[step_id].step.tool
        out[step_id] = Estimate(step_id, tool_name, fill, fill, 0, "default")
    usage = usage_estimates(nodes, chain_name, hist)
    for step_id, one in usage.items():
        out[step_id] = replace(out[step_id], cost=one.get("cost"), tokens=one.get("tokens"))
    return out


def usage_estimates(nodes: Mapping[str, Node], chain_name: str, hist: History
                    ) -> dict[str, dict[str, float]]:
    """``{step_id: {"cost": median, "tokens": median}}`` for the steps whose calls (or whose
    tool's calls) reported usage; a key only for what was reported."""
    out: dict[str, dict[str, float]] = {}
    for step_id, node in nodes.items():
        if node.tool is None:
            continue
        seen = hist.usage_by_step.get((chain_name, step_id)) or \
            hist.usage_by_tool.get(node.tool.name)
        if not seen:
            continue
        one: dict[str, float] = {}
        for key in ("cost", "tokens"):
            values = [u[key] for u in seen if isinstance(u.get(key), int | float)]
            if values:
                one[key] = round(float(statistics.median(values)), 10)
        if one:
            out[step_id] = one
    return out


def budget_estimates(nodes: Mapping[str, Node], chain_name: str, hist: History | None
                     ) -> dict[str, dict[str, float]]:
    """What a budget compares with: per step the median cost, tokens and seconds of one
    call (only what is known). Recorded in ``run_started``, so a resume uses the same."""
    if hist is None:
        return {}
    out = usage_estimates(nodes, chain_name, hist)
    for step_id, seconds in (medians(nodes, chain_name, hist) or {}).items():
        if nodes[step_id].tool is not None:
            out.setdefault(step_id, {})["seconds"] = seconds
    return out


def upward_ranks(nodes: Mapping[str, Node], seconds: Mapping[str, float]) -> dict[str, float]:
    """Estimated time from a step's start to the end of the run along its longest path
    below it (a sub-chain step ranks by its children; a child with no successor in its
    sub-chain continues with its parent's successors). Iterative: 10,000-step chains too."""

    def after(node: Node) -> list[str]:
        while not node.succ and node.group is not None:
            node = nodes[node.group]
        return node.succ

    below = {sid: (n.children or after(n)) for sid, n in nodes.items()}
    # the steps with nothing below them first, then each once all below it have a rank
    # (Kahn's order, in plain dicts: graphlib's cycle search alone cost a 1,000-step
    # fan-out 2 ms per start)
    above: dict[str, list[str]] = {sid: [] for sid in below}
    left: dict[str, int] = {}
    for step_id, under in below.items():
        left[step_id] = len(under)
        for s in under:
            above[s].append(step_id)
    todo = [step_id for step_id, n in left.items() if n == 0]
    ranks: dict[str, float] = {}
    get = seconds.get
    while todo:
        step_id = todo.pop()
        under = below[step_id]
        ranks[step_id] = get(step_id, 0.0) + (max([ranks[s] for s in under]) if under else 0.0)
        for s in above[step_id]:
            left[s] -= 1
            if left[s] == 0:
                todo.append(s)
    if len(ranks) != len(below):  # (a validated chain has no cycle)
        raise graphlib.CycleError("steps depend on each other in a cycle",
                                  sorted(set(below) - set(ranks)))
    return ranks


def priority_of(ranks: Mapping[str, float]) -> Callable[[str], float]:
    """The scheduler's priority key: the longest remaining path first. Ranks are compared at
    millisecond resolution, so paths that differ only by measurement noise tie, and ties go
    in declaration order."""
    keys = _Keys({step_id: -round(rank, 3) for step_id, rank in ranks.items()})
    return keys.__getitem__  # a C-level lookup per ready step, no Python frame


class _Keys(dict[str, float]):
    """Priority keys; a step grown while the run goes (a for_each instance ``ID[i]``, or a
    step under one) ranks as the step that grew it; another step without a rank as 0."""

    def __missing__(self, step_id: str) -> float:
        if step_id.endswith("]") or "]/" in step_id:
            return self[step_id[:step_id.rindex("[")]]
        return 0.0


def release_order(
    nodes: Mapping[str, Node], chain_name: str, policy: str, hist: History | None
) -> tuple[Callable[[str], float] | None, dict[str, Any]]:
    """The scheduler's priority key for ``policy`` and what to record in ``run_started`` so
    that a replay (or a resumed run) releases in exactly the same order. ``auto`` keeps
    declaration order when nothing is known, or when the order cannot matter (a plain chain:
    never two steps ready at once)."""
    if policy == "declaration" or hist is None:
        return None, {"priority": "declaration"}
    if policy == "auto" and _one_at_a_time(nodes):
        return None, {"priority": "declaration"}
    seconds = medians(nodes, chain_name, hist)
    if seconds is None:
        if policy == "auto":
            return None, {"priority": "declaration"}
        seconds = {e.step_id: e.median_s for e in estimate(nodes, chain_name, hist).values()}
    return recorded_order({"priority": "critical_path", "estimates": seconds}, nodes), {
        "priority": "critical_path", "estimates": seconds}


def _one_at_a_time(nodes: Mapping[str, Node]) -> bool:
    roots = 0
    for node in nodes.values():
        if len(node.succ) > 1 or node.children:
            return False
        roots += not node.deps
    return roots <= 1


def medians(nodes: Mapping[str, Node], chain_name: str, hist: History
            ) -> dict[str, float] | None:
    """Median seconds per step (the hot path of ``release_order``: no Estimate objects);
    None when no step has any history or hint."""
    out: dict[str, float] = {}
    by_tool: dict[str, float | None] = {}
    unknown: list[str] = []
    for step_id, node in nodes.items():
        tool = node.tool
        if tool is None:
            out[step_id] = 0.0
            continue
        own = hist.by_step.get((chain_name, step_id))
        if own:
            out[step_id] = round(_median(own), 6)
            continue
        if tool.name not in by_tool:
            pool = hist.by_tool.get(tool.name)
            by_tool[tool.name] = round(_median(pool), 6) if pool else (
                None if tool.expected_duration_s is None else float(tool.expected_duration_s))
        value = by_tool[tool.name]
        if value is None:
            unknown.append(step_id)
        else:
            out[step_id] = value
    known = [out[s] for s, n in nodes.items() if n.tool is not None and s in out]
    if not known:
        return None
    fill = round(statistics.median(known), 6)
    for step_id in unknown:
        out[step_id] = fill
    return out


def _median(values: Any) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def recorded_order(payload: Mapping[str, Any], nodes: Mapping[str, Node]
                   ) -> Callable[[str], float] | None:
    """The priority key a run recorded in its ``run_started`` payload. None also when the
    critical path orders every step exactly as declaration order does (ranks that never grow
    along the declaration): the scheduler then skips the key on its hot path."""
    if payload.get("priority") != "critical_path":
        return None
    ranks = upward_ranks(nodes, payload.get("estimates") or {})
    key = priority_of(ranks)
    previous = float("-inf")
    for node in sorted(nodes.values(), key=_ORDER):
        rank = key(node.id)
        if rank < previous:
            return key
        previous = rank
    return None


_ORDER = attrgetter("order")  # (a node's declaration order, read at C speed)

