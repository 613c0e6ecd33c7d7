"""Prompt steps: the Clear Ideas manifest (a document written by five model calls) as a
chain of agent steps without tools, each one model call (DESIGN §18).

``gather-context`` first; then ``draft`` and ``extract-evidence``, which both read only the
context, run at the same time; ``review-risks`` reads both; ``finalize`` writes the
document. ``extract-evidence`` answers JSON checked against a schema (a list of claims with
their source). The chain is ``clear_ideas.yaml`` beside this module (:data:`CLEAR_IDEAS`).

The model is any OpenAI-compatible endpoint: ``OPENAI_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` (or :func:`make_toolbox` with them given).

    chainlab run "$(python -c 'import chainlab.examples as e; print(e.CLEAR_IDEAS)')" \\
        --tools chainlab.examples.prompt_steps:toolbox --context '{"topic": "..."}'
"""

from __future__ import annotations

from typing import Any

from chainlab.agent import Agent
from chainlab.examples import CLEAR_IDEAS
from chainlab.plan.schema import Chain
from chainlab.tools import Toolbox

__all__ = ["CLEAR_IDEAS", "EVIDENCE_SCHEMA", "clear_ideas_chain", "make_toolbox", "toolbox"]

#: what ``extract-evidence`` answers: the claims the draft can rest on, with their source
EVIDENCE_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["claims"], "additionalProperties": False,
    "properties": {"claims": {"type": "array", "items": {
        "type": "object", "required": ["claim", "source"], "additionalProperties": False,
        "properties": {"claim": {"type": "string"}, "source": {"type": "string"}}}}}}

_PROMPTS = {
    "gather_context": "You collect the context a writer needs about a topic: the audience, "
                      "the facts that matter, what is disputed. Answer in short notes.",
    "draft": "You write a first draft of a short document from the notes you are given.",
    "extract_evidence": "You list the claims the notes make and where each comes from.",
    "review_risks": "You review a draft against its evidence: name unsupported claims, "
                    "legal or reputational risks, and what to change.",
    "finalize": "You write the final document: the draft with the review's changes made.",
}


def make_toolbox(model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None) -> Toolbox:
    """The example's five agents (no tools: prompt steps) in a toolbox."""
    tb = Toolbox("prompt_steps")
    for name, instructions in _PROMPTS.items():
        tb.add_agent(Agent(name, instructions, [], model=model, base_url=base_url,
                           api_key=api_key,
                           output_schema=EVIDENCE_SCHEMA if name == "extract_evidence" else None))
    return tb


def clear_ideas_chain() -> Chain:
    """The example chain (validated against :func:`make_toolbox`'s toolbox when run)."""
    return Chain.from_yaml(CLEAR_IDEAS.read_text(encoding="utf-8"))


#: the agents configured from the environment (OPENAI_MODEL, OPENAI_BASE_URL, ...)
toolbox = make_toolbox()
