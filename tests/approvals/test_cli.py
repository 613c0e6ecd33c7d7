"""The command line's doors (a real ``chainlab`` subprocess on SQLite): ``run --policies``
(the deployment's rules), ``approve --grant`` (with its bad inputs), ``grants``,
``revoke``, and who decided each call in ``show`` and ``timeline``."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import chainlab, write

HERE = Path(__file__).parent
CHAIN = """
name: payouts
inputs: {amounts: {type: array}}
steps:
  - id: pay
    tool: payout
    for_each: "{{ context.amounts }}"
    args: {amount: "{{ item }}"}
options:
  on_failure: continue
  policies:
    - {id: small, tool: payout, when: "args.amount <= 20", decision: approve,
       reason: small payouts}
"""
RULES = """
- {id: huge, tool: payout, when: "args.amount > 1000", decision: reject, reason: over limit}
"""
TOOLS = ("--tools", "example_tools:toolbox")


def test_rules_grants_and_revoke_from_the_command_line(tmp_path: Path) -> None:
    write(tmp_path / "c.yaml", CHAIN)
    write(tmp_path / "rules.yaml", RULES)
    db = ("--db", str(tmp_path / "runs.db"))
    r = chainlab("run", "c.yaml", *TOOLS, *db, "--policies", "rules.yaml", "-c",
                 '{"amounts": [10, 5000, 50, 60, 500]}', cwd=tmp_path)
    assert r.code == 3, r.err  # suspended: 50, 60 and 500 wait for a person
    run_id = r.run_id()
    assert "policy small: small payouts" in r.out and "policy huge: over limit" in r.out
    # bad grants: the message, exit 1 or 2, nothing decided
    bad = chainlab("approve", run_id, "pay[2]", "--grant", "args.amont < 100", *db,
                   cwd=tmp_path, CHAINLAB_POLICIES="rules.yaml")
    assert bad.code != 0 and "has no arg 'amont'; did you mean 'amount'" in bad.err
    bad = chainlab("approve", run_id, "pay[2]", "--grant", "args.amount < 100", "--ttl",
                   "soon", *db, cwd=tmp_path, CHAINLAB_POLICIES="rules.yaml")
    assert bad.code != 0 and "grant ttl 'soon' is not a duration" in bad.err
    # a grant given on pay[2] decides pay[3] (waiting now) but not pay[4] (500)
    ok = chainlab("approve", run_id, "pay[2]", "--grant", "args.amount < 100", "--scope",
                  "run", "--ttl", "10m", "--by", "alice", *db, cwd=tmp_path,
                  CHAINLAB_POLICIES="rules.yaml")
    assert ok.code == 3, ok.err
    assert "grant g1 by alice, run scope" in ok.out
    g = chainlab("grants", run_id, *db, cwd=tmp_path)
    assert g.code == 0 and "args.amount < 100" in g.out and "active" in g.out
    assert "pay[3]" in g.out
    rv = chainlab("revoke", run_id, "g1", "--by", "bob", *db, cwd=tmp_path,
                  CHAINLAB_POLICIES="rules.yaml")
    assert rv.code == 3, rv.err
    js = chainlab("grants", run_id, *db, "--json", cwd=tmp_path).json
    assert js[0]["status"] == "revoked" and js[0]["revoked"]["by"] == "bob"
    again = chainlab("revoke", run_id, "g1", *db, cwd=tmp_path,
                     CHAINLAB_POLICIES="rules.yaml")
    assert again.code != 0 and "already had grant revoked by bob" in again.err
    t = chainlab("timeline", run_id, *db, cwd=tmp_path)
    assert "decided_by" in t.out and "grant g1 by alice, run scope" in t.out
    shown = chainlab("show", run_id, *db, "--json", cwd=tmp_path).json
    assert shown["steps"]["pay[1]"]["decided"] == {
        "action": "rejected", "by": "policy:huge", "text": "policy huge: over limit"}
