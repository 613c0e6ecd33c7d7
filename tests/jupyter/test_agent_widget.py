"""An agent step in the run widget (issue 37 item 6): one DAG node with its calls counted on
it, and in the Inspector its transcript (a row per call: the turn, what the model said, the
call as written, the step it became and its status, what the model was told; the final
answer last). A call's step shows its own tool, not the agent's."""

from __future__ import annotations

import pytest

from chainlab.jupyter import RunWidget
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.agent.conftest import Shop, run_agent

pytestmark = pytest.mark.anyio


def rows(page: str) -> list[str]:
    """The transcript table's rows as text (tags dropped), header first."""
    import html
    import re

    table = page.split('class="cl-table cl-transcript">', 1)[1].split("</table>", 1)[0]
    return [" | ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                       for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row))
            for row in re.findall(r"<tr>(.*?)</tr>", table)]


async def test_the_inspector_shows_an_agent_steps_transcript() -> None:
    shop = Shop()
    with FakeOpenAI() as server:
        runtime, run, result = await run_agent(
            shop, server,
            tool_calls(Call("lookup", {"order": 7}), Call("teleport", {"order": 7}),
                       Call("refund", {"order": 7, "amount": 15})),
            "Refunded 15 on order 7.")
        assert result.suspended
        w = RunWidget(run)
        # the DAG: one node for the agent, its calls counted (no node per call)
        assert w.dag.clicks is not None and sorted(w.dag.clicks.steps.values()) == ["help"]
        w.tabs.inspect("help")
        shown = rows(w.inspector.details.value)
        assert shown[0] == "turn | model said | call | step | status | told to the model | usage"
        assert shown[1].startswith('1 |  | lookup({"order": 7}) | help/1.1 | succeeded | '
                                   '{"order":7,"status":"delivered","total":40} | ')
        assert "tokens" in shown[1]
        assert shown[2] == ('teleport({"order": 7}) | - | refused | error: unknown tool '
                            "'teleport'. The tools are: lookup, refund, label, slow, broken")
        assert shown[3] == ('refund({"order": 7, "amount": 15}) | help/1.3 | waiting '
                            "confirmation | ")
        # a call's step: its own tool; no transcript of its own
        w.tabs.inspect("help/1.3")
        assert "<th>tool</th><td>refund</td>" in w.inspector.details.value
        assert "cl-transcript" not in w.inspector.details.value
        await run.approve("help/1.3")
        assert (await run.wait()).ok
        w.refresh()
        w.tabs.inspect("help")
        shown = rows(w.inspector.details.value)
        assert shown[3].startswith('refund({"order": 7, "amount": 15}) | help/1.3 | succeeded'
                                   ' | {"order":7,"refunded":15}')
        assert shown[4].startswith("2 | Refunded 15 on order 7. |  |  | final answer |  | ")
        w.close()
        await runtime.aclose()
