"""Saga compensation, one behaviour per test: what is compensated with which args, what
triggers a rollback (fail_fast failure, rejection, cancel, ``run.rollback()``), steps still
running when the run stops, in-doubt steps, and the operator's ``run.rollback()``
(DESIGN §8, issue 5). Compensation attempts themselves: test_attempts.py."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from chainlab import RunStateError, TransientError
from chainlab.runtime import RunStatus

from .conftest import Saga, chain_of, statuses, step, until_idle, until_terminal

pytestmark = pytest.mark.anyio


def events_of(saga: Saga, run: Any, kind: str) -> list[Any]:
    return [e for e in saga.events(run) if e.kind == kind]


# ------------------------------------------------------------------ what is compensated, how
async def test_rollback_args_see_input_output_context_and_memory(saga: Saga) -> None:
    seen: list[dict[str, Any]] = []

    async def undo(**kwargs: Any) -> None:
        seen.append(kwargs)

    saga.toolbox.tool(undo, side_effects=True, idempotent=True)
    rollback = {"tool": "undo", "args": {
        "whole_output": "{{ output }}", "id": "{{ output.id }}", "name": "{{ input.name }}",
        "text": "undo {{ input.name }} for {{ context.user }}", "first": "{{ first.id }}",
        "via_memory": "{{ memory.first.name }}", "literal": 7}}
    saga.fail.add("c")
    chain = chain_of(step("a", save_as="first"), step("b", ["a"], rollback=rollback),
                     step("c", ["b"]))
    run = await saga.start(chain, {"user": "ana"})
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert seen == [{"whole_output": {"id": "rec-b", "name": "b"}, "id": "rec-b", "name": "b",
                     "text": "undo b for ana", "first": "rec-a", "via_memory": "a",
                     "literal": 7}]
    assert [u.name for u in saga.undo_log] == ["a"]  # a: the tool's default compensation
    started = events_of(saga, run, "compensation_started")[0]
    assert started.step_id == "b" and started.payload["args"] == seen[0]


async def test_rollback_none_and_steps_without_compensation_are_left_alone(saga: Saga) -> None:
    async def read(name: str) -> str:
        return name

    saga.toolbox.tool(read)  # no compensate metadata
    saga.fail.add("d")
    chain = chain_of(step("a"), step("b", ["a"], rollback="none"),
                     step("c", ["b"], tool="read"), step("d", ["c"]))
    run, result = await saga.run(chain)
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "succeeded", "c": "succeeded",
                             "d": "failed"}
    assert saga.compensation_order(run) == ["a"]
    assert events_of(saga, run, "run_rollback_started")[0].payload["order"] == ["a"]


async def test_failure_with_nothing_to_compensate_ends_failed(saga: Saga) -> None:
    saga.fail.add("b")
    run, result = await saga.run(chain_of(step("a", rollback="none"), step("b", ["a"])))
    assert result.status == RunStatus.FAILED
    assert not events_of(saga, run, "run_rollback_started")
    assert events_of(saga, run, "run_failed")[0].payload["steps"] == {"b": "failed"}


async def test_compensate_on_failure_false_then_rollback_by_hand(saga: Saga) -> None:
    saga.fail.add("c")
    chain = chain_of(step("a"), step("b", ["a"]), step("c", ["b"]),
                     compensate_on_failure=False)
    run, result = await saga.run(chain)
    assert result.status == RunStatus.FAILED and saga.undo_log == []
    await until_idle(run)
    await run.rollback()
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert saga.compensation_order(run) == ["b", "a"]
    assert events_of(saga, run, "run_rollback_started")[0].payload["reason"] == \
        "rollback requested"


async def test_on_failure_continue_compensates_nothing_until_asked(saga: Saga) -> None:
    saga.fail.add("b")
    # a; b fails; c is independent and runs on, after b ended
    chain = chain_of(step("a"), step("b", ["a"]), step("c", after=["b"]),
                     on_failure="continue")
    run, result = await saga.run(chain)
    assert result.status == RunStatus.FAILED
    assert statuses(run) == {"a": "succeeded", "b": "failed", "c": "succeeded"}
    assert saga.undo_log == []
    await until_idle(run)
    await run.rollback()
    assert (await run.wait()).status == RunStatus.ROLLED_BACK
    assert saga.compensation_order(run) == ["c", "a"]


async def test_a_step_that_times_out_while_the_run_stops_is_not_compensated(saga: Saga) -> None:
    saga.fail.add("b")
    # c is running when b fails; it never answers and times out (real, short timeout)
    chain = chain_of(step("a"), step("b", ["a"], started=["c"]),
                     step("c", ["a"], after=["never"], timeout_s=0.05))
    run, result = await saga.run(chain)
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "failed", "c": "failed"}
    assert run.steps["c"].error_kind == "timeout"
    assert saga.compensation_order(run) == ["a"]


# ------------------------------------------------------------------ confirmation
@pytest.mark.parametrize("on_failure", ["fail_fast", "continue"])
async def test_rejected_approval_rolls_back_under_fail_fast_only(saga: Saga,
                                                                 on_failure: str) -> None:
    chain = chain_of(step("a"), step("b", ["a"], after=["c"]), step("c", ["a"]),
                     step("pay", ["b", "c"], confirm=True), step("ship", ["pay"]),
                     on_failure=on_failure)
    run, result = await saga.run(chain)
    assert result.status == RunStatus.SUSPENDED and result.waiting == {
        "pay": "waiting_confirmation"}
    await run.reject("pay", "too expensive")
    result = await run.wait()
    base = {"pay": "rejected", "ship": "skipped"}
    if on_failure == "continue":
        assert result.status == RunStatus.FAILED and saga.undo_log == []
        assert statuses(run) == base | {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
        return
    assert result.status == RunStatus.ROLLED_BACK
    assert run.steps["ship"].reason == "rejected"
    assert statuses(run) == base | {"a": "compensated", "b": "compensated", "c": "compensated"}
    assert saga.compensation_order(run) == saga.undo_order() == ["b", "c", "a"]
    started = events_of(saga, run, "run_rollback_started")[0]
    assert started.payload == {"reason": "step 'pay' rejected", "order": ["b", "c", "a"]}


async def test_rollback_of_a_suspended_run_cancels_the_waiting_step(saga: Saga) -> None:
    chain = chain_of(step("a"), step("b", ["a"]), step("pay", ["b"], confirm=True))
    run, result = await saga.run(chain)
    assert result.status == RunStatus.SUSPENDED
    await run.rollback()
    result = await until_terminal(run)
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "compensated", "pay": "cancelled"}
    assert saga.compensation_order(run) == ["b", "a"]


async def test_cancel_of_a_suspended_run_compensates_completed_steps(saga: Saga) -> None:
    chain = chain_of(step("a"), step("b", ["a"]), step("pay", ["b"], confirm=True))
    run, result = await saga.run(chain)
    await run.cancel()
    result = await until_terminal(run)
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "compensated", "pay": "cancelled"}
    assert events_of(saga, run, "run_rollback_started")[0].payload["reason"] == \
        "cancelled by a person"


async def test_cancel_of_a_suspended_run_with_nothing_to_undo_ends_cancelled(
        saga: Saga) -> None:
    run, result = await saga.run(chain_of(step("a", rollback="none"),
                                          step("pay", ["a"], confirm=True)))
    await run.cancel()
    result = await until_terminal(run)
    assert result.status == RunStatus.CANCELLED
    assert statuses(run) == {"a": "succeeded", "pay": "cancelled"}


@pytest.mark.parametrize("action", ["cancel", "rollback"])
async def test_wait_after_cancel_of_a_suspended_run_waits_for_the_end(saga: Saga,
                                                                      action: str) -> None:
    run, result = await saga.run(chain_of(step("a"), step("pay", ["a"], confirm=True)))
    assert result.status == RunStatus.SUSPENDED
    await getattr(run, action)()
    with anyio.fail_after(2):
        result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK


# ------------------------------------------------------------------ stopping a live run
async def test_cancel_while_a_step_runs_compensates_what_completed(saga: Saga) -> None:
    run = await saga.start(chain_of(step("a"), step("b", ["a"], after=["never"]),
                                    step("c", ["a"]), step("d", ["b"])))
    await saga.ended["c"].wait()
    await run.cancel()
    with anyio.fail_after(5):
        result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    # b's call was cancelled (its tool is idempotent: cancelled, not in doubt), so it is
    # not compensated; d never ran
    assert statuses(run) == {"a": "compensated", "b": "cancelled", "c": "compensated",
                             "d": "cancelled"}
    assert saga.compensation_order(run) == saga.undo_order() == ["c", "a"]
    assert saga.world == set()


async def test_rollback_while_a_step_runs_stops_the_run_first(saga: Saga) -> None:
    run = await saga.start(chain_of(step("a"), step("b", ["a"], after=["never"]),
                                    step("c", ["a"]), step("d", ["b", "c"])))
    await saga.ended["c"].wait()
    await run.rollback()
    with anyio.fail_after(5):
        result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "cancelled", "c": "compensated",
                             "d": "cancelled"}
    assert saga.compensation_order(run) == ["c", "a"]
    assert saga.rollback_rounds(run) == [["c", "a"]]
    started = events_of(saga, run, "run_rollback_started")[0]
    assert started.payload == {"reason": "rollback requested", "order": ["c", "a"]}


async def test_cancel_of_an_unsafe_running_step_lists_it_as_needing_a_decision(
        saga: Saga) -> None:
    async def charge(name: str) -> dict[str, str]:
        await anyio.sleep_forever()
        return {}

    saga.toolbox.tool(charge, side_effects=True,
                      compensate=("delete", {"id": "{{ output.id }}"}))
    run = await saga.start(chain_of(step("a"), step("pay", ["a"], tool="charge")))
    await saga.started["pay"].wait()
    await run.cancel()
    with anyio.fail_after(5):
        result = await run.wait()
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert statuses(run) == {"a": "compensated", "pay": "in_doubt"}
    end = events_of(saga, run, "run_rollback_failed")[0].payload
    assert end["needs_decision"] == ["pay"] and end["failed"] == []


async def test_rollback_right_after_wait_is_not_dropped(saga: Saga) -> None:
    run, result = await saga.run(chain_of(step("a"), step("b", ["a"])))
    assert result.status == RunStatus.SUCCEEDED
    await run.rollback()  # no until_idle(): what a user script does
    with anyio.fail_after(2):
        result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK


# ------------------------------------------------------------------ operator rollback
async def test_rollback_of_a_rolled_back_run_is_refused(saga: Saga) -> None:
    saga.fail.add("b")
    run, result = await saga.run(chain_of(step("a"), step("b", ["a"])))
    assert result.status == RunStatus.ROLLED_BACK
    await until_idle(run)
    with pytest.raises(RunStateError, match="already rolled back"):
        await run.rollback()
    assert len(saga.undo_log) == 1


async def test_rollback_of_a_succeeded_run_in_reverse_completion_order(saga: Saga) -> None:
    # declared a, b, c, d; completion a, c, d, b
    chain = chain_of(step("a"), step("b", ["a"], after=["d"]), step("c", ["a"]),
                     step("d", ["a"], after=["c"]))
    run, result = await saga.run(chain)
    assert result.ok and run.state.completion == ["a", "c", "d", "b"]
    await until_idle(run)
    await run.rollback()
    assert (await run.wait()).status == RunStatus.ROLLED_BACK
    assert saga.compensation_order(run) == saga.undo_order() == ["b", "d", "c", "a"]
    assert run.outputs["b"] == {"id": "rec-b", "name": "b"}  # kept for the audit


# ------------------------------------------------------------------ in doubt
async def test_in_doubt_step_is_never_compensated_blindly(saga: Saga) -> None:
    async def charge(name: str) -> dict[str, str]:
        raise TransientError("connection reset")  # unsafe tool: did it charge?

    saga.toolbox.tool(charge, side_effects=True,
                      compensate=("delete", {"id": "{{ output.id }}"}))
    saga.fail.add("c")
    chain = chain_of(step("a"), step("b", ["a"], tool="charge"),
                     step("c", ["a"], after=["b"]))
    run, result = await saga.run(chain)
    assert result.status == RunStatus.ROLLBACK_FAILED
    assert statuses(run) == {"a": "compensated", "b": "in_doubt", "c": "failed"}
    end = events_of(saga, run, "run_rollback_failed")[0].payload
    assert end == {"reason": "step 'c' failed", "failed": [], "pending": [],
                   "needs_decision": ["b"]}
    assert [u.name for u in saga.undo_log] == ["a"]

    # a person checks: the charge did happen; rollback() now undoes it
    await until_idle(run)
    await run.resolve("b", output={"id": "rec-b", "name": "b"})
    await run.rollback()
    result = await run.wait()
    assert result.status == RunStatus.ROLLED_BACK
    assert statuses(run) == {"a": "compensated", "b": "compensated", "c": "failed"}
    assert saga.rollback_rounds(run) == [["a"], ["b"]]
