"""The prompt-steps example (``chainlab.examples.prompt_steps``, the Clear Ideas manifest):
five agents without tools, one model call each, its two middle steps at the same time."""

from __future__ import annotations

import threading

import pytest

from chainlab.examples.prompt_steps import clear_ideas_chain, make_toolbox
from chainlab.runtime import RunStatus, Runtime
from chainlab.store import MemoryStore
from chainlab.testing.openai_script import RecordedRequest
from chainlab.testing.openai_server import FakeOpenAI

pytestmark = pytest.mark.anyio


async def test_the_clear_ideas_chain_runs_draft_and_evidence_at_once() -> None:
    asked = {"draft": threading.Event(), "evidence": threading.Event()}

    def model(request: RecordedRequest) -> str:
        system = request.messages[0]["content"]
        if system.startswith("You collect"):
            return "notes: solar panels pay back in 7 years (IEA 2024)"
        if system.startswith("You write a first draft"):
            asked["draft"].set()  # each answers only once the other was asked: at once
            assert asked["evidence"].wait(10), "extract-evidence was not asked meanwhile"
            return "Draft: solar pays back in 7 years."
        if system.startswith("You list the claims"):
            asked["evidence"].set()
            assert asked["draft"].wait(10), "draft was not asked meanwhile"
            return '{"claims": [{"claim": "7-year payback", "source": "IEA 2024"}]}'
        if system.startswith("You review"):
            assert '"source": "IEA 2024"' in request.messages[1]["content"]
            return "Risks: cite the IEA report."
        return "Final: solar pays back in 7 years (IEA 2024)."

    with FakeOpenAI([model] * 5) as server:
        toolbox = make_toolbox(model="fake-model", base_url=server.base_url, api_key="t")
        runtime = Runtime(toolbox, MemoryStore())
        run = await runtime.start(clear_ideas_chain(), {"topic": "rooftop solar"})
        result = await run.wait()
        await runtime.aclose()
    assert result.status == RunStatus.SUCCEEDED, result.errors
    assert result.output == "Final: solar pays back in 7 years (IEA 2024)."
    assert result.outputs["extract-evidence"] == {
        "claims": [{"claim": "7-year payback", "source": "IEA 2024"}]}
    assert len(server.completions) == 5
    assert all(r.tools is None for r in server.completions)  # prompt steps: no tools
