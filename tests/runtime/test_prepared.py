"""What a start computes once per chain (runtime/preparing.py): the value gate on the chain's
values, validation and compilation are cached by content, and no chain with a value the gate
refuses ever shares an entry with one it passed (issue 38 item 1, DESIGN §20)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import chainlab.runtime.preparing as preparing
from chainlab import Chain, PlanError, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore

pytestmark = pytest.mark.anyio

tools = Toolbox("prepared")


@tools.tool
def echo(value: Any = None) -> Any:
    return value


def chain(value: Any) -> Chain:
    data = {"name": "gated", "steps": [{"id": "a", "tool": "echo", "args": {"value": 0}}]}
    made = Chain.from_dict(data)
    made.steps[0].args["value"] = value  # (built from Python objects: not through the loader)
    return made


async def test_a_chain_started_again_is_gated_and_checked_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gated: list[str] = []
    real = preparing._gate
    monkeypatch.setattr(preparing, "_gate", lambda c, v: (gated.append(c.name), real(c, v)))
    runtime = Runtime(tools, MemoryStore())
    for _ in range(3):
        assert (await (await runtime.start(chain([1, 2]))).wait()).outputs["a"] == [1, 2]
    assert gated == ["gated"]
    await runtime.aclose()


BAD = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "surrogate": "a\ud800b",
       "huge int": 10**5000}


@pytest.mark.parametrize("name", BAD)
async def test_a_refused_value_never_shares_a_cached_entry(name: str) -> None:
    """The equal chain with null (or 0) there was started first: the cache must not take the
    one with NaN (serialised as null by pydantic) or an infinity for it."""
    bad = BAD[name]
    runtime = Runtime(tools, MemoryStore())
    for fine in (None, 0, 1.5, "ab"):
        assert (await (await runtime.start(chain(fine))).wait()).ok
    with pytest.raises(PlanError) as info:
        await runtime.start(chain(bad))
    assert info.value.problems[0].field == "chain.steps[0].args.value"
    assert runtime.store.list_runs() and len(runtime.store.list_runs()) == 4  # nothing made
    await runtime.aclose()


def rich_chain() -> Chain:
    """A chain that sets most of what a chain and its steps can say."""
    made = Chain.from_dict({
        "name": "rich", "description": "every kind of field",
        "options": {"max_concurrency": 3, "on_failure": "continue", "priority": "declaration"},
        "steps": [
            {"id": "a", "tool": "echo", "args": {"value": [1, 2.5, "x", None, {"k": True}]},
             "retry": {"max_attempts": 3, "backoff": "exponential"}, "timeout_s": 5,
             "save_as": "first", "description": "the first"},
            {"id": "b", "tool": "echo", "args": {"value": "{{ steps.a.output }}"},
             "when": "{{ steps.a.output }}", "confirm": True, "rollback": "none"},
            {"id": "c", "tool": "echo", "for_each": "{{ steps.a.output }}", "as": "one",
             "max_concurrency": 2, "args": {"value": "{{ one }}"}, "depends_on": ["b"]},
        ]})
    made.steps[0].args["extra"] = [math.nan, math.inf, -math.inf, 10**30]
    return made


def test_the_content_key_is_the_chain_dumped_to_json() -> None:
    """The cache's key text is the chain's JSON data with NaN and infinities as such,
    serialised straight from the chain (issue 38: a start no longer dumps the chain to
    Python data first), byte for byte what dumping it first gives."""
    from pydantic_core import to_json

    for made in (rich_chain(), chain(math.nan), chain(None)):
        assert preparing._content_json(made, exclude_defaults=True) == to_json(
            made.model_dump(exclude_defaults=True), inf_nan_mode="constants")
    assert b"NaN" in preparing._content_json(chain(math.nan))
    assert preparing._content_json(chain(math.nan)) != preparing._content_json(chain(None))
