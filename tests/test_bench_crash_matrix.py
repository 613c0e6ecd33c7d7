"""benchmarks/crash_matrix.py's own logic: the scripted model's answer per scenario and turn
(read from the chat messages each SDK sends), the ledger's counts, the person's decisions,
and the overhead per call and per turn derived from three shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import crash_matrix as cm  # noqa: E402

from chainlab.testing.openai_script import Call, Reply  # noqa: E402

USER = {"role": "user", "content": "Order 7 arrived broken. Please refund 15."}


def conversation(*calls: Call) -> list[dict[str, object]]:
    """The messages after the model made ``calls``, one per turn, each answered."""
    out: list[dict[str, object]] = [{"role": "system", "content": "be nice"}, USER]
    for n, call in enumerate(calls):
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function",
             "function": {"name": call.function, "arguments": call.arguments_text()}}]})
        out.append({"role": "tool", "tool_call_id": f"c{n}", "content": "ok"})
    return out


LOOKUP = Call("lookup_order", {"order_id": 7})
REFUND = Call("refund", {"order_id": 7, "amount": 15})


def test_the_model_looks_up_refunds_then_answers() -> None:
    assert cm.answer("approve", conversation()) == LOOKUP
    assert cm.answer("approve", conversation(LOOKUP)) == REFUND
    assert cm.answer("approve", conversation(LOOKUP, REFUND)) == cm.FINAL
    # a request asked again for the same turn (a resumed peer) gets the same answer
    assert cm.answer("kill_in_refund", conversation(LOOKUP)) == REFUND


def test_reask_asks_a_second_refund_with_other_args() -> None:
    again = cm.answer("reask", conversation(LOOKUP, REFUND))
    assert again == Call("refund", {"order_id": 7, "amount": 25})
    assert cm.answer("reask", conversation(LOOKUP, REFUND, again)) == cm.FINAL


def test_slow_beside_asks_both_calls_in_one_turn() -> None:
    first = cm.answer("slow_beside", conversation())
    assert isinstance(first, Reply) and first.tool_calls == (LOOKUP, REFUND)
    assert cm.answer("slow_beside", conversation(LOOKUP)) == cm.FINAL


def test_the_timing_shape_is_read_from_the_request_in_text_or_parts() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "timing 3x2 #0"}]}]
    first = cm.answer("timing", messages)
    assert isinstance(first, Reply)
    assert [c.arguments for c in first.tool_calls] == [{"n": 0}, {"n": 1}]
    ping = Call("ping", {"n": 0})
    assert cm.answer("timing", messages + conversation(ping, ping, ping)[2:]) == "done"
    assert cm.turn_of(conversation(ping, ping)) == 3


def test_the_ledger_is_counted_per_tool(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert cm.read_ledger(path) == []
    lines = [{"tool": "lookup_order"}, {"tool": "refund"}, {"tool": "refund"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + "\n")
    assert cm.count_by_tool(cm.read_ledger(path)) == {"lookup_order": 1, "refund": 2}


def test_the_person_approves_the_asked_refund_only(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    refund = {"id": "r", "tool": "refund", "args": {"order_id": 7, "amount": 15},
              "kind": "approval"}
    assert cm.decide("approve", refund, ledger) == {"id": "r", "approve": True}
    assert cm.decide("reject", refund, ledger) == {"id": "r", "reject": cm.REASON}
    other = {**refund, "args": {"order_id": 7, "amount": 25}}
    assert cm.decide("reask", other, ledger) == {"id": "r", "reject": cm.SECOND_REASON}
    limit = {"id": "s", "tool": "agent:support", "args": {}, "kind": "limit"}
    assert "reject" in cm.decide("turn_limit", limit, ledger)
    # an in-doubt refund is resolved with the effect the ledger shows
    ledger.write_text(json.dumps({"tool": "refund", "args": {"order_id": 7, "amount": 15}})
                      + "\n")
    doubt = {**refund, "kind": "in_doubt"}
    assert cm.decide("kill_in_refund", doubt, ledger) == {
        "id": "r", "resolve": {"order_id": 7, "refunded": 15}}


def test_overhead_per_call_and_per_turn_from_three_shapes() -> None:
    # a turn costs 2 ms, a call 1 ms: 1x1 is 2 turns (2 requests) + 1 call = 5 ms of own
    # time, 1x16 is 4 + 16 = 20 ms, 9x1 is 20 + 9 = 29 ms; the model's time is taken off
    rows = [{"turns": 1, "calls": 16, "wall_s": 0.020 + 0.3, "model_s": 0.3},
            {"turns": 9, "calls": 1, "wall_s": 0.029 + 0.9, "model_s": 0.9},
            {"turns": 1, "calls": 1, "wall_s": 0.005 + 0.1, "model_s": 0.1}]
    per_call, per_turn = cm.overhead(rows)
    assert per_call == pytest.approx(1000)
    assert per_turn == pytest.approx(2000)
    with pytest.raises(ValueError, match="1x1,1x16,9x1"):
        cm.overhead(rows[:1] + rows[2:])


def test_the_slow_note_is_timed_from_the_first_request() -> None:
    note = cm.slow_note({"asked": 10.05, "decided": 11.05}, [{"tool": "lookup_order",
                                                             "t": 11.55}], 10.0)
    assert note == "approval asked 0.05 s, decided 1.05 s, slow lookup done 1.55 s"
    assert cm.slow_note({}, [], 10.0).endswith("slow lookup done -")
