"""Attempts, retry and the safety rule (DESIGN §5): every combination of side_effects x
idempotent x error kind has one exact outcome."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import CallContext, PermanentError, ToolError, TransientError
from chainlab.runtime import RunStatus

from .conftest import Harness, chain_of

pytestmark = pytest.mark.anyio


def raiser(kind: str) -> Any:
    """A tool body failing once with the given kind, then returning 'ok'."""
    state = {"calls": 0}

    async def fn(ctx: CallContext) -> str:
        state["calls"] += 1
        if state["calls"] == 1:
            if kind == "execution_failed":
                raise ValueError("boom")
            if kind == "transient":
                raise TransientError("503")
            if kind == "permanent":
                raise PermanentError("no such account")
            if kind == "before_effect":
                raise TransientError("rate limited before sending", before_effect=True)
            if kind == "timeout":
                await anyio.sleep(5)
        return "ok"

    return fn, state


SAFE, UNSAFE, IDEMPOTENT = "effect-free", "unsafe", "idempotent"
# (tool kind, error kind) -> (final step status, calls made)
MATRIX = {
    (SAFE, "execution_failed"): ("succeeded", 2),
    (SAFE, "transient"): ("succeeded", 2),
    (SAFE, "timeout"): ("succeeded", 2),
    (SAFE, "permanent"): ("failed", 1),
    (SAFE, "before_effect"): ("succeeded", 2),
    (IDEMPOTENT, "execution_failed"): ("succeeded", 2),
    (IDEMPOTENT, "transient"): ("succeeded", 2),
    (IDEMPOTENT, "timeout"): ("succeeded", 2),
    (IDEMPOTENT, "permanent"): ("failed", 1),
    (IDEMPOTENT, "before_effect"): ("succeeded", 2),
    # a non-idempotent side effect is never repeated after an error that could follow it
    (UNSAFE, "execution_failed"): ("in_doubt", 1),
    (UNSAFE, "transient"): ("in_doubt", 1),
    (UNSAFE, "timeout"): ("in_doubt", 1),
    (UNSAFE, "permanent"): ("failed", 1),
    (UNSAFE, "before_effect"): ("succeeded", 2),
}
META = {
    SAFE: {},
    IDEMPOTENT: {"side_effects": True, "idempotent": True},
    UNSAFE: {"side_effects": True},
}


@pytest.mark.parametrize("case", sorted(MATRIX), ids=lambda c: f"{c[0]}-{c[1]}")
async def test_retry_matrix(h: Harness, case: tuple[str, str]) -> None:
    tool_kind, error = case
    fn, calls = raiser(error)
    h.toolbox.tool(fn, name="t", **META[tool_kind])
    chain = chain_of(
        {"id": "s", "tool": "t", "timeout_s": 0.05, "retry": {"max_attempts": 3, "delay_s": 2.0}}
    )
    run, result, _ = await h.run(chain)
    expected_status, expected_calls = MATRIX[case]
    assert run.steps["s"].status == expected_status
    assert calls["calls"] == expected_calls
    kind = "timeout" if error == "timeout" else ("transient" if error == "before_effect" else error)
    assert run.steps["s"].attempts == expected_calls
    events = h.store.load_events(run.run_id)
    if expected_status == "succeeded" and expected_calls == 2:
        retry = [e for e in events if e.kind == "step_retry_scheduled"]
        assert len(retry) == 1 and retry[0].payload["error_kind"] == kind
        assert retry[0].payload["delay_s"] == 2.0
        assert h.clock.slept == [2.0]  # back-off went through the injected clock
    if expected_status == "in_doubt":
        assert result.status == RunStatus.SUSPENDED
        assert run.waiting() == {"s": "in_doubt"}
        assert run.steps["s"].reason == kind
    if error == "timeout":
        assert any(e.kind == "step_timed_out" for e in events)


async def test_invalid_input_is_an_attempt_without_a_call(h: Harness) -> None:
    calls = []

    async def typed(n: int) -> int:
        calls.append(n)
        return n

    h.toolbox.tool(typed)
    chain = chain_of(
        {"id": "a", "tool": "typed", "args": {"n": 1}, "save_as": "x"},
        {
            "id": "b",
            "tool": "typed",
            "args": {"n": "{{ context.word }}"},
            "retry": {"max_attempts": 1},
        },
    )
    run, _result, _ = await h.run(chain, {"word": "eleven"})
    assert calls == [1]
    assert run.steps["b"].status == "failed"
    assert run.steps["b"].error_kind == "invalid_input"
    assert run.steps["b"].attempts == 1
    assert "args do not fit tool 'typed'" in run.steps["b"].error


async def test_exponential_backoff_is_capped(h: Harness) -> None:
    fails = {"n": 0}

    async def flaky() -> str:
        fails["n"] += 1
        if fails["n"] < 5:
            raise TransientError("again")
        return "ok"

    h.toolbox.tool(flaky)
    chain = chain_of(
        {
            "id": "s",
            "tool": "flaky",
            "retry": {
                "max_attempts": 5,
                "backoff": "exponential",
                "delay_s": 1.0,
                "max_delay_s": 3.0,
            },
        }
    )
    run, result, _ = await h.run(chain)
    assert result.ok
    assert h.clock.slept == [1.0, 2.0, 3.0, 3.0]
    assert [a.status for a in run.state.attempts] == ["failed"] * 4 + ["succeeded"]


async def test_retry_exhausted_fails_with_last_error(h: Harness) -> None:
    async def always() -> None:
        raise TransientError("still down")

    h.toolbox.tool(always)
    run, result, _ = await h.run(
        chain_of({"id": "s", "tool": "always", "retry": {"max_attempts": 3, "delay_s": 0}})
    )
    assert result.status == RunStatus.FAILED
    assert run.steps["s"].attempts == 3
    assert run.steps["s"].error == "still down"


async def test_retry_on_restricts_kinds(h: Harness) -> None:
    async def bad() -> None:
        raise ValueError("bug")

    h.toolbox.tool(bad)
    run, _, _ = await h.run(
        chain_of(
            {"id": "s", "tool": "bad", "retry": {"max_attempts": 3, "retry_on": ["transient"]}}
        )
    )
    assert run.steps["s"].attempts == 1 and run.steps["s"].status == "failed"


async def test_backoff_holds_no_slot(h: Harness) -> None:
    h.tracked("work")
    fails = {"n": 0}

    async def flaky(tag: str = "") -> str:
        fails["n"] += 1
        if fails["n"] == 1:
            raise TransientError("later")
        h.log.append(("start", tag))
        return tag

    h.toolbox.tool(flaky)
    chain = chain_of(
        {
            "id": "f",
            "tool": "flaky",
            "args": {"tag": "f"},
            "retry": {"max_attempts": 2, "delay_s": 10},
        },
        {"id": "o", "tool": "work", "args": {"tag": "o"}},
        max_concurrency=1,
    )
    _run, result, _ = await h.run(chain)
    assert result.ok
    assert h.starts() == ["o", "f"]  # o used the only slot while f backed off


async def test_call_context_and_idempotency_key_are_stable_across_retries(h: Harness) -> None:
    seen: list[CallContext] = []

    async def effect(order: str, ctx: CallContext) -> str:
        seen.append(ctx)
        if len(seen) == 1:
            raise ToolError("refused before sending", before_effect=True)
        return ctx.idempotency_key

    h.toolbox.tool(effect, side_effects=True)
    run, result, _ = await h.run(
        chain_of({"id": "pay", "tool": "effect", "args": {"order": "o-1"}})
    )
    assert result.ok
    assert [c.attempt for c in seen] == [1, 2]
    assert seen[0].idempotency_key == seen[1].idempotency_key != ""
    assert (seen[0].run_id, seen[0].step_id) == (run.run_id, "pay")
    assert [a.idempotency_key for a in run.state.attempts] == [seen[0].idempotency_key] * 2
    assert run.outputs["pay"] == seen[0].idempotency_key
