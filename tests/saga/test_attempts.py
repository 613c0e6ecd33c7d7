"""Compensations are attempts (issue 5 point 3): their own retry policy (Rollback.retry,
else the tool's, else 3 exponential attempts), timeouts, the safety rule for unsafe tools,
argument errors, ``compensation_*`` events and ``kind="compensation"`` attempt records."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import CallContext, PermanentError, TransientError
from chainlab.runtime import RunStatus

from .conftest import Saga, chain_of, statuses, step

pytestmark = pytest.mark.anyio


def events_of(saga: Saga, run: Any, kind: str) -> list[Any]:
    return [e for e in saga.events(run) if e.kind == kind]


@pytest.mark.parametrize("where,attempts,slept", [
    ("default", 3, [0.5, 1.0]),
    ("tool", 2, [0.25]),
    ("rollback", 4, [0.1, 0.1, 0.1]),
])
async def test_compensation_retry_policy_precedence(saga: Saga, where: str, attempts: int,
                                                   slept: list[float]) -> None:
    calls: list[int] = []

    async def undo(id: str, ctx: CallContext) -> None:
        calls.append(ctx.attempt)
        raise TransientError("still down")

    meta = {"retry": {"max_attempts": 2, "delay_s": 0.25}} if where != "default" else {}
    saga.toolbox.tool(undo, side_effects=True, idempotent=True, **meta)
    rollback: dict[str, Any] = {"tool": "undo", "args": {"id": "{{ output.id }}"}}
    if where == "rollback":
        rollback["retry"] = {"max_attempts": 4, "delay_s": 0.1}
    saga.fail.add("b")
    run, result = await saga.run(chain_of(step("a", rollback=rollback), step("b", ["a"])))
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert calls == list(range(1, attempts + 1))
    assert saga.clock.slept == slept
    failed = events_of(saga, run, "compensation_failed")
    assert [e.payload["will_retry"] for e in failed] == [True] * (attempts - 1) + [False]
    assert run.steps["a"].status == "compensation_failed"
    assert run.steps["a"].compensations == attempts
    assert run.steps["a"].error == "still down"


async def test_a_compensation_that_is_not_safe_to_repeat_is_not_retried(saga: Saga) -> None:
    calls = 0

    async def refund(id: str) -> None:
        nonlocal calls
        calls += 1
        raise TransientError("gateway timeout")  # did the refund happen? unknown

    saga.toolbox.tool(refund, side_effects=True)  # not idempotent
    saga.fail.add("b")
    rollback = {"tool": "refund", "args": {"id": "{{ output.id }}"}}
    run, result = await saga.run(chain_of(step("a", rollback=rollback), step("b", ["a"])))
    assert result.status == RunStatus.ROLLBACK_FAILED and calls == 1
    assert events_of(saga, run, "compensation_failed")[0].payload["will_retry"] is False


async def test_permanent_compensation_error_is_not_retried(saga: Saga) -> None:
    async def undo(id: str) -> None:
        raise PermanentError("record is locked")

    saga.toolbox.tool(undo, side_effects=True, idempotent=True)
    saga.fail.add("b")
    rollback = {"tool": "undo", "args": {"id": "{{ output.id }}"}}
    run, result = await saga.run(chain_of(step("a", rollback=rollback), step("b", ["a"])))
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert [(e.payload["error_kind"], e.payload["will_retry"])
            for e in events_of(saga, run, "compensation_failed")] == [("permanent", False)]


async def test_compensation_timeout_is_an_attempt_that_timed_out(saga: Saga) -> None:
    async def undo(id: str) -> None:
        await anyio.sleep_forever()

    saga.toolbox.tool(undo, side_effects=True, idempotent=True)
    saga.fail.add("b")
    rollback = {"tool": "undo", "args": {"id": "{{ output.id }}"}, "timeout_s": 0.05,
                "retry": {"max_attempts": 2, "delay_s": 1.0}}
    run, result = await saga.run(chain_of(step("a", rollback=rollback), step("b", ["a"])))
    assert result.status == RunStatus.ROLLBACK_FAILED
    comps = [a for a in saga.fold(run).attempts if a.kind == "compensation"]
    assert [(a.attempt, str(a.status), a.error_kind) for a in comps] == [
        (1, "timed_out", "timeout"), (2, "timed_out", "timeout")]
    assert comps[0].retry_delay_s == 1.0 and saga.clock.slept == [1.0]
    assert "timeout_s=0.05" in (comps[1].error or "")


@pytest.mark.parametrize("args,message", [
    ({"id": "{{ output.missing }}"}, "cannot resolve args"),
    ({"id": "{{ output }}"}, "args do not fit tool 'delete'"),  # a dict, not a str
])
async def test_compensation_with_bad_args_fails_without_a_call(saga: Saga, args: dict[str, Any],
                                                               message: str) -> None:
    saga.fail.add("c")
    chain = chain_of(step("a"), step("b", ["a"], rollback={"tool": "delete", "args": args}),
                     step("c", ["b"]))
    run, result = await saga.run(chain)
    # best effort: a is still compensated after b's compensation failed
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert statuses(run) == {"a": "compensated", "b": "compensation_failed", "c": "failed"}
    assert [u.name for u in saga.undo_log] == ["a"]  # b's compensation was never called
    failed = events_of(saga, run, "compensation_failed")[0]
    assert failed.step_id == "b" and failed.payload["error_kind"] == "invalid_input"
    assert message in failed.payload["error"] and failed.payload["will_retry"] is False
    assert events_of(saga, run, "run_rollback_failed")[0].payload["failed"] == ["b"]


async def test_compensation_events_and_attempt_records(saga: Saga) -> None:
    saga.fail.add("b")
    saga.broken.add("a")
    run, result = await saga.run(chain_of(step("a"), step("b", ["a"])))
    assert result.status == RunStatus.ROLLBACK_FAILED
    comp = [(e.kind, e.attempt) for e in saga.events(run) if e.kind.startswith("compensation")]
    assert comp == [("compensation_started", 1), ("compensation_failed", 1),
                    ("compensation_started", 2), ("compensation_failed", 2),
                    ("compensation_started", 3), ("compensation_failed", 3)]
    assert all(e.epoch == 1 for e in saga.events(run))
    state = saga.fold(run)
    recs = [a for a in state.attempts if a.kind == "compensation"]
    assert [(a.step_id, a.attempt, str(a.status), a.retry_delay_s) for a in recs] == [
        ("a", 1, "failed", 0.5), ("a", 2, "failed", 1.0), ("a", 3, "failed", None)]
    assert len({a.idempotency_key for a in recs}) == 1
    assert [u.attempt for u in saga.undo_log] == [1, 2, 3]
    assert state.failure is not None and state.failure["failed"] == ["a"]
