"""The Planner protocol, the planning report, and starting a run from a request.

A planner turns a request ("plan an approval system, estimate effort, ...") into a
:class:`~chainlab.plan.Chain` that a person can inspect, edit and run. Every planner records a
:class:`PlanReport` (``planner.last_report``); :func:`planning_events` turns it into the
``planning_*`` events that :meth:`Runtime.start(planning=...)
<chainlab.runtime.Runtime.start>` writes at the head of the run's log, and
:func:`plan_and_start` does both steps at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from chainlab.errors import PlannerError, Problem
from chainlab.events.usage import add_usage

if TYPE_CHECKING:
    from chainlab.plan.schema import Chain, RunOptions
    from chainlab.runtime.runtime import Run, Runtime
    from chainlab.tools import Toolbox

__all__ = [
    "FallbackReason",
    "PlanReport",
    "PlanRound",
    "Planner",
    "plan_and_start",
    "plan_with_report",
    "planning_events",
]

#: Why the fallback planner answered instead of the model.
FallbackReason = Literal[
    "not_configured",  # no model name (OPENAI_MODEL) or no endpoint/key
    "timeout",  # the request exceeded the client timeout
    "http_error",  # the endpoint answered with an HTTP error status (``PlanRound.status``)
    "connection_error",  # the endpoint could not be reached
    "disconnected",  # the endpoint took the request and closed without an answer (crashed?)
    "client_error",  # any other error of the openai client
    "refused",  # the model refused to answer
    "invalid_plan",  # still invalid after the last repair round
]

_REQUEST_IN_EVENTS = 2000  # characters of the request kept in event payloads (meta has it all)


@runtime_checkable
class Planner(Protocol):
    """Something that turns a request into a chain: ``await planner.plan(request, toolbox)``.

    ``last_report`` is the :class:`PlanReport` of the latest call (also after a failure).
    Implementations: :class:`~chainlab.planner.OpenAIPlanner`,
    :class:`~chainlab.planner.FallbackPlanner`.
    """

    last_report: PlanReport | None

    async def plan(
        self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
    ) -> Chain:
        """A chain that validates against ``toolbox`` (and ``context`` when given).

        Raises PlannerError when no chain can be produced.
        """
        ...


def problem_dict(problem: Problem) -> dict[str, Any]:
    """A problem as plain data (what reports and events carry)."""
    return {"code": problem.code, "message": problem.message, "step_id": problem.step_id,
            "field": problem.field}


@dataclass(slots=True)
class PlanRound:
    """One request to the model: what came back and what was wrong with it.

    ``problems`` is empty when the plan of this round was accepted; ``error`` is set when the
    request itself failed (then ``status`` holds the HTTP status, if any). ``mode`` is the
    structured-output mode the request used (:class:`~chainlab.planner.output.OutputMode`).
    """

    number: int
    duration_s: float
    problems: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    status: int | None = None
    usage: dict[str, int] | None = None
    mode: str | None = None

    @property
    def ok(self) -> bool:
        """True when this round produced the accepted plan."""
        return self.error is None and not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "duration_s": round(self.duration_s, 6),
                "problems": [dict(p) for p in self.problems], "error": self.error,
                "status": self.status, "usage": self.usage, "mode": self.mode}


@dataclass(slots=True)
class PlanReport:
    """What happened while planning: who answered, in how many rounds, and why.

    ``answered_by`` is ``"model"``, ``"fallback"`` or None (nothing answered; ``error`` says
    why). ``fallback_reason`` says why the model's answer was not used (see
    :data:`FallbackReason`). ``adjustments`` lists what the planner changed in the plan to
    make it safe (forced confirmations, dropped fields). ``explanation`` is the planner's
    note; when the model answered it also ends the chain's ``description`` (the reasons for
    a fallback and server errors stay here, never in the chain).

    ``output_mode`` is the structured-output mode the server took (None when no request
    got an answer); ``negotiation`` lists the modes the server refused on the way there,
    as ``{"mode", "status", "error", "duration_s"}`` (empty when the first mode tried worked,
    e.g. one remembered from an earlier plan). Error texts are one line, without tracebacks.
    """

    planner: str
    request: str
    model: str | None = None
    base_url_host: str | None = None
    rounds: list[PlanRound] = field(default_factory=list)
    answered_by: Literal["model", "fallback"] | None = None
    fallback_reason: str | None = None
    fallback_error: str | None = None
    template: str | None = None
    adjustments: list[str] = field(default_factory=list)
    explanation: str = ""
    chain_name: str | None = None
    steps: list[str] = field(default_factory=list)
    error: str | None = None
    output_mode: str | None = None
    negotiation: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0

    @property
    def fallback(self) -> bool:
        """True when the deterministic fallback planner produced the chain."""
        return self.answered_by == "fallback"

    @property
    def ok(self) -> bool:
        """True when a chain was produced."""
        return self.answered_by is not None

    @property
    def problems_per_round(self) -> list[list[dict[str, Any]]]:
        """The problems found in each round, in order (empty list = accepted)."""
        return [r.problems for r in self.rounds]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (what ``plan_and_start`` stores in the run's meta)."""
        return {
            "planner": self.planner, "request": self.request, "model": self.model,
            "base_url_host": self.base_url_host, "rounds": [r.to_dict() for r in self.rounds],
            "answered_by": self.answered_by, "fallback": self.fallback,
            "fallback_reason": self.fallback_reason, "fallback_error": self.fallback_error,
            "template": self.template, "adjustments": list(self.adjustments),
            "explanation": self.explanation, "chain_name": self.chain_name,
            "steps": list(self.steps), "error": self.error, "output_mode": self.output_mode,
            "negotiation": [dict(n) for n in self.negotiation], "started_at": self.started_at,
            "duration_s": round(self.duration_s, 6),
        }


