"""``OpenAIPlanner``: plans with any OpenAI-compatible chat endpoint (the only module that
imports ``openai``).

The loop: send the tool descriptions and ask for structured output against the toolbox's
plan schema, cut down to what the policy lets a model set; parse and sanitize the answer
(:mod:`chainlab.planner.policy`); validate; on problems, send the problem list back for
repair (``repair_rounds``, default 2). When the model is not configured, the request fails
(HTTP error, timeout, connection) or the plan is still invalid after the last repair, the
deterministic fallback planner answers. Every round is recorded in the report
(``planner.last_report``).

How the schema is sent is negotiated (:mod:`chainlab.planner.output`): ``json_schema``, then
``json_object`` with the schema, then a forced tool call, then plain text with the schema in
the prompt. A server that refuses a mode by name gets the next one in the same round; the
mode that worked is remembered per base URL and model for the process.

Configuration defaults come from the environment: ``OPENAI_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` (:class:`chainlab.agent.endpoint.Endpoint`, shared with agent steps). With a
``base_url`` and no key, a placeholder key is sent (local servers such as Ollama, vLLM or
llama.cpp ignore it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from chainlab.agent.endpoint import Endpoint, host_of
from chainlab.agent.openai import error_text, make_client
from chainlab.errors import MissingExtraError, PlanError, PlannerError, Problem
from chainlab.plan.schema import Chain
from chainlab.planner.base import (
    Planner,
    PlanReport,
    PlanRound,
    plan_with_report,
    problem_dict,
)
from chainlab.planner.fallback import FallbackPlanner
from chainlab.planner.output import (
    OutputMode,
    answer_text,
    modes_from,
    one_line,
    plan_text,
    refuses,
    remember_mode,
    remembered_mode,
    request_params,
    with_schema_prompt,
)
from chainlab.planner.policy import (
    PlanPolicy,
    model_schema,
    require_confirmation,
    sanitize_model_plan,
)
from chainlab.planner.prompts import chat_messages, repair_message

try:
    import openai
except ImportError as exc:  # pragma: no cover - the [llm] extra is installed in dev
    raise MissingExtraError("openai", "llm", "OpenAIPlanner") from exc

if TYPE_CHECKING:
    from chainlab.tools import Toolbox

__all__ = ["OpenAIPlanner"]

_SCHEMA_NAME = "chainlab_chain"

class OpenAIPlanner:
    """An LLM planner for any OpenAI-compatible endpoint, with validation, repair rounds and
    a deterministic fallback.

    ``model`` / ``base_url`` / ``api_key`` default to ``OPENAI_MODEL`` / ``OPENAI_BASE_URL``
    / ``OPENAI_API_KEY``. ``repair_rounds``: how often problems are sent back (the model is
    asked at most ``1 + repair_rounds`` times). ``timeout`` / ``max_retries`` go to the
    client; ``max_tokens`` caps each answer (None: the server's default). ``client``: an
    ``openai.AsyncOpenAI`` to use instead (not closed here). ``output_modes``: the
    structured-output modes to try, in order (default: ``json_schema``, ``json_object``,
    ``tools``, ``text``; see :mod:`chainlab.planner.output`). ``strict_schema``: send
    ``strict: true`` in ``json_schema`` mode (off by default: the plan schema has optional
    fields and free-form objects, which OpenAI's strict subset rejects).
    ``fallback``: the planner that answers when the model does not (default: a
    :class:`FallbackPlanner` with the same policy). ``policy`` / ``confirm_side_effects`` /
    ``unconfirmed_tools``: see :class:`~chainlab.planner.PlanPolicy`.
    """

    name = "openai"

    def __init__(
        self, model: str | None = None, base_url: str | None = None,
        api_key: str | None = None, *, repair_rounds: int = 2, timeout: float = 60.0,
        max_retries: int = 2, temperature: float | None = None,
        fallback: Planner | None = None, policy: PlanPolicy | None = None,
        confirm_side_effects: bool | None = None, unconfirmed_tools: Iterable[str] | None = None,
        client: openai.AsyncOpenAI | None = None, strict_schema: bool = False,
        output_modes: Iterable[str] | None = None, max_tokens: int | None = None,
    ):
        if repair_rounds < 0:
            raise ValueError(f"repair_rounds must be >= 0, got {repair_rounds!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens!r}")
        self.output_modes = modes_from(output_modes)
        self.max_tokens = max_tokens
        config = Endpoint.configure(model, base_url, api_key)
        self.model, self.base_url, self._api_key = config.model, config.base_url, config.api_key
        self.repair_rounds = repair_rounds
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.client = client
        self.strict_schema = strict_schema
        self.policy = PlanPolicy.make(policy, confirm_side_effects=confirm_side_effects,
                                      unconfirmed_tools=unconfirmed_tools)
        self.fallback: Planner = fallback if fallback is not None else \
            FallbackPlanner(policy=self.policy)
        self.last_report: PlanReport | None = None

    def __repr__(self) -> str:
        return (f"<OpenAIPlanner model={self.model!r} host={self.base_url_host!r} "
                f"repair_rounds={self.repair_rounds}>")

    # ------------------------------------------------------------------ configuration
    def _config(self) -> Endpoint:
        return Endpoint(self.model, self.base_url, self._api_key, self.timeout,
                        self.max_retries)

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (the key under which the output mode is remembered)."""
        return str(self.client.base_url) if self.client is not None else self._config().url

    @property
    def base_url_host(self) -> str:
        """The endpoint's host (and port), never its credentials or path."""
        return host_of(self.endpoint)

    def not_configured(self) -> str | None:
        """Why the model cannot be asked, or None when it can."""
        why = self._config().not_configured(has_client=self.client is not None)
        return why.replace("model=...", "OpenAIPlanner(model=...)") if why else None

    def _make_client(self) -> tuple[openai.AsyncOpenAI, bool]:
        if self.client is not None:
            return self.client, False
        return make_client(self._config()), True

    # ------------------------------------------------------------------ prompts
    def messages(self, request: str, toolbox: Toolbox,
                 context: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The first request's chat messages (system: rules and tools; user: the goal)."""
        return chat_messages(request, toolbox, context, self.policy)

    @staticmethod
    def repair_message(problems: list[Problem]) -> str:
        """The user message that sends a round's problems back."""
        return repair_message(problems)

    def modes_to_try(self) -> tuple[OutputMode, ...]:
        """The output modes the next plan tries, in order: from the one remembered for this
        endpoint and model (when it is among ``output_modes``), else all of them."""
        known = remembered_mode(self.endpoint, self.model) if self.model else None
        if known is not None and known in self.output_modes:
            return self.output_modes[self.output_modes.index(known):]
        return self.output_modes

    # ------------------------------------------------------------------ planning
    async def plan(
        self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
    ) -> Chain:
        """A validated, safe chain for ``request``; the report is ``self.last_report``.

        Never raises for model trouble (the fallback answers); raises PlannerError only when
        the fallback cannot produce a chain either."""
        chain, _ = await self.plan_with_report(request, toolbox, context)
        return chain

    async def plan_with_report(
        self, request: str, toolbox: Toolbox, context: Mapping[str, Any] | None = None
    ) -> tuple[Chain, PlanReport]:
        """Like :meth:`plan`, returning the chain with its own report."""
        started = time.perf_counter()
        report = PlanReport(planner=self.name, request=request, model=self.model,
                            base_url_host=self.base_url_host)
        self.last_report = report
        try:
            chain = await self._ask_model(request, toolbox, context, report)
            if chain is None:
                chain = await self._fall_back(request, toolbox, context, report)
            else:
                report.answered_by = "model"
                chain = self._explain(chain, report)
        finally:
            report.duration_s = time.perf_counter() - started
        report.chain_name, report.steps = chain.name, chain.step_ids
        return chain, report

    async def _ask_model(self, request: str, toolbox: Toolbox,
                         context: Mapping[str, Any] | None, report: PlanReport) -> Chain | None:
        why = self.not_configured()
        if why is not None:
            report.fallback_reason, report.fallback_error = "not_configured", why
            return None
        client, owned = self._make_client()
        modes = list(self.modes_to_try())
        schema = model_schema(toolbox, self.policy)
        messages = self.messages(request, toolbox, context)
        try:
            for number in range(1, self.repair_rounds + 2):
                rnd = PlanRound(number, 0.0)
                report.rounds.append(rnd)
                text = await self._ask_once(client, messages, modes, schema, rnd, report)
                if text is None:
                    return None
                chain, problems, notes = self.check(text, toolbox, context)
                rnd.problems = [problem_dict(p) for p in problems]
                if chain is not None:
                    report.adjustments += notes
                    return chain
                messages = [*messages, {"role": "assistant", "content": text},
                            {"role": "user", "content": self.repair_message(problems)}]
        finally:
            if owned:
                await client.close()
        last = report.rounds[-1].problems
        report.fallback_reason = "invalid_plan"
        report.fallback_error = one_line(
            f"the plan still had {len(last)} problem(s) after {self.repair_rounds} repair "
            f"round(s): " + "; ".join(f"[{p['code']}] {p['message']}" for p in last[:3]),
            limit=600)
        return None

    async def _ask_once(self, client: openai.AsyncOpenAI, messages: list[dict[str, Any]],
                        modes: list[OutputMode], schema: dict[str, Any], rnd: PlanRound,
                        report: PlanReport) -> str | None:
        """One round's request: the answer's text, or None when the request failed (the
        failure is in the report). A refused mode is dropped from ``modes`` (the rest of
        the planning goes on without it) and the next one is asked at once."""
        while True:
            mode = modes[0]
            params: dict[str, Any] = {"model": self.model, **request_params(
                mode, schema, name=_SCHEMA_NAME, strict=self.strict_schema)}
            if self.temperature is not None:
                params["temperature"] = self.temperature
            if self.max_tokens is not None:
                params["max_tokens"] = self.max_tokens
            rnd.mode = mode.value
            t0 = time.perf_counter()
            try:
                completion = await client.chat.completions.create(
                    messages=with_schema_prompt(messages, mode, schema),  # type: ignore[arg-type]
                    **params)
            except openai.APIStatusError as exc:
                took = time.perf_counter() - t0
                text = error_text(exc)
                if len(modes) > 1 and refuses(mode, exc.status_code, text):
                    report.negotiation.append({
                        "mode": mode.value, "status": exc.status_code,
                        "error": one_line(text), "duration_s": round(took, 6)})
                    modes.pop(0)
                    continue
                rnd.duration_s = took
                self._record_error(report, rnd, exc)
                return None
            except openai.OpenAIError as exc:
                rnd.duration_s = time.perf_counter() - t0
                self._record_error(report, rnd, exc)
                return None
            rnd.duration_s = time.perf_counter() - t0
            report.output_mode = mode.value
            if self.model:
                remember_mode(self.endpoint, self.model, mode)
            rnd.usage = _usage(completion)
            choices = getattr(completion, "choices", None) or []
            message = choices[0].message if choices else None
            refusal = getattr(message, "refusal", None)
            if refusal:
                rnd.error = f"the model refused: {one_line(refusal)}"
                report.fallback_reason, report.fallback_error = "refused", rnd.error
                return None
            return answer_text(mode, message) or ""

    @staticmethod
    def _record_error(report: PlanReport, rnd: PlanRound, exc: Exception) -> None:
        if isinstance(exc, openai.APITimeoutError):
            reason, text = "timeout", f"no answer within the client timeout ({one_line(exc)})"
        elif isinstance(exc, openai.APIStatusError):
            rnd.status = exc.status_code
            reason, text = "http_error", f"HTTP {exc.status_code}: {one_line(error_text(exc))}"
        elif isinstance(exc, openai.APIConnectionError):
            reason, text = _connection_failure(exc)
        else:
            reason, text = "client_error", f"{type(exc).__name__}: {one_line(exc)}"
        rnd.error = text
        report.fallback_reason, report.fallback_error = reason, text

    def check(self, text: str | None, toolbox: Toolbox, context: Mapping[str, Any] | None
              ) -> tuple[Chain | None, list[Problem], list[str]]:
        """Parse, sanitize, validate and confirm one answer.

        Returns ``(chain, [], adjustments)`` when usable, else ``(None, problems, notes)``.
        """
        body = plan_text(text or "")
        if not body.strip():
            return None, [Problem("bad_syntax", "the answer was empty; answer with the plan "
                                  "as one JSON object")], []
        try:
            chain = Chain.from_json(body)
        except PlanError as exc:
            return None, exc.problems, []
        if not chain.steps:
            return None, [Problem("invalid_field", "the plan has no steps; add the tool calls "
                                  "that reach the goal", field="steps")], []
        if len(chain.steps) > self.policy.max_steps:
            return None, [Problem("invalid_field", f"the plan has {len(chain.steps)} steps; "
                                  f"at most {self.policy.max_steps} are allowed",
                                  field="steps")], []
        chain, notes = sanitize_model_plan(chain, self.policy)
        problems = chain.problems(toolbox, context=dict(context) if context is not None else None)
        if problems:
            return None, problems, notes
        chain, more = require_confirmation(chain, toolbox, self.policy)
        return chain, [], notes + more

    def _explain(self, chain: Chain, report: PlanReport) -> Chain:
        repaired = sum(len(r.problems) for r in report.rounds)
        lines = [f"Planned by model {self.model!r} at {report.base_url_host} in "
                 f"{len(report.rounds)} round(s)"
                 + (f", after repairing {repaired} problem(s)." if repaired else ".")]
        confirmed = [s.id for s in chain.steps if s.confirm]
        if confirmed:
            lines.append(f"Needs a person's approval before: {', '.join(confirmed)}.")
        lines += [f"Planner adjustment: {note}." for note in report.adjustments]
        report.explanation = "\n".join(lines)
        own = chain.description.rstrip()
        return chain.model_copy(update={
            "description": f"{own}\n\n{report.explanation}" if own else report.explanation})

    async def _fall_back(self, request: str, toolbox: Toolbox,
                         context: Mapping[str, Any] | None, report: PlanReport) -> Chain:
        why = f"{report.fallback_reason}: {report.fallback_error}"
        try:
            chain, sub = await plan_with_report(self.fallback, request, toolbox, context)
        except PlannerError as exc:
            report.error = f"the model gave no plan ({why}) and the fallback failed: {exc}"
            raise PlannerError(report.error) from exc
        report.answered_by = "fallback"
        report.template = sub.template
        report.adjustments += sub.adjustments
        # why the model's plan was not used, and the server's words, go into the report
        # only: the chain is what a person keeps, so it carries the fallback's own
        # description of what it does and nothing about this attempt's failure
        note = f"The model gave no usable plan ({why}); the deterministic fallback answered."
        report.explanation = f"{note}\n{sub.explanation}".rstrip()
        return chain


def _connection_failure(exc: openai.APIConnectionError) -> tuple[str, str]:
    """(reason, text): none made (the transport's ConnectError), or one made and lost."""
    cause = exc.__cause__
    if cause is None or any(c.__name__ == "ConnectError" for c in type(cause).__mro__):
        return "connection_error", f"cannot reach the endpoint: {one_line(exc)}"
    return "disconnected", (f"the endpoint took the request and closed the connection without an "
                            f"answer ({type(cause).__name__}: {one_line(cause)}): the server may "
                            "have crashed on it (a grammar it cannot parse?); see its log")


def _usage(completion: Any) -> dict[str, int] | None:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    return {k: int(getattr(usage, k, 0) or 0)
            for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
