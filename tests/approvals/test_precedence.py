"""The precedence of DESIGN §21 as a property: random rule sets (deployment and run) and
random calls, through :func:`who_decides`, the function the confirmation gate calls."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chainlab.plan.policies import Policy, Rules, condition
from chainlab.runtime.engine.approvals import who_decides

CONDITIONS = ["", "args.amount <= 100", "args.amount > 100", "args.amount > 1000",
              "args.currency == 'EUR'", "args.currency != 'EUR' and args.amount < 50",
              "args.missing < 3"]


@st.composite
def rules(draw: Any, prefix: str) -> list[Policy]:
    out = []
    for i in range(draw(st.integers(0, 4))):
        decision = draw(st.sampled_from(["approve", "reject", "ask"]))
        out.append(Policy(id=f"{prefix}{i}", tool=draw(st.sampled_from(["refund", "ref*",
                                                                          "lookup", "*"])),
                          when=draw(st.sampled_from(CONDITIONS)), decision=decision,
                          always_ask=decision == "ask" and draw(st.booleans())))
    return out


calls = st.fixed_dictionaries({"amount": st.integers(-10, 5000),
                               "currency": st.sampled_from(["EUR", "USD"])})


@settings(max_examples=400, deadline=None)
@given(rules("d"), rules("r"), calls, st.booleans(), st.booleans(), st.booleans())
def test_never_an_approve_where_a_rule_rejects_or_asks_always(
        deployment: list[Policy], run: list[Policy], args: dict[str, Any], needs: bool,
        person_only: bool, granted: bool) -> None:
    levels = (Rules(deployment), Rules(run))
    grants = [{"id": "g1", "by": "alice", "expr": condition("args.amount >= 0")}] \
        if granted else []
    out = who_decides(levels, "refund", args, needs=needs, person_only=person_only,
                      grants=grants)
    applicable = [p for level in levels for p in level.matching("refund", args)]
    rejects = [p for p in applicable if p.decision == "reject"]
    if rejects:  # any applicable reject wins, the deployment's named first
        assert out.action == "reject"
        assert out.by == f"policy:{rejects[0].id}"
        return
    assert out.action != "reject"
    if any(p.always_ask for p in applicable) or (person_only and (
            needs or any(p.decision == "ask" for p in applicable))):
        assert out.action == "wait"  # a person's alone
        return
    asks = [p for p in applicable if p.decision == "ask"]
    if not needs and not asks:
        assert out.action == "run"  # nothing asks: nothing decides
        return
    if asks:  # an ask is never turned into a rule's approve; a grant may decide it
        assert out.action == ("approve" if granted and args["amount"] >= 0 else "wait")
        assert out.by in (None, "grant:g1")
        return
    approves = [p for p in applicable if p.decision == "approve"]
    if approves:
        assert (out.action, out.by) == ("approve", f"policy:{approves[0].id}")
    else:
        assert out.action == ("approve" if granted and args["amount"] >= 0 else "wait")


def test_a_deployment_reject_is_named_before_a_runs() -> None:
    d = Rules([{"id": "big", "tool": "refund", "when": "args.amount > 10", "decision": "reject"}])
    r = Rules([{"id": "mine", "tool": "*", "decision": "reject"},
               {"id": "ok", "tool": "refund", "decision": "approve"}])
    out = who_decides((d, r), "refund", {"amount": 50}, needs=True, person_only=False)
    assert (out.action, out.by) == ("reject", "policy:big")
    # a run's approve cannot loosen a deployment's ask
    d2 = Rules([{"id": "look", "tool": "refund", "decision": "ask"}])
    out = who_decides((d2, r.__class__([{"id": "ok", "tool": "refund",
                                          "decision": "approve"}])),
                      "refund", {"amount": 5}, needs=False, person_only=False)
    assert out.action == "wait"


def test_a_condition_that_cannot_be_evaluated_fails_closed() -> None:
    # args.amount is a string here: '<' cannot compare it with a number
    r = Rules([{"id": "r", "tool": "refund", "when": "args.amount > 5", "decision": "reject"},
               {"id": "a", "tool": "refund", "when": "args.amount < 5", "decision": "approve"}])
    out = who_decides((r,), "refund", {"amount": "x"}, needs=True, person_only=False)
    assert (out.action, out.by) == ("reject", "policy:r")
    r2 = Rules([{"id": "a", "tool": "refund", "when": "args.amount < 5",
                 "decision": "approve"}])
    assert who_decides((r2,), "refund", {"amount": "x"}, needs=True,
                       person_only=False).action == "wait"
