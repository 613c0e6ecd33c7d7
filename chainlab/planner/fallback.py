"""``FallbackPlanner``: deterministic planning without a model.

It answers from the first matching template a user registered (by keywords or a match
callable), else it composes a chain from the toolbox's metadata
(:mod:`chainlab.planner.compose`). Its choice is explained in ``chain.description`` and in
the report. Side-effecting steps are confirmed as the :class:`PlanPolicy` says, for
templates and composed chains alike.

    fallback = FallbackPlanner()
    fallback.add_template(approval_chain, keywords=["approval", "sign-off"])
    fallback.add_template(build_report_chain, match=lambda request: "report" in request)
    chain = await fallback.plan("plan an approval system", toolbox)
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chainlab.errors import PlanError, PlannerError
from chainlab.plan.schema import Chain
from chainlab.planner.base import PlanReport
from chainlab.planner.compose import compose_chain
from chainlab.planner.policy import PlanPolicy, require_confirmation

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["FallbackPlanner", "PlanTemplate", "TemplateBuilder"]

#: A callable template: ``(request, toolbox, context) -> Chain | plan dict``.
TemplateBuilder = Callable[
    [str, "Toolbox", "Mapping[str, Any] | None"], "Chain | Mapping[str, Any]"]


@dataclass(frozen=True, slots=True)
class PlanTemplate:
    """A registered plan: a fixed chain or a builder, chosen by keywords and/or ``match``."""

    name: str
    chain: Chain | None
    build: TemplateBuilder | None
    keywords: tuple[str, ...] = ()
    match: Callable[[str], bool | float | None] | None = None

    def score(self, request: str) -> tuple[float, list[str]]:
        """``(score, matched keywords)``; a score of 0 means "not for this request".

        Each keyword found in the request (whole word or phrase, case-insensitive, plural
        ``s``/``es`` allowed) counts 1; ``match(request)`` must be truthy when given, and
        adds its value (True counts 1)."""
        text = request.lower()
        hits = [kw for kw in self.keywords
                if re.search(rf"(?<![a-z0-9]){re.escape(kw.lower())}(?:e?s)?(?![a-z0-9])", text)]
        score = float(len(hits))
        if self.match is not None:
            verdict = self.match(request)
            if not verdict:
                return 0.0, []
            score += 1.0 if verdict is True else float(verdict)
        return score, hits

    def make(self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None) -> Chain:
        """The template's chain for this request. Raises PlanError if it is not a plan."""
        if self.chain is not None:
            return self.chain
        assert self.build is not None
        made = self.build(request, toolbox, context)
        return made if isinstance(made, Chain) else Chain.from_dict(made)