def planning_events(report: PlanReport) -> list[tuple[str, dict[str, Any]]]:
    """``[(kind, payload), ...]`` for ``runtime.start(chain, ..., planning=...)``.

    Always ``planning_started`` first. When the model failed and the fallback answered, a
    ``planning_failed`` (the model's failure) precedes ``planning_completed`` (the fallback's
    chain); when nothing answered, the list ends with ``planning_failed``.
    """
    request = report.request
    if len(request) > _REQUEST_IN_EVENTS:
        request = request[:_REQUEST_IN_EVENTS] + "..."
    events: list[tuple[str, dict[str, Any]]] = [("planning_started", {
        "planner": report.planner, "model": report.model,
        "base_url_host": report.base_url_host, "request": request,
        "started_at": report.started_at})]
    rounds = len(report.rounds)
    problems = report.problems_per_round
    if report.fallback_reason is not None:
        events.append(("planning_failed", {
            "planner": report.planner, "stage": "model", "reason": report.fallback_reason,
            "error": report.fallback_error or report.fallback_reason, "rounds": rounds,
            "problems": problems, "fallback": report.answered_by == "fallback",
            "output_mode": report.output_mode}))
    if report.answered_by is None:
        events.append(("planning_failed", {
            "planner": report.planner, "stage": "planning",
            "error": report.error or "no chain was produced", "rounds": rounds,
            "problems": problems, "duration_s": round(report.duration_s, 6)}))
        return _with_usage(events, report)
    events.append(("planning_completed", {
        "planner": report.planner, "answered_by": report.answered_by,
        "fallback": report.fallback, "fallback_reason": report.fallback_reason,
        "template": report.template, "rounds": rounds, "problems": problems,
        "output_mode": report.output_mode,
        "negotiation": [dict(n) for n in report.negotiation],
        "adjustments": list(report.adjustments), "chain": report.chain_name,
        "steps": list(report.steps), "duration_s": round(report.duration_s, 6)}))
    return _with_usage(events, report)


def _with_usage(events: list[tuple[str, dict[str, Any]]], report: PlanReport
                ) -> list[tuple[str, dict[str, Any]]]:
    """The model's usage over every round, on the LAST planning event only (the fold adds
    each planning event's usage to the run's: once)."""
    total: dict[str, Any] = {}
    for rnd in report.rounds:
        if rnd.usage:
            add_usage(total, {"input_tokens": rnd.usage.get("prompt_tokens", 0),
                              "output_tokens": rnd.usage.get("completion_tokens", 0)})
    if total:
        total["tokens"] = total.get("input_tokens", 0) + total.get("output_tokens", 0)
        if report.model:
            total["models"] = [report.model]
        kind, payload = events[-1]
        events[-1] = (kind, {**payload, "usage": total})
    return events


async def plan_with_report(
    planner: Planner, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
) -> tuple[Chain, PlanReport]:
    """Plan and return the chain with ITS report (safe when one planner serves several
    requests at once). Raises PlannerError when no chain can be produced."""
    own = getattr(planner, "plan_with_report", None)
    if own is not None:
        chain, report = await own(request, toolbox, context)
        return chain, report
    chain = await planner.plan(request, toolbox, context)
    report = planner.last_report
    if report is None:  # a third-party planner that keeps no report
        report = PlanReport(planner=type(planner).__name__, request=request,
                            answered_by="model", explanation=chain.description)
        report.chain_name, report.steps = chain.name, chain.step_ids
    return chain, report


async def plan_and_start(
    runtime: Runtime, planner: Planner, request: str,
    context: Mapping[str, Any] | None = None, options: RunOptions | None = None, *,
    paused: bool = False,
) -> Run:
    """Plan ``request`` with ``runtime.toolbox`` and start the chain as a run.

    The run's log begins with the planning events (:func:`planning_events`) and its meta
    holds ``{"planning": {"request": request, "report": report.to_dict()}}``; the run record
    keeps the chain itself. The chain is planned against ``context`` (``{}`` when None), so
    it never references a context key the run lacks.

    Raises PlannerError when planning failed (the report is then ``planner.last_report``)
    and PlanError when the chain does not validate with this context.
    """
    if not isinstance(request, str) or not request.strip():
        raise PlannerError(f"the request must be a non-empty string describing the goal, "
                           f"got {request!r}")
    # the run starts with exactly this context (empty when None), so plan against it: a
    # reference to a context key the run will not have is a planning problem, not a crash
    context = dict(context or {})
    chain, report = await plan_with_report(planner, request, runtime.toolbox, context)
    meta = {"planning": {"request": request, "report": report.to_dict()}}
    return await runtime.start(chain, context, options, meta=meta, paused=paused,
                               planning=planning_events(report))
