"""An agent step in the run widget (issue 37 item 6): in the DAG a cluster of its model turns
that grows as the run records them (each turn's calls side by side, each a node of its own),
and in the Inspector its transcript (a row per call: the turn, what the model said, the
call as written, the step it became and its status, what the model was told; the final
answer last). A call's step shows its own tool, not the agent's."""

from __future__ import annotations

import pytest

from chainlab.jupyter import RunWidget
from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.agent.conftest import Shop, agent_chain, run_agent, start
from tests.agent.test_agent_steps import until

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
        # the DAG: the agent's cluster, a node per call that became a step (the refused
        # teleport made none)
        assert w.dag.clicks is not None and sorted(w.dag.clicks.steps.values()) == [
            "help", "help/1.1", "help/1.3"]
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
        # its approval card names its own tool too (not "in sub-chain agent:support")
        card = w.inbox.cards["help/1.3"]
        assert "<b>help/1.3</b> <code>refund</code> waits for approval" in card.children[0].value
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


async def test_the_inspector_shows_a_streamed_turn_as_it_comes() -> None:
    """An agent with ``stream=True``: while its model writes, the transcript's last row is
    the turn being written with its text so far ("writing…"); once the turn is recorded,
    the row is the recorded turn (the pieces were never stored)."""
    shop = Shop()
    text = "Order 7 arrived damaged; I can refund 15 of its 40."  # 8 pieces
    with FakeOpenAI([Reply(text, gap_s=0.2)]) as server:
        shop.agent(server, ["lookup"], stream=True)
        runtime, run = await start(shop, agent_chain(), paused=True)
        w = RunWidget(run)
        await run.unpause()
        await until(lambda: (w.pieces.of("help") or (0, ""))[1].startswith(text[:14]))
        w.tabs.inspect("help")
        shown = rows(w.inspector.details.value)
        assert len(server.pieces) < 8  # the model is still writing
        assert shown[-1].startswith("1 | " + text[:14]) and shown[-1].endswith("writing… |  | ")
        assert (await run.wait()).ok
        w.refresh()
        w.tabs.inspect("help")
        shown = rows(w.inspector.details.value)
        assert w.pieces.of("help") is None
        assert shown[-1].startswith(f"1 | {text} |  |  | final answer")
        assert not any("writing…" in row for row in shown)
        w.close()
        await runtime.aclose()


async def test_the_dag_grows_a_turn_at_a_time_and_a_status_change_stays_a_patch() -> None:
    shop = Shop()
    with FakeOpenAI() as server:
        shop.agent(server)
        server.add(tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7,
                                                                           "amount": 15})),
                   "Refunded.")
        runtime, run = await start(shop, agent_chain(), paused=True)
        await until(lambda: run.steps["help"].status == "ready")
        w = RunWidget(run)
        canvas = w.dag.clicks
        assert canvas is not None
        svgs: list[str] = []
        canvas.observe(lambda change: svgs.append(change["new"]), names="svg")
        w.refresh()
        assert list(canvas.steps.values()) == ["help"] and svgs == []  # not grown yet
        await run.step("help")  # the model's first turn: two calls
        await until(lambda: "help/1.2" in run.steps)
        w.refresh()
        assert sorted(canvas.steps.values()) == ["help", "help/1.1", "help/1.2"]
        assert len(svgs) == 1 and "✦ turn 1 · 2 calls" in svgs[0]
        assert "turn 2" not in svgs[0]
        await run.step("help/1.1")  # a call's status changes: a patch, no new picture
        await until(lambda: run.steps["help/1.1"].status == "succeeded")
        w.refresh()
        assert len(svgs) == 1 and w.dag.shown_by_step()["help/1.1"] == ("succeeded", None)
        await until(lambda: run.steps["help/1.2"].status == "waiting_confirmation")
        await run.approve("help/1.2")
        await until(lambda: "help/1.2" in run.ready_steps())
        await run.step("help/1.2")  # (approved, it still waits for Step while paused)
        await until(lambda: run.steps["help"].status == "ready")
        w.refresh()  # every call settled: the next turn is drawn, and the queue names it
        assert len(svgs) == 2 and "✦ turn 2 · next" in svgs[1]
        assert "<code>help</code> (model turn 2)" in w.queue.value
        await run.unpause()
        assert (await run.wait()).ok
        w.refresh()
        assert len(svgs) == 3 and "✦ turn 2 · final answer" in svgs[2]
        assert w.dag.shown_by_step()["help/1.2"][0] == "succeeded"
        picture = w.picture_bundle()["text/html"]
        assert "turn 2 · final answer" in picture and "help/1.2" in picture
        w.close()
        await runtime.aclose()


def test_a_shape_graphviz_cannot_lay_out_keeps_the_picture_and_is_not_tried_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import chainlab.render as render
    from chainlab import Chain
    from chainlab.agent.turns import TurnShape
    from chainlab.jupyter.run_widget.dag import DagView
    from chainlab.render.svg import GraphvizError

    shop = Shop()
    chain = Chain.from_dict({"name": "c", "steps": [{"id": "help", "tool": "lookup",
                                                     "args": {"order": 1}}]})
    dag = DagView(chain, shop.toolbox)
    shown = dag.canvas.svg if dag.canvas is not None else None
    tries = []

    def broken(*args: object, **kwargs: object) -> None:
        tries.append(kwargs.get("agents"))
        raise GraphvizError("dot crashed", backend="dot")

    monkeypatch.setattr(render, "LiveDag", broken)
    grown = {"help": (TurnShape(1, (("help/1.1", "lookup"),)),)}
    assert dag.regrow(grown) is False and dag.regrow(grown) is False
    assert len(tries) == 1  # once, not on every redraw
    assert dag.canvas is not None and dag.canvas.svg == shown and dag.step_ids == ["help"]
    dag.update({"help": "running", "help/1.1": "running"}, agents=grown)  # the run goes on
    assert dag.shown_by_step() == {"help": ("running", None)}