class FallbackPlanner:
    """Plans without a model: registered templates first, then the built-in composition.

    ``compose=False`` turns the built-in composition off (then a request no template
    matches raises PlannerError). ``policy`` / ``confirm_side_effects`` /
    ``unconfirmed_tools``: see :class:`PlanPolicy`.
    """

    name = "fallback"

    def __init__(
        self, templates: Iterable[PlanTemplate] = (), *, compose: bool = True,
        policy: PlanPolicy | None = None, confirm_side_effects: bool | None = None,
        unconfirmed_tools: Iterable[str] | None = None,
    ):
        self.templates: list[PlanTemplate] = list(templates)
        self.compose = compose
        self.policy = PlanPolicy.make(policy, confirm_side_effects=confirm_side_effects,
                                      unconfirmed_tools=unconfirmed_tools)
        self.last_report: PlanReport | None = None

    def add_template(
        self, template: Chain | Mapping[str, Any] | str | TemplateBuilder, *,
        keywords: Iterable[str] = (), match: Callable[[str], bool | float | None] | None = None,
        name: str | None = None,
    ) -> PlanTemplate:
        """Register a plan for requests that contain ``keywords`` (or that ``match`` accepts).

        ``template``: a Chain, a plan dict, YAML text, or a builder
        ``(request, toolbox, context) -> Chain | dict``. Templates are tried by score (most
        matched keywords first), ties in registration order. Raises ValueError without
        keywords or match, PlanError when a fixed template is not a plan.
        """
        keywords = tuple(keywords)
        if isinstance(keywords, str) or not (keywords or match):
            raise ValueError("a template needs keywords=[...] (words of requests it serves) "
                             "or match=callable(request) -> bool")
        chain: Chain | None = None
        build: TemplateBuilder | None = None
        if isinstance(template, Chain):
            chain = template
        elif isinstance(template, str):
            chain = Chain.from_yaml(template)
        elif isinstance(template, Mapping):
            chain = Chain.from_dict(dict(template))
        elif callable(template):
            build = template
        else:
            raise ValueError(f"a template is a Chain, a plan dict, YAML text or a callable, "
                             f"got {type(template).__name__}")
        label = name or (chain.name if chain is not None else
                         getattr(build, "__name__", None) or f"template{len(self.templates) + 1}")
        entry = PlanTemplate(label, chain, build, keywords, match)
        self.templates.append(entry)
        return entry

    def candidates(self, request: str) -> list[tuple[PlanTemplate, list[str]]]:
        """Templates that serve ``request``, best first (for inspection and tests)."""
        scored = []
        for index, template in enumerate(self.templates):
            score, hits = template.score(request)
            if score > 0:
                scored.append((-score, index, template, hits))
        return [(t, hits) for _, _, t, hits in sorted(scored, key=lambda s: s[:2])]

    # ------------------------------------------------------------------ planning
    async def plan(
        self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
    ) -> Chain:
        """A validated chain for ``request``; the report is ``self.last_report``.

        Raises PlannerError when no template fits and composition finds nothing."""
        chain, _ = await self.plan_with_report(request, toolbox, context)
        return chain

    async def plan_with_report(
        self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
    ) -> tuple[Chain, PlanReport]:
        """Like :meth:`plan`, returning the chain with its own report."""
        started = time.perf_counter()
        report = PlanReport(planner=self.name, request=request)
        self.last_report = report
        try:
            chain = self._plan(request, toolbox, context, report)
        except PlannerError as exc:
            report.error = str(exc)
            raise
        finally:
            report.duration_s = time.perf_counter() - started
        report.answered_by = "fallback"
        report.chain_name, report.steps = chain.name, chain.step_ids
        return chain, report

    def _plan(self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None,
              report: PlanReport) -> Chain:
        skipped: list[str] = []
        for template, hits in self.candidates(request):
            try:
                chain = template.make(request, toolbox, context)
                chain.validate(toolbox, context=dict(context) if context is not None else None)
            except PlanError as exc:
                skipped.append(f"template {template.name!r} was skipped: "
                               + "; ".join(str(p) for p in exc.problems[:5]))
                continue
            except Exception as exc:  # a broken user builder must not hide the other plans
                skipped.append(f"template {template.name!r} was skipped: its builder raised "
                               f"{type(exc).__name__}: {exc}")
                continue
            why = f"matched keywords {hits}" if hits else "its match function accepted it"
            lines = [f"Fallback plan from template {template.name!r} ({why})."]
            report.template = template.name
            return self._finish(chain, chain.description, lines, skipped, toolbox, report)
        if not self.compose:
            raise PlannerError(
                f"no fallback template serves the request {request[:80]!r}"
                + (f" ({'; '.join(skipped)})" if skipped else "")
                + "; add one with fallback.add_template(chain, keywords=[...])")
        try:
            comp = compose_chain(request, toolbox, context)
        except PlannerError as exc:
            raise PlannerError("; ".join([str(exc), *skipped])) from None
        report.template = None
        writes = [s.id for s in comp.chain.steps if toolbox.get(s.tool).side_effects]
        reads = [s for s in comp.chain.step_ids if s not in writes]
        lines = [f"Fallback plan composed from the toolbox metadata for the request "
                 f"{request[:200]!r}.",
                 f"Tools chosen because they share words with the request: "
                 f"{', '.join(comp.picked)}.",
                 f"Reads first ({', '.join(reads) or 'none'}); side-effecting steps last, "
                 f"after every read, one at a time ({', '.join(writes) or 'none'})."]
        if comp.wiring:
            lines.append("Inputs: " + "; ".join(comp.wiring) + ".")
        lines += [f"Left out {d.rstrip('.')}." for d in comp.dropped]
        return self._finish(comp.chain, "", lines, skipped, toolbox, report)

    def _finish(self, chain: Chain, own: str, lines: list[str], skipped: list[str],
                toolbox: Toolbox, report: PlanReport) -> Chain:
        chain, notes = require_confirmation(chain, toolbox, self.policy)
        confirmed = [s.id for s in chain.steps if s.confirm or (
            s.confirm is None and s.tool in toolbox
            and toolbox.get(s.tool).requires_confirmation is True)]
        if confirmed:
            lines.append(f"Needs a person's approval before: {', '.join(confirmed)}.")
        lines += [s[0].upper() + s[1:] + "." for s in skipped]
        report.adjustments += notes
        report.explanation = "\n".join(lines)
        description = f"{own.rstrip()}\n\n{report.explanation}" if own.strip() \
            else report.explanation
        return chain.model_copy(update={"description": description})
