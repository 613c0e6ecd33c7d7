"""Fault-injection matrix over a 5-step chain (issue 5): a failure at each step x a failing
compensation at each position x both rollback modes, then the operator fixes the cause and
``run.rollback()`` finishes the job.

The chain (``d`` waits until ``b`` and ``c`` started; ``b`` ends after ``d``; ``c`` after
``b``) completes in the order a, d, b, c, e, so reverse COMPLETION order (e, c, b, d, a) is
not reverse declaration order (e, d, c, b, a)::

    a ──┬── b (after d) ──┐
        ├── c (after b) ──┴── e      e depends on c only
        └── d (once b, c started)

a, c, e undo with the tool's default compensation ``delete(id={{ output.id }})``; b and d
with a step-level rollback ``release(hold={{ output.id }}, note="{{ input.name }} undone")``.
"""

from __future__ import annotations

from typing import Any

import pytest

from chainlab import Chain
from chainlab.runtime import RunStatus
from chainlab.tools import args_hash, idempotency_key

from .conftest import Saga, chain_of, statuses, step, until_idle

pytestmark = pytest.mark.anyio

RELEASE = {"tool": "release",
           "args": {"hold": "{{ output.id }}", "note": "{{ input.name }} undone"}}
COMPLETION = ["a", "d", "b", "c", "e"]


def five_steps(**options: Any) -> Chain:
    return chain_of(
        step("a"),
        step("b", ["a"], after=["d"], rollback=RELEASE),
        step("c", ["a"], after=["b"]),
        step("d", ["a"], started=["b", "c"], rollback=RELEASE),
        step("e", ["c"]),
        **options)


# failing step -> (steps that complete, in completion order; steps that never run + status)
OUTCOMES: dict[str | None, tuple[list[str], dict[str, str]]] = {
    None: (["a", "d", "b", "c", "e"], {}),  # succeeds; run.rollback() is asked
    "a": ([], {"b": "skipped", "c": "skipped", "d": "skipped", "e": "skipped"}),
    "b": (["a", "d", "c"], {"e": "cancelled"}),  # c was running: it finishes, is undone
    "c": (["a", "d", "b"], {"e": "skipped"}),
    "d": (["a", "b", "c"], {"e": "cancelled"}),  # b and c were running
    "e": (["a", "d", "b", "c"], {}),
}


def cases() -> list[Any]:
    out = []
    for mode in ("best_effort", "strict"):
        for fail, (done, _) in OUTCOMES.items():
            for broken in [None, *range(len(done))]:
                out.append(pytest.param(fail, broken, mode,
                                        id=f"{mode}-fail_{fail or 'none'}-undo_fails_{broken}"))
    return out


@pytest.mark.parametrize("fail,broken_at,mode", cases())
async def test_fault_matrix(saga: Saga, fail: str | None, broken_at: int | None,
                            mode: str) -> None:
    done, never = OUTCOMES[fail]
    order = list(reversed(done))  # the compensation order the saga must follow
    broken = order[broken_at] if broken_at is not None else None
    if fail:
        saga.fail.add(fail)
    if broken:
        saga.broken.add(broken)

    run, result = await saga.run(five_steps(rollback_mode=mode))
    if fail is None:
        assert result.status == RunStatus.SUCCEEDED
        await until_idle(run)
        await run.rollback()
        result = await run.wait()
    assert run.state.completion == done
    assert saga.created == done

    # ---- first rollback: exact order, statuses and payloads
    if broken_at is None:
        tried, undone, pending = order, order, []
    elif mode == "strict":
        tried, undone, pending = order[:broken_at + 1], order[:broken_at], order[broken_at + 1:]
    else:
        tried, undone, pending = order, [s for s in order if s != broken], []
    expected_run = (RunStatus.FAILED if not order else
                    RunStatus.ROLLBACK_FAILED if broken else RunStatus.ROLLED_BACK)
    assert result.status == expected_run
    assert saga.rollback_rounds(run) == ([tried] if order else [])
    assert saga.undo_order() == tried
    expected = {sid: "succeeded" for sid in done} | never
    if fail:
        expected[fail] = "failed"
    expected |= {sid: "compensated" for sid in undone}
    if broken:
        expected[broken] = "compensation_failed"
    assert statuses(run) == expected
    assert saga.world == ({broken} if broken else set()) | set(pending)

    kinds = [e.kind for e in saga.events(run)]
    end = saga.events(run)[-1]
    if order:
        started = next(e for e in saga.events(run) if e.kind == "run_rollback_started")
        assert started.payload["order"] == order
        reason = "rollback requested" if fail is None else f"step {fail!r} failed"
        assert started.payload["reason"] == reason
    else:
        assert "run_rollback_started" not in kinds
    if broken:
        assert end.kind == "run_rollback_failed"
        assert end.payload["failed"] == [broken]
        assert end.payload["pending"] == pending
        assert end.payload["needs_decision"] == []
        retries = [e.payload for e in saga.events(run)
                   if e.kind == "compensation_failed" and e.step_id == broken]
        assert [(p["will_retry"], p.get("delay_s")) for p in retries] == [
            (True, 0.5), (True, 1.0), (False, None)]  # default policy: 3, exponential
        assert saga.clock.slept == [0.5, 1.0]
    elif order:
        assert end.kind == "run_rolled_back" and end.payload["compensated"] == order
    else:
        assert end.kind == "run_failed"

    # ---- the operator fixes the cause; rollback() retries the failed one, then the pending
    if broken:
        saga.broken.clear()
        before = len(saga.undo_log)
        await until_idle(run)
        await run.rollback()
        result = await run.wait()
        assert result.status == RunStatus.ROLLED_BACK
        again = [broken, *pending]
        assert [u.name for u in saga.undo_log[before:]] == again
        assert saga.rollback_rounds(run) == [tried, again]
        assert statuses(run) == expected | {sid: "compensated" for sid in order}
        assert saga.world == set()
        assert saga.events(run)[-1].payload["compensated"] == again

    _check_attempts(saga, run, order, broken)


def _check_attempts(saga: Saga, run: Any, order: list[str], broken: str | None) -> None:
    """Compensations are attempts: kind "compensation", one stable key per step (the one the
    tool saw), distinct from the call's key; nothing compensated twice."""
    state = saga.fold(run)
    assert state.status == run.status
    comps = [a for a in state.attempts if a.kind == "compensation"]
    seen: dict[str, list[Any]] = {}
    for a in comps:
        seen.setdefault(a.step_id, []).append(a)
    assert sorted(seen) == sorted(order)
    calls = {a.step_id: a for a in state.attempts if a.kind == "call"}
    for sid, attempts in seen.items():
        tool = "release" if sid in ("b", "d") else "delete"
        args = ({"hold": f"rec-{sid}", "note": f"{sid} undone"} if tool == "release"
                else {"id": f"rec-{sid}"})
        key = idempotency_key(run.run_id, sid, args_hash(args), kind="compensation")
        assert {a.idempotency_key for a in attempts} == {key}
        assert key != calls[sid].idempotency_key
        assert {u.key for u in saga.undo_log if u.step_id == sid} == {key}
        assert all(u.kind == "compensation" and u.tool == tool
                   for u in saga.undo_log if u.step_id == sid)
        assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
        want = (["failed", "failed", "failed", "succeeded"] if sid == broken
                else ["succeeded"])
        assert [str(a.status) for a in attempts] == want
        assert all(a.tool == tool and a.ended_at is not None for a in attempts)
