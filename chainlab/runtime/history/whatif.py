"""What-if: replay a run's recorded durations on the REAL scheduler in virtual time (DESIGN
§12). No tool runs and nothing is written: a simulated clock jumps from one call's end to the
next, and the :class:`~chainlab.runtime.engine.scheduler.Scheduler` decides what starts, with the
same slots, serial keys, pools and release order as a live run.

Each step occupies a slot for the sum of its recorded call attempts (back-off waits and a
person's decisions hold no slot, so they are left out); a step that never ran takes no time.
Every step counts as ending well, so the replay compares release orders, not outcomes.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chainlab.runtime.engine.attempt.kinds import KINDS
from chainlab.runtime.engine.scheduler import Scheduler
from chainlab.runtime.history.estimates import priority_of, upward_ranks

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node

__all__ = ["Slot", "simulate"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One simulated call, seconds from the run's start; or (``parent``) the span of a step
    with steps of its own (a sub-chain, a for_each step), which holds no slot."""

    step_id: str
    start: float
    end: float
    parent: bool = False


def simulate(
    nodes: Mapping[str, Node],
    top: list[str],
    durations: Mapping[str, float],
    *,
    max_concurrency: int,
    priority: str = "declaration",
    pools: Mapping[str, int] | None = None,
    keys: Mapping[str, str | None] | None = None,
) -> list[Slot]:
    """The schedule the scheduler would produce with these call durations, in release order.
    ``priority``: ``declaration`` or ``critical_path`` (ranked by these same durations);
    ``keys``: each step's resolved serial key (pool units come from its tool)."""
    if priority not in ("declaration", "critical_path"):
        raise ValueError(f"priority must be 'declaration' or 'critical_path', got {priority!r}")
    prio = priority_of(upward_ranks(nodes, durations)) if priority == "critical_path" else None
    sched = Scheduler({sid: (n.deps, n.order) for sid, n in nodes.items()},
                      max_concurrency=max_concurrency, pools=pools, priority=prio)
    keys = keys or {}
    now = 0.0
    running: list[tuple[float, int, str]] = []
    slots: list[Slot] = []
    open_kids: dict[str, int] = {}
    group_start: dict[str, float] = {}

    def ready(step_id: str) -> None:
        tool = nodes[step_id].tool
        sched.ready(step_id, keys.get(step_id), tool.resources if tool is not None else None)

    def finish(step_id: str) -> None:
        for nxt in sched.done(step_id, ok=True):
            ready(nxt)
        group = nodes[step_id].group
        if group is not None:
            open_kids[group] -= 1
            if open_kids[group] == 0:
                slots.append(Slot(group, group_start[group], now, parent=True))
                finish(group)

    for step_id in sched.start(top):
        ready(step_id)
    seq = 0
    while True:
        while isinstance(got := sched.take(), str):
            node = nodes[got]
            if KINDS[node.kind].has_children:  # holds no slot while its children run
                sched.park(got)
                sched.release(got)
                group_start[got] = now
                open_kids[got] = len(node.children)
                for child in sched.start(node.children):
                    ready(child)
                if not node.children:
                    slots.append(Slot(got, now, now, parent=True))
                    finish(got)
                continue
            end = now + max(0.0, durations.get(got, 0.0))
            heapq.heappush(running, (end, seq, got))
            seq += 1
            slots.append(Slot(got, now, end))
        if not running:
            break
        now, _, step_id = heapq.heappop(running)
        sched.release(step_id)
        finish(step_id)
    return sorted(slots, key=lambda s: s.start)  # stable: release order among equal starts
