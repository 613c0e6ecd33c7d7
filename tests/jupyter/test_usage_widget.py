"""Usage in the notebook (issue 31): the run widget's header shows the run's totals, the
inspector a step's usage and each attempt's; a budget stop is a card like a confirmation."""

from __future__ import annotations

import pytest

from chainlab import CallContext, Chain, Toolbox
from chainlab.jupyter import RunWidget
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.testing import ManualClock

pytestmark = pytest.mark.anyio


def tools() -> Toolbox:
    tb = Toolbox("u")

    @tb.tool
    def ask(n: int, ctx: CallContext) -> int:
        ctx.report_usage(input_tokens=1000 * n, output_tokens=10, cost=0.25 * n, model="m")
        return n

    return tb


CHAIN = Chain.from_dict({"name": "u", "steps": [
    {"id": "a", "tool": "ask", "args": {"n": 1}},
    {"id": "b", "tool": "ask", "args": {"n": 2}, "depends_on": ["a"]},
    {"id": "c", "tool": "ask", "args": {"n": 3}, "depends_on": ["b"]}]})


async def test_header_totals_and_inspector_usage() -> None:
    runtime = Runtime(tools(), MemoryStore(), clock=ManualClock())
    run = await runtime.start(CHAIN)
    await run.wait()
    w = RunWidget(run)
    w.refresh()
    assert "6,030 tokens (6,000 in, 30 out) · cost 1.5" in w.header.value
    w.inspector.select("b")
    details = w.inspector.details.value
    assert "<th>usage</th><td>2,010 tokens (2,000 in, 10 out) · cost 0.5</td>" in details
    assert "<td>2,010 tokens (2,000 in, 10 out) · cost 0.5</td></tr></table>" in details
    w.close()


async def test_a_budget_stop_shows_as_a_card() -> None:
    chain = Chain.from_dict({**CHAIN.to_dict(), "options": {"budget": {"max_cost": 0.5}}})
    runtime = Runtime(tools(), MemoryStore(), clock=ManualClock())
    async with runtime:
        run = await runtime.start(chain)
        await run.wait()
        assert run.waiting() == {"c": "waiting_confirmation"}
        w = RunWidget(run)
        w.refresh()
        assert "cost 0.75" in w.header.value
        [card] = w.inbox.cards.values()
        assert "budget exceeded: cost: 0.75 spent + 0 expected &gt; max_cost=0.5" in \
            card.preview.value
        card.budget.value = '{"max_cost": 5}'
        card.approve_button.click()
        result = await run.wait()
        assert result.status == "succeeded" and run.state.budget == {"max_cost": 5.0}
        w.close()
