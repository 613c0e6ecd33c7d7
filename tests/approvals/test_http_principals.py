"""``chainlab serve --tokens FILE`` (a real subprocess over a loopback port): two tokens of
different roles; the one without the tool's approver role gets 403 and NOTHING is recorded;
the other approves with a grant, recorded under its principal; the tokens never appear in
the server's output or the store."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http.server import Server, env

HERE = Path(__file__).parent
ALICE = "alice-token-" + "a" * 24  # finance
BOB = "bob-token-" + "b" * 24  # support
CHAIN = {"name": "refunds", "steps": [{"id": "pay", "tool": "refund",
                                       "for_each": "{{ context.amounts }}",
                                       "args": {"amount": "{{ item }}"}}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cwd = tmp_path_factory.mktemp("serve")
    tokens = cwd / "tokens.json"
    tokens.write_text(json.dumps([
        {"token": ALICE, "principal": "alice", "roles": ["finance"]},
        {"token": BOB, "principal": "bob", "roles": ["support"]}]))
    server = Server(cwd, args=("--tokens", str(tokens)), tools="refund_tools:toolbox", chains=None,
                    extra_env={"PYTHONPATH": os.pathsep.join([str(HERE), *env()[
                        "PYTHONPATH"].split(os.pathsep)])})
    server.start()
    yield server
    server.stop()


def call(server: Server, token: str, method: str, path: str, body: Any = None) -> Any:
    return httpx.request(method, server.url + path, json=body, timeout=30,
                         headers={"Authorization": f"Bearer {token}"})


def test_roles_decide_who_may_approve_and_a_refusal_records_nothing(served: Server) -> None:
    r = call(served, ALICE, "POST", "/runs/wait", {"chain": CHAIN,
                                                   "context": {"amounts": [10, 20, 30]}})
    assert r.status_code in (200, 201), r.text
    run_id = r.json()["run_id"]
    before = call(served, ALICE, "GET", f"/runs/{run_id}/events").json()
    # bob (support) may not approve a refund: 403, and nothing is recorded
    r = call(served, BOB, "POST", f"/runs/{run_id}/steps/pay[0]/approve",
             {"grant": {"when": "args.amount < 100", "scope": "run"}})
    assert r.status_code == 403, r.text
    err = r.json()
    assert "bob (roles: support) may not approve or grant for tool 'refund'" in \
        err["message"]
    assert err["error"] == "forbidden" and err["required"] == ["finance"]
    after = call(served, ALICE, "GET", f"/runs/{run_id}/events").json()
    assert after == before
    # bob cannot pass himself off as alice through the body's `by`
    r = call(served, BOB, "POST", f"/runs/{run_id}/steps/pay[0]/approve", {"by": "alice"})
    assert r.status_code == 403
    # alice (finance) approves with a grant: recorded under her principal
    r = call(served, ALICE, "POST", f"/runs/{run_id}/steps/pay[0]/approve",
             {"grant": {"when": "args.amount < 100", "scope": "step", "ttl_s": "10m"}})
    assert r.status_code == 200, r.text
    assert r.json()["by"] == "alice"
    grants = call(served, ALICE, "GET", f"/runs/{run_id}/grants").json()["grants"]
    assert [(g["id"], g["by"], g["status"]) for g in grants] == [("g1", "alice", "active")]
    run = call(served, ALICE, "GET", f"/runs/{run_id}").json()
    assert run["steps"]["pay[0]"]["decided"]["by"] == "alice"
    assert run["steps"]["pay[1]"]["decided"]["text"] == "grant g1 by alice, step scope"
    # a bad grant: 422 naming the field
    r = call(served, ALICE, "POST", f"/runs/{run_id}/grants/g1/revoke")
    assert r.status_code == 200, r.text
    r = call(served, ALICE, "POST", f"/runs/{run_id}/grants/g1/revoke")
    assert r.status_code == 409 and "already had grant revoked by alice" in r.text
    grants = call(served, ALICE, "GET", f"/runs/{run_id}/grants").json()["grants"]
    assert grants[0]["status"] == "revoked"
    # an unknown token: 401
    assert call(served, "x" * 40, "GET", "/runs").status_code == 401
    # the tokens are nowhere: not in what the server printed, not in the store
    log = served.log()
    dump = "\n".join(sqlite3.connect(served.db).iterdump())
    for token in (ALICE, BOB):
        assert token not in log and token not in dump


def test_a_bad_grant_over_http_is_422_naming_the_field(served: Server) -> None:
    r = call(served, ALICE, "POST", "/runs/wait", {"chain": CHAIN,
                                                   "context": {"amounts": [10]}})
    run_id = r.json()["run_id"]
    r = call(served, ALICE, "POST", f"/runs/{run_id}/steps/pay[0]/approve",
             {"grant": {"when": "args.amont < 5"}})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "grant.when"
    assert "has no arg 'amont'; did you mean 'amount'" in r.json()["message"]
