"""Rules and grants through a real runtime on SQLite (DESIGN §21): who decided each call,
bound to its args hash and recorded before the call; grants in their scope, revoked,
expired or outlived by the rules; a grant racing a person's click; approver roles; and
every bad input with its message, nothing recorded."""

from __future__ import annotations

import warnings
from typing import Any

import anyio
import pytest

from chainlab.errors import ApproverError, DecisionError, PlanError, RunStateError
from chainlab.events import EventKind, StepStatus
from chainlab.runtime import Runtime
from chainlab.runtime.engine.approvals import PolicyWarning, parse_ttl
from chainlab.store import SQLiteStore
from chainlab.testing import ManualClock
from chainlab.tools import args_hash

from .conftest import by_of, refunds_chain, refunds_toolbox

pytestmark = pytest.mark.anyio
K = EventKind
SMALL = {"id": "small", "tool": "refund", "when": "args.amount <= 20", "decision": "approve",
         "reason": "small refunds"}
BIG = {"id": "big", "tool": "refund", "when": "args.amount > 1000", "decision": "reject",
       "reason": "over the limit"}


def runtime(tmp_path: Any, calls: list[Any] | None = None, clock: Any = None,
            **kw: Any) -> Runtime:
    meta = kw.pop("meta", {})
    return Runtime(refunds_toolbox(calls, **meta), SQLiteStore(tmp_path / "s.db"),
                   clock=clock, **kw)


async def test_rules_decide_before_the_call_bound_to_its_args(tmp_path: Any) -> None:
    calls: list[Any] = []
    rt = runtime(tmp_path, calls, policies=[BIG])
    run = await rt.start(refunds_chain([10, 5000, 500], policies=[SMALL],
                                       on_failure="continue"))
    result = await run.wait()
    assert result.waiting == {"pay[2]": "waiting_confirmation"}
    by = by_of(run.state)
    assert by["pay[0]"] == "policy:small" and by["pay[1]"] == "policy:big"
    assert run.state.steps["pay[1]"].status == StepStatus.REJECTED
    assert calls == [{"amount": 10.0, "currency": "EUR"}]  # 5000 never ran
    # the stored log: the rule's approval names it, binds the args hash, and comes
    # before the call's start (durable with or before it)
    events = rt.store.load_events(run.run_id)
    approved = [e for e in events if e.kind == K.STEP_APPROVED and e.step_id == "pay[0]"]
    started = [e for e in events if e.kind == K.STEP_STARTED and e.step_id == "pay[0]"]
    assert len(approved) == 1 and len(started) == 1
    assert approved[0].seq < started[0].seq
    assert approved[0].payload["args_hash"] == args_hash(started[0].payload["args"])
    assert approved[0].payload["reason"] == "small refunds"
    (rej,) = [e for e in events if e.kind == K.STEP_REJECTED]
    assert rej.payload["by"] == "policy:big" and rej.payload["reason"] == "over the limit"


async def test_an_ask_rule_adds_a_confirmation_and_always_ask_is_a_persons(
        tmp_path: Any) -> None:
    rt = runtime(tmp_path)
    chain = refunds_chain([5], on_failure="continue", policies=[
        {"id": "look", "tool": "lookup", "decision": "ask"}, SMALL])
    chain = chain.model_copy(update={"steps": [*chain.steps, chain.steps[0].model_copy(
        update={"id": "find", "tool": "lookup", "for_each": None,
                "args": {"order": "o1"}})]})
    run = await rt.start(chain)
    result = await run.wait()
    assert result.waiting == {"find": "waiting_confirmation"}  # it would not have asked
    assert by_of(run.state)["pay[0]"] == "policy:small"
    # a tool marked always_ask: no rule approves it
    rt2 = runtime(tmp_path / "b", meta={"always_ask": True})
    (tmp_path / "b").mkdir(exist_ok=True)
    run2 = await rt2.start(refunds_chain([5], policies=[SMALL]))
    assert (await run2.wait()).waiting == {"pay[0]": "waiting_confirmation"}


