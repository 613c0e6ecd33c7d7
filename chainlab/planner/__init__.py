"""Planning: turn a request into a chain a person can inspect, edit and run.

    from chainlab.planner import OpenAIPlanner, plan_and_start

    planner = OpenAIPlanner()            # OPENAI_MODEL / OPENAI_BASE_URL / OPENAI_API_KEY
    chain = await planner.plan("plan an approval system, estimate effort", toolbox)
    planner.last_report                  # model, host, rounds, problems, fallback and why
    run = await plan_and_start(runtime, planner, "...", context={"table_id": "t1"})

- :class:`Planner` - the protocol: ``await planner.plan(request, toolbox, context=None)``.
- :class:`OpenAIPlanner` - any OpenAI-compatible endpoint; validation, repair rounds,
  deterministic fallback. Imported lazily: ``import chainlab.planner`` never loads openai.
- :class:`FallbackPlanner` - no model: user templates (keywords or a callable), else a chain
  composed from the toolbox's metadata.
- :class:`PlanPolicy` - what a model may set; side-effecting steps are confirmed.
- :class:`PlanReport`, :func:`planning_events`, :func:`plan_and_start` - planning recorded
  at the head of the run's log and in its meta.
- :func:`default_planner` - OpenAIPlanner when ``openai`` is installed, else the fallback.

The scripted OpenAI-compatible server for tests and demos is a test double: it lives in
:mod:`chainlab.testing.openai_server` (``from chainlab.testing import FakeOpenAI``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chainlab.planner.base import (
    FallbackReason,
    Planner,
    PlanReport,
    PlanRound,
    plan_and_start,
    plan_with_report,
    planning_events,
)
from chainlab.planner.fallback import FallbackPlanner, PlanTemplate
from chainlab.planner.policy import PlanPolicy

if TYPE_CHECKING:
    from chainlab.planner.openai import OpenAIPlanner

__all__ = [
    "FallbackPlanner",
    "FallbackReason",
    "OpenAIPlanner",
    "PlanPolicy",
    "PlanReport",
    "PlanRound",
    "PlanTemplate",
    "Planner",
    "default_planner",
    "plan_and_start",
    "plan_with_report",
    "planning_events",
]


def default_planner(**options: Any) -> Planner:
    """The planner a front end should use: :class:`OpenAIPlanner` (``options`` passed on)
    when the ``openai`` package is installed - it falls back by itself when no model is
    configured - else :class:`FallbackPlanner`."""
    try:
        from chainlab.planner.openai import OpenAIPlanner
    except ImportError:  # MissingExtraError: chainlab[llm] is not installed
        keep = {k: v for k, v in options.items()
                if k in ("policy", "confirm_side_effects", "unconfirmed_tools")}
        return FallbackPlanner(**keep)
    return OpenAIPlanner(**options)


def __getattr__(name: str) -> Any:
    # OpenAIPlanner needs the optional `openai` package: load it only when asked for.
    if name == "OpenAIPlanner":
        from chainlab.planner.openai import OpenAIPlanner

        return OpenAIPlanner
    raise AttributeError(f"module 'chainlab.planner' has no attribute {name!r}")
