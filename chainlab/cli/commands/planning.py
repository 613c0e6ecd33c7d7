"""``chainlab plan``: the planner choice and its report in one line."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import anyio

from chainlab.plan.schema import Chain
from chainlab.tools import Toolbox

__all__ = ["plan_chain"]


def plan_chain(request: str, toolbox: Toolbox, context: Mapping[str, Any] | None,
               model: str | None) -> tuple[Chain, str]:
    """A validated chain for ``request`` and a note saying who planned it.

    An LLM (OpenAIPlanner) plans when OPENAI_API_KEY or OPENAI_BASE_URL is set, else the
    deterministic FallbackPlanner. Raises PlannerError, MissingExtraError.
    """
    from chainlab.errors import PlannerError
    from chainlab.planner import FallbackPlanner, plan_with_report

    if not request.strip():
        raise PlannerError("the request is empty: say what the chain should do")
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from chainlab.planner import OpenAIPlanner

        planner: Any = OpenAIPlanner(model=model)
    else:
        planner = FallbackPlanner()

    async def main() -> tuple[Chain, Any]:
        return await plan_with_report(planner, request, toolbox, context)

    chain, report = anyio.run(main)
    if report.answered_by == "model":
        rounds = len(report.rounds)
        note = f"planned by {report.model} at {report.base_url_host} in {rounds} round" \
               f"{'s' if rounds != 1 else ''}"
    else:
        why = f" ({report.fallback_reason}: {report.fallback_error})" \
            if report.fallback_reason else ""
        note = f"planned by the fallback planner{why}"
    if report.adjustments:
        note += "; adjusted: " + "; ".join(report.adjustments)
    return chain, note