async def test_a_grant_decides_waiting_siblings_and_later_calls(tmp_path: Any) -> None:
    calls: list[Any] = []
    rt = runtime(tmp_path, calls)
    run = await rt.start(refunds_chain([50, 500, 80, 90]))
    await run.wait()
    await run.approve("pay[0]", by="alice", grant={"when": "args.amount <= 100",
                                                   "scope": "step", "ttl_s": "10m"})
    result = await run.wait()
    by = by_of(run.state)
    assert by["pay[0]"] == "alice"
    assert by["pay[2]"] == by["pay[3]"] == "grant:g1"
    assert result.waiting == {"pay[1]": "waiting_confirmation"}  # 500 is not covered
    (g,) = run.grants()
    assert (g["id"], g["by"], g["scope"], g["status"]) == ("g1", "alice", "step", "active")
    assert g["decided"] == ["pay[2]", "pay[3]"]
    # each grant decision is its own approval, bound to its own args
    events = rt.store.load_events(run.run_id)
    for sid in ("pay[2]", "pay[3]"):
        (ev,) = [e for e in events if e.kind == K.STEP_APPROVED and e.step_id == sid]
        assert ev.payload["by"] == "grant:g1"
        assert ev.payload["args_hash"] == run.state.steps[sid].args_hash


async def test_a_later_call_in_run_scope_is_decided_at_the_gate_until_revoked(
        tmp_path: Any) -> None:
    rt = runtime(tmp_path)
    chain = refunds_chain([30])
    chain = chain.model_copy(update={"steps": [*chain.steps, chain.steps[0].model_copy(
        update={"id": "more", "for_each": "{{ steps.pay.output }}",
                "args": {"amount": "{{ item.refunded }}"}}),
        chain.steps[0].model_copy(update={"id": "last", "for_each": None,
                                          "depends_on": ["more"],
                                          "args": {"amount": 40}})]})
    run = await rt.start(chain)
    await run.wait()
    await run.approve("pay[0]", grant={"when": "args.amount < 35", "scope": "run"})
    await run.wait()
    assert by_of(run.state)["more[0]"] == "grant:g1"  # a later call of another step
    assert run.state.steps["last"].status == StepStatus.WAITING_CONFIRMATION  # 40 >= 35
    await run.revoke("g1", by="bob")
    (g,) = run.grants()
    assert g["status"] == "revoked" and g["revoked"]["by"] == "bob"
    assert g["decided"] == ["more[0]"]  # what it decided stays decided
    with pytest.raises(RunStateError, match="already had grant revoked by bob"):
        await run.revoke("g1")
    with pytest.raises(RunStateError, match="has no grant 'g9'"):
        await run.revoke("g9")


async def test_an_expired_or_stale_grant_decides_nothing(tmp_path: Any) -> None:
    clock = ManualClock(start=1000.0)
    rt = runtime(tmp_path, clock=clock)
    run = await rt.start(refunds_chain([10, 20]))
    await run.wait()
    k = run._kernel
    assert k is not None
    from chainlab.runtime.engine.approvals import make_grant
    rec = make_grant(k, "pay[0]", {"when": "args.amount < 100", "ttl_s": 5})
    assert rec["expires_at"] == 1005.0
    clock.advance(10)
    from chainlab.plan.policies import fingerprint
    from chainlab.runtime.engine.approvals import grant_status
    assert grant_status(rec, clock.now(), fingerprint(k.rules)) == "expired"
    assert grant_status({**rec, "expires_at": None}, clock.now(), "other") == "stale"


