"""The value gate itself (chainlab._json.to_json_value): it refuses exactly what the
independent oracle (chainlab.testing.hostile.refusal) says, naming where, and keeps every
other value exactly."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from chainlab._json import (
    MAX_DEPTH,
    MAX_STRING_CHARS,
    MAX_VALUE_SIZE,
    NotJSONError,
    clean_text,
    to_json_value,
)
from chainlab.errors import ChainlabError
from chainlab.testing.hostile import hostile_json, json_text, refusal, same_json
from tests.gate.doors import Tally


def test_the_gate_refuses_exactly_what_the_oracle_refuses() -> None:
    tally = Tally("the gate itself")

    @settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(hostile_json())
    def one(value: Any) -> None:
        why = refusal(value)
        try:
            kept = to_json_value(value, "v")
        except NotJSONError as exc:
            assert why is not None, f"refused a good value: {exc}"
            assert isinstance(exc, ChainlabError) and isinstance(exc, TypeError)
            assert exc.path.startswith("v"), exc.path
            tally.refused()
            return
        assert why is None, f"took a value it must refuse ({why})"
        assert same_json(kept, value)
        tally.taken()

    one()
    tally.check(minimum=500)


@pytest.mark.parametrize(("value", "path", "words"), [
    ({"rows": [{}, {}, {}, {"price": float("nan")}]}, "outputs.rows[3].price",
     "not a JSON number"),
    ({"a": ["x", "b\ud800"]}, "outputs.a[1]", "lone surrogate"),
    ({"k\udfff": 1}, 'outputs["k\\udfff"] (key)', "lone surrogate"),
    ({"n": 10**4300}, "outputs.n", "more than 4300 digits"),
    ({"s": "x" * (MAX_STRING_CHARS + 1)}, "outputs.s", f"the limit is {MAX_STRING_CHARS}"),
    ({"odd key": [float("-inf")]}, 'outputs["odd key"][0]', "not a JSON number"),
])
def test_a_refusal_names_the_path_and_the_rule(value: Any, path: str, words: str) -> None:
    with pytest.raises(NotJSONError) as info:
        to_json_value(value, "outputs")
    assert info.value.path == path
    assert words in str(info.value)
    str(info.value).encode("utf-8")  # the message itself is storable text


def test_nesting_limit_is_exact() -> None:
    def nest(n: int) -> Any:
        value: Any = 1
        for _ in range(n):
            value = [value]
        return value

    assert to_json_value(nest(MAX_DEPTH)) == nest(MAX_DEPTH)
    with pytest.raises(NotJSONError, match=f"more than {MAX_DEPTH} levels"):
        to_json_value(nest(MAX_DEPTH + 1))
    with pytest.raises(NotJSONError):  # far deeper than Python's recursion limit: no crash
        to_json_value(nest(200_000))


def test_size_limit_counts_shared_strings_every_time() -> None:
    chunk = "y" * (MAX_STRING_CHARS // 2)
    fits = [chunk] * (MAX_VALUE_SIZE // len(chunk) - 1)
    assert to_json_value(fits) is not fits
    with pytest.raises(NotJSONError, match="past the size limit"):
        to_json_value([chunk] * (MAX_VALUE_SIZE // len(chunk) + 1))


def test_clean_text_keeps_a_message_and_makes_it_storable() -> None:
    assert clean_text("plain") == "plain"
    assert clean_text("é😀") == "é😀"
    assert clean_text("bad \ud800 byte") == "bad \ufffd byte"
    clean_text("a\udc80" * 3).encode("utf-8")


def test_json_text_writes_what_a_hostile_client_sends() -> None:
    assert json_text({"a": [float("nan"), "\ud800", True, None]}) == \
        '{"a":[NaN,"\\ud800",true,null]}'
    assert json_text(10**5000).startswith("1000") and len(json_text(10**5000)) == 5001
    deep = [1]
    for _ in range(300_000):
        deep = [deep]
    assert json_text(deep).count("[") == 300_001
