"""Budgets (``options.budget``: ``max_cost``, ``max_tokens``, ``max_duration_s``): before a
step's attempt starts, what the run has spent plus what the step is expected to spend is
compared with each limit. One that would be crossed suspends the step, like a confirmation,
with reason ``budget_exceeded`` for a person: ``run.approve(step, budget={...})`` raises the
budget and continues (an approval without a new budget lets this step run once), and
``run.reject(step, reason)`` stops (under ``fail_fast`` the run then compensates and ends).
A running step is never interrupted: the check happens only before a call.

What a step is expected to spend: the mean of its calls' usage in this run (a retry costs
about what the attempts before it did), else the median of its history (recorded in the run's
``run_started`` as ``budget_estimates``, so a resumed run checks with the same numbers),
else nothing. Spent: the run's folded usage (:attr:`RunState.usage`), which counts each
attempt once: a reused (fork) or interrupted attempt adds nothing. Reserved: what the attempts
already under way (started, not ended: running, or a remote job waiting) are expected to
spend, so that steps released together cannot cross the budget between them (eight steps of
cost 1.0 on a budget of 3.0: three run, the fourth waits). A reservation is not stored: it
is read from the run's open attempts in the fold, so it ends with its attempt (whose real
usage is then counted as spent) and a resumed run has the same ones.

Unknown usage (a model server that reports negative, NaN or over-limit numbers) is never
counted as nothing: the turn is recorded with ``usage_unknown`` (what the server said) and,
as its usage, the step's expected usage counted in its stead, marked
``estimated_calls: 1`` (:func:`turn_usage`). When nothing is known to count (a first turn
with no history), the step's next check under a token or cost budget waits for a person.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from chainlab.events import EventKind
from chainlab.tools import args_hash

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

__all__ = ["BUDGET_EXCEEDED", "ESTIMATED", "budget_of", "check_budget", "expected_usage",
           "reserved_usage", "turn_usage"]

BUDGET_EXCEEDED = "budget_exceeded"
#: the usage count of a step's calls whose usage was unknown, each counted as expected
ESTIMATED = "estimated_calls"
_LIMITS = (("max_cost", "cost"), ("max_tokens", "tokens"))


def budget_of(k: RunCore) -> dict[str, Any] | None:
    """The budget in force: the one a person last raised to, else the run's options."""
    if k.state.budget is not None:
        return k.state.budget
    budget = k.options.budget
    return None if budget is None else _limits(budget)


@functools.lru_cache(maxsize=64)
def _limits(budget: Any) -> dict[str, Any]:
    """A (frozen, hashable) Budget's limits as a dict, dumped once, not once per step."""
    return budget.model_dump(exclude_none=True)  # type: ignore[no-any-return]


def expected_usage(k: RunCore, step_id: str, calls: int | None = None) -> dict[str, float]:
    """What the step's next call is expected to spend: cost, tokens, seconds. ``calls``:
    how many of its calls have ended (default: all it started). A step grown at run time (a
    ``for_each`` instance) has no estimate of its own: its parent's (one call of the same
    tool with the same args template) stands for each."""
    known = k.budget_estimates.get(step_id)
    if known is None:
        node = k.nodes.get(step_id)
        if node is not None and node.index is not None and node.group is not None:
            known = k.budget_estimates.get(node.group)
    out: dict[str, float] = dict(known or {})
    st = k.steps[step_id]
    if st.usage:  # its calls in this run: one more costs about their mean (O(1) per check)
        calls = max(st.attempts if calls is None else calls, 1)
        out.update({key: st.usage[key] / calls for _, key in _LIMITS if key in st.usage})
    return out


def reserved_usage(k: RunCore) -> dict[str, float]:
    """What the attempts under way are expected to spend (cost and tokens), each as its
    step's check expected when it started."""
    out: dict[str, float] = {}
    for rec in k.state.open_attempts("call"):
        expected = expected_usage(k, rec.step_id, rec.attempt - 1)
        for _, key in _LIMITS:
            if key in expected:
                out[key] = out.get(key, 0.0) + expected[key]
    return out


def turn_usage(k: RunCore, step_id: str, attempt: int, usage: dict[str, Any] | None,
               unknown: str | None) -> dict[str, Any]:
    """The usage entries of a model turn's end event (attempt ``attempt`` of ``step_id``):
    ``{"usage": usage}`` as the server reported it; when what it reported could not be taken
    (``unknown``: what it said), that note as ``usage_unknown`` and, as ``usage``, the step's
    expected usage (tokens rounded up) with ``estimated_calls: 1``, so a budget never counts
    nothing for a turn that consumed."""
    if unknown is None:
        return {"usage": usage} if usage else {}
    expected = expected_usage(k, step_id, attempt - 1)
    counted: dict[str, Any] = {key: expected[key] for _, key in _LIMITS if key in expected}
    if "tokens" in counted:
        counted["tokens"] = math.ceil(counted["tokens"])
    return {"usage_unknown": unknown, "usage": {**counted, ESTIMATED: 1}}


def check_budget(k: RunCore, node: Node, args: dict[str, Any]) -> bool:
    """True when the step may start; else it now waits for a person (``budget_exceeded``)
    and the caller parks it."""
    budget = budget_of(k)
    if not budget:
        return True
    st = k.steps[node.id]
    if st.approval and st.approval.get("over_budget") and st.approved_hash == args_hash(args):
        return True  # a person let it go past this budget, for exactly these args
    spent = k.state.usage
    expected = expected_usage(k, node.id)
    reserved = reserved_usage(k)
    crossed: list[str] = []
    for limit, key in _LIMITS:
        cap = budget.get(limit)
        held = reserved.get(key, 0)
        if cap is not None and spent.get(key, 0) + held + expected.get(key, 0) > cap:
            running = f"{_n(held)} reserved by running steps + " if held else ""
            crossed.append(f"{key}: {_n(spent.get(key, 0))} spent + {running}"
                           f"{_n(expected.get(key, 0))} expected > {limit}={_n(cap)}")
    unknown = (st.usage or {}).get(ESTIMATED)
    if unknown and not any(key in expected for _, key in _LIMITS) \
            and any(budget.get(limit) is not None for limit, _ in _LIMITS):
        crossed.append(f"usage unknown: {unknown} of its calls reported usage that could not "
                       "be taken, and nothing is known to count in its stead")
    cap = budget.get("max_duration_s")
    if cap is not None:
        elapsed = k.clock.now() - (k.state.started_at or k.clock.now())
        more = expected.get("seconds", k.state.estimates.get(node.id, 0.0))
        if elapsed + more > cap:
            crossed.append(f"time: {_n(elapsed)} s elapsed + {_n(more)} s expected > "
                           f"max_duration_s={_n(cap)}")
    if not crossed:
        return True
    k.emit(EventKind.STEP_WAITING_CONFIRMATION, node.id, payload={
        "args": args, "args_hash": args_hash(args), "tool": node.step.tool,
        "reason": BUDGET_EXCEEDED,
        "preview": "budget exceeded: " + "; ".join(crossed)
        + ". Approve with a raised budget to continue, or reject to stop.",
        "budget": budget, "spent": dict(spent), "expected": expected, "reserved": reserved,
    })
    return False


def _n(value: float) -> str:
    return f"{value:.6g}"