async def test_a_grant_racing_a_persons_click_applies_exactly_once(tmp_path: Any) -> None:
    rt = runtime(tmp_path)
    run = await rt.start(refunds_chain([10, 20, 30]))
    await run.wait()
    outcomes: dict[str, Any] = {}

    async def grant() -> None:
        await rt.decide(run.run_id, "pay[0]", "approve", by="alice",
                        grant={"when": "args.amount < 100", "scope": "step"})
        outcomes["grant"] = "applied"

    async def click() -> None:
        try:
            await rt.decide(run.run_id, "pay[1]", "approve", by="bob")
            outcomes["click"] = "applied"
        except RunStateError as exc:
            outcomes["click"] = str(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(click)
        tg.start_soon(grant)
    await run.wait()
    events = rt.store.load_events(run.run_id)
    approvals = [e for e in events if e.kind == K.STEP_APPROVED and e.step_id == "pay[1]"]
    assert len(approvals) == 1  # exactly one decision for the contested call
    assert approvals[0].payload["by"] in ("bob", "grant:g1")
    if approvals[0].payload["by"] == "grant:g1":
        assert "approved by grant:g1" in outcomes["click"]
    starts = [e for e in events if e.kind == K.STEP_STARTED and e.step_id == "pay[1]"]
    assert len(starts) == 1


async def test_a_grant_racing_a_click_from_another_runtime(tmp_path: Any) -> None:
    # the click comes from another process's runtime on the same store: through the mailbox
    rt = runtime(tmp_path, heartbeat_s=0.05, mailbox_poll_s=0.02)
    other = runtime(tmp_path, heartbeat_s=0.05, mailbox_poll_s=0.02)
    run = await rt.start(refunds_chain([10, 20, 30]))
    await run.wait()
    async with rt:
        results: list[Any] = []

        async def remote_click() -> None:
            try:
                results.append(await other.decide(run.run_id, "pay[2]", "approve", by="bob"))
            except RunStateError as exc:
                results.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(remote_click)
            await run.approve("pay[0]", by="alice",
                              grant={"when": "args.amount < 100", "scope": "step"})
    events = rt.store.load_events(run.run_id)
    approvals = [e for e in events if e.kind == K.STEP_APPROVED and e.step_id == "pay[2]"]
    assert len(approvals) == 1
    if approvals[0].payload["by"] == "grant:g1":
        assert isinstance(results[0], RunStateError)
    else:
        assert results == ["applied"]


async def test_approvers_refuse_anyone_else_and_record_nothing(tmp_path: Any) -> None:
    rt = runtime(tmp_path, meta={"approvers": ["finance"]})
    run = await rt.start(refunds_chain([10, 20]))
    await run.wait()
    before = len(rt.store.load_events(run.run_id))
    with pytest.raises(ApproverError, match="may not approve or grant for tool 'refund'; it "
                                            "takes a principal with role finance"):
        await run.approve("pay[0]", by="mallory", roles=["support"])
    with pytest.raises(ApproverError):
        await run.approve("pay[0]", by="mallory", grant={"when": "args.amount < 50"})
    assert len(rt.store.load_events(run.run_id)) == before  # nothing recorded
    await run.approve("pay[0]", by="fiona", roles=["finance"],
                      grant={"when": "args.amount < 50"})
    await run.wait()
    assert by_of(run.state)["pay[1]"] == "grant:g1"


@pytest.mark.parametrize(("grant", "message"), [
    ({"when": "args.amount <= "}, "grant condition does not parse: expected a value at "
                                  "position 15"),
    ({"when": "args.amont < 5"}, "tool 'refund' has no arg 'amont'; did you mean 'amount'"),
    ({"when": "context.x < 5"}, "reads only the call's args"),
    ({"when": "args.amount < 5", "ttl_s": "ten minutes"}, "grant ttl 'ten minutes' is not a "
                                                          "duration"),
    ({"when": "args.amount < 5", "ttl_s": -3}, "is not a duration"),
    ({"when": "args.amount < 5", "scope": "world"}, "scope 'world' is not one of step, run"),
    ({"when": "args.amount < 5", "scope": "chain"}, "scope 'chain' is not built yet"),
    ({"when": "args.amount < 5", "until": 3}, "a grant takes when, scope and ttl_s"),
    ({}, "a grant needs a condition"),
    ("args.amount < 5", "a grant is an object"),
])
async def test_bad_grants_are_refused_naming_the_problem_nothing_recorded(
        tmp_path: Any, grant: Any, message: str) -> None:
    rt = runtime(tmp_path)
    run = await rt.start(refunds_chain([10]))
    await run.wait()
    before = len(rt.store.load_events(run.run_id))
    with pytest.raises(DecisionError, match=message.replace("(", r"\(").replace("?", r"\?")):
        await run.approve("pay[0]", grant=grant)
    assert len(rt.store.load_events(run.run_id)) == before
    assert run.state.steps["pay[0]"].status == StepStatus.WAITING_CONFIRMATION


def test_ttl_forms() -> None:
    assert parse_ttl("90s") == 90 and parse_ttl("10m") == 600 and parse_ttl(" 2h") == 7200
    assert parse_ttl(600) == 600 and parse_ttl("1d") == 86400 and parse_ttl("45") == 45


@pytest.mark.parametrize(("rule", "message"), [
    ({"id": "r", "tool": "refund", "when": "args.amount <", "decision": "approve"},
     "condition does not parse: expected a value at position 13"),
    ({"id": "r", "tool": "refund", "when": "args.amout > 1", "decision": "approve"},
     "rule 'r' reads args.amout, but tool 'refund' has no arg 'amout'; did you mean "
     "'amount'"),
    ({"id": "r", "tool": "refund", "when": "args.amount > 'big'", "decision": "approve"},
     "args.amount of tool 'refund' is number and cannot compare > 'big'"),
    ({"id": "r", "tool": "refund", "when": "args.currency < 3", "decision": "approve"},
     "args.currency of tool 'refund' is string and cannot compare < 3"),
    ({"id": "r", "tool": "refund", "decision": "approve", "always_ask": True},
     "always_ask goes with decision 'ask'"),
    ({"id": "r", "tool": "refund", "decision": "maybe"}, "decision"),
])
async def test_bad_rules_are_plan_problems(tmp_path: Any, rule: dict[str, Any],
                                           message: str) -> None:
    with pytest.raises(PlanError, match=message):
        runtime(tmp_path, policies=[rule])  # a deployment's rule: when the runtime is made
    rt = runtime(tmp_path)
    with pytest.raises(PlanError, match=message):  # a chain's: when it is checked
        chain = refunds_chain([1], policies=[rule])
        await rt.start(chain)
    assert rt.store.list_runs() == []


async def test_a_glob_matching_no_tool_warns_with_the_names_it_could_mean(
        tmp_path: Any) -> None:
    with pytest.warns(PolicyWarning, match=r"'refnd\*' matches no tool; did you mean "
                                           r"'refund'\?"):
        runtime(tmp_path, policies=[{"id": "r", "tool": "refnd*", "decision": "approve"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime(tmp_path, policies=[{"id": "r", "tool": "ref*", "decision": "approve"}])


async def test_the_dag_marks_calls_decided_by_a_rule_or_a_grant(tmp_path: Any) -> None:
    from chainlab.render.display import step_badges

    rt = runtime(tmp_path, policies=[BIG])
    run = await rt.start(refunds_chain([10, 5000, 50, 60], policies=[SMALL],
                                       on_failure="continue"))
    await run.wait()
    await run.approve("pay[2]", by="alice", grant={"when": "args.amount < 100"})
    await run.wait()
    badges = step_badges(run.state.steps)
    assert badges["pay[0]"] == "approved by rule"
    assert badges["pay[1]"] == "by rule"  # rejected by the deployment's rule
    assert badges["pay[2]"] == "approved"  # a person
    assert badges["pay[3]"] == "approved by grant"


async def test_a_confirmed_sub_chain_step_still_asks_with_rules_in_force(
        tmp_path: Any) -> None:
    from chainlab import Chain

    calls: list[Any] = []
    rt = runtime(tmp_path, calls, policies=[{"id": "all", "tool": "*", "decision": "approve"}])
    inner = Chain.from_dict({"name": "inner", "steps": [
        {"id": "look", "tool": "lookup", "args": {"order": "o1"}}]})
    rt.toolbox.add_chain(inner)
    outer = Chain.from_dict({"name": "outer", "steps": [
        {"id": "sub", "tool": "chain:inner", "confirm": True}]})
    run = await rt.start(outer)
    result = await run.wait()
    assert result.waiting == {"sub": "waiting_confirmation"}  # a rule cannot skip it
    await run.approve("sub")
    assert (await run.wait()).ok
