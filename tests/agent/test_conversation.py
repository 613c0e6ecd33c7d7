"""The conversation of an agent step, pure: the functions the model sees, the messages
rebuilt from recorded turns, what each call becomes, and what the model is told."""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Agent
from chainlab.agent.conversation import (
    Accepted,
    Offer,
    PastTurn,
    Refused,
    check_calls,
    function_names,
    messages,
    result_text,
)
from chainlab.agent.model import ModelCall, ModelRequest, ModelTurn


def test_function_names_are_the_tools_names_where_openai_allows_them() -> None:
    names = function_names(["lookup", "chain:escalate", "agent:billing", "crm.search",
                            "crm_search", "x" * 80])
    assert names == {"lookup": "lookup", "chain__escalate": "chain:escalate",
                     "agent__billing": "agent:billing", "crm_search": "crm.search",
                     "crm_search_2": "crm_search", "x" * 60: "x" * 80}


def offer(name: str) -> Offer:
    def check(args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args.get("n"), int):
            raise ValueError("n: Input should be a valid integer")
        return args
    return Offer(name, name, "", {"type": "object"}, check)


def test_each_call_becomes_a_step_or_a_refusal_in_the_models_order() -> None:
    calls = [ModelCall("a", "count", '{"n": 1}'), ModelCall("b", "cnt", "{}"),
             ModelCall("c", "count", '{"n": "1"}'), ModelCall("d", "count", ""),
             ModelCall("e", "count", '{"n": 2}')]
    verdicts = check_calls(calls, {"count": offer("count")}, max_calls=4)
    assert verdicts[0] == Accepted(0, "count", {"n": 1})
    assert verdicts[1] == Refused(1, "unknown tool 'cnt'; did you mean 'count'? The tools "
                                     "are: count")
    assert verdicts[2] == Refused(2, "the arguments do not fit 'count': n: Input should be a "
                                     "valid integer")
    assert verdicts[3] == Refused(3, "the arguments do not fit 'count': n: Input should be a "
                                     "valid integer")  # no arguments at all: {}
    assert isinstance(verdicts[4], Refused) and "at most 4 tool calls" in verdicts[4].error


def test_messages_put_each_result_after_its_call_in_the_models_order() -> None:
    answer = ModelTurn("Let me check.", (ModelCall("x", "f", "{}"), ModelCall("y", "g", "1")))
    got = messages("rules", "ask", [PastTurn(answer, ["one", "two"]),
                                    PastTurn(ModelTurn("{}"), [], "not the schema")])
    assert got == [
        {"role": "system", "content": "rules"}, {"role": "user", "content": "ask"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "y", "type": "function", "function": {"name": "g", "arguments": "1"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "one"},
        {"role": "tool", "tool_call_id": "y", "content": "two"},
        {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "not the schema"}]


def test_what_the_model_is_told_about_each_call() -> None:
    assert result_text("succeeded", output={"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert result_text("failed", error="card declined", error_kind="permanent") == \
        "error (permanent): card declined"
    assert result_text("rejected", reason="too much") == "a person rejected this call: too much"
    assert result_text("cancelled", reason="the run stopped") == \
        "not run: the call was cancelled (the run stopped)"


def test_a_request_hash_covers_what_is_asked_not_where() -> None:
    one = ModelRequest([{"role": "user", "content": "hi"}], step_id="a", turn=1)
    same = ModelRequest([{"role": "user", "content": "hi"}], step_id="b", turn=3)
    other = ModelRequest([{"role": "user", "content": "hi"}], temperature=0.5)
    assert one.hash == same.hash != other.hash
    assert ModelTurn.from_dict(ModelTurn("t", (ModelCall("i", "f", "{}"),), "stop").to_dict()) \
        == ModelTurn("t", (ModelCall("i", "f", "{}"),), "stop")


def test_arguments_and_answers_pass_the_value_gate() -> None:
    calls = [ModelCall("a", "count", '{"n": NaN}'), ModelCall("b", "count", '{"n": 1, "s": '
                                                                            '"\\ud800"}')]
    nan, surrogate = check_calls(calls, {"count": offer("count")}, max_calls=4)
    assert nan == Refused(0, "the arguments of 'count' cannot be taken: arguments.n is float "
                             "nan, not a JSON number (NaN and infinities have no JSON form); "
                             "send null or a string")
    assert isinstance(surrogate, Refused) and "arguments.s" in surrogate.error \
        and "lone surrogate" in surrogate.error
    agent = Agent("a", "help", output_schema={"type": "object"})
    with pytest.raises(ValueError, match=r"the answer cannot be taken: answer.x is float inf"):
        agent.check_answer('{"x": Infinity}')
    assert agent.check_answer('Here it is: {"x": 1}') == {"x": 1}
    with pytest.raises(ValueError, match="lone surrogate"):
        Agent("b", "help").check_answer("broken \ud800 text")
