"""chainlab._json: plain JSON values, and the identities stored runs depend on (their exact
bytes are pinned in tests/test_structure.py)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import chainlab._json
import chainlab.tools
from chainlab._json import NotJSONError, args_hash, idempotency_key, to_json_value


class Point(BaseModel):
    x: int
    y: int = 0


def test_to_json_value_makes_plain_data() -> None:
    assert to_json_value({"a": (1, 2.5, None, True, "s"), "p": Point(x=1)}) == {
        "a": [1, 2.5, None, True, "s"], "p": {"x": 1, "y": 0}}


@pytest.mark.parametrize("value", [{"a": object()}, float("nan"), {1: 2}])
def test_to_json_value_refuses_what_is_not_json(value: object) -> None:
    with pytest.raises(NotJSONError):
        to_json_value(value)


def test_chainlab_tools_re_exports_the_same_objects() -> None:
    for name in ("NotJSONError", "args_hash", "code_fingerprint", "idempotency_key",
                 "to_json_value"):
        assert getattr(chainlab.tools, name) is getattr(chainlab._json, name), name


# ---------------------------------------------------------------------------- keys


def test_args_hash_is_stable_and_order_independent() -> None:
    a = {"table_id": "t", "rows": [{"a": 1, "b": 2}], "n": 1.5}
    b = {"n": 1.5, "rows": [{"b": 2, "a": 1}], "table_id": "t"}
    assert args_hash(a) == args_hash(b)
    assert len(args_hash(a)) == 16 and int(args_hash(a), 16) >= 0
    assert args_hash(a) == args_hash(dict(a))  # deterministic across calls
    different = [
        {**a, "n": 2},
        {**a, "rows": [{"a": 1, "b": 3}]},
        {**a, "rows": [{"a": 1, "b": 2}, {"a": 1, "b": 2}]},
        {**a, "extra": None},
        {"table_id": "t"},
        {},
    ]
    hashes = {args_hash(d) for d in different}
    assert len(hashes) == len(different)
    assert args_hash(a) not in hashes
    assert args_hash({"s": "é"}) != args_hash({"s": "e"})
    # list order matters (it is data), key order does not
    assert args_hash({"l": [1, 2]}) != args_hash({"l": [2, 1]})


def test_idempotency_key() -> None:
    digest = args_hash({"a": 1})
    key = idempotency_key("run-1", "step-a", digest)
    assert key == idempotency_key("run-1", "step-a", digest, "call")
    assert len(key) == 32
    others = {
        idempotency_key("run-2", "step-a", digest),
        idempotency_key("run-1", "step-b", digest),
        idempotency_key("run-1", "step-a", args_hash({"a": 2})),
        idempotency_key("run-1", "step-a", digest, "compensation"),
        # fields are separated, so shifting text between them changes the key
        idempotency_key("run-1s", "tep-a", digest),
    }
    assert len(others) == 5 and key not in others
