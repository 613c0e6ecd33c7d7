"""The rest of the API against a real server: chains, validation, listing with filters
and a cursor, events paging, time travel, long poll, idempotent starts, reject, resolve,
cancel, rollback, fork, the inbox and the OpenAPI document."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from chainlab.http import ApiError, Client
from tests.http.server import Server, effects

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(240)]

IN_DOUBT = {"name": "charging", "steps": [{"id": "charge", "tool": "charge",
                                           "args": {"amount": "{{ context.amount }}"}}]}
BOOKING = {"name": "booking", "steps": [
    {"id": "room", "tool": "book", "args": {"room": "{{ context.room }}"}},
    {"id": "ok", "tool": "pay", "args": {"to": "hotel", "amount": 3},
     "depends_on": ["room"]}]}


def test_chains_are_listed_described_and_drawn(api: Client, server: Server) -> None:
    names = [c["name"] for c in api.chains()]
    assert names == ["crash", "payout", "quick"]
    detail = api.chain("payout")
    assert [s["id"] for s in detail["steps"]] == ["amount", "pay"]
    pay = detail["steps"][1]
    assert pay["depends_on"] == ["amount"] and pay["confirm"] is True and pay["side_effects"]
    schema = detail["context_schema"]
    assert schema["required"] == ["base", "to"]
    assert schema["properties"]["base"]["type"] == "integer"  # from add's argument a
    assert schema["properties"]["to"]["type"] == "string"
    assert "amount.args.a" in schema["properties"]["base"]["description"]
    assert {t["name"] for t in detail["tools"]} == {"add", "pay"}
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {server.token}"}) as http:
        svg = http.get("/chains/payout/graph.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in svg.text and "pay" in svg.text


def test_validate_reports_every_problem_as_the_plan_layer_does(api: Client) -> None:
    good = api.validate("name: ok\nsteps:\n  - {id: a, tool: add, args: {a: 1, b: 2}}\n")
    assert good == {"valid": True, "chain": "ok", "step_count": 1, "problems": []}
    bad = api.validate("name: bad\nsteps:\n"
                       "  - {id: a, tool: nope, args: {}}\n"
                       "  - {id: b, tool: add, args: {a: x, b: 2}, depends_on: [c]}\n")
    assert not bad["valid"]
    codes = {p["code"] for p in bad["problems"]}
    assert {"unknown_tool", "unknown_dependency", "invalid_args"} <= codes, bad
    assert all(p["line"] for p in bad["problems"])  # pointed at lines of the text
    syntax = api.validate("name: [unclosed\n")
    assert not syntax["valid"] and "line 1" in syntax["problems"][0]["message"]
    as_json = api.validate('{"name": "j", "steps": []}', yaml=False)
    assert as_json["valid"] and as_json["chain"] == "j"
    ctx = api.validate("name: c\nsteps:\n  - {id: a, tool: add, args: {a: '{{ context.n }}', "
                       "b: 1}}\n", context={"m": 1})
    assert [p["code"] for p in ctx["problems"]] == ["unknown_reference"]


def test_idempotency_key_and_run_id_return_the_same_run(api: Client, server: Server) -> None:
    first = api.start("quick", idempotency_key="order-17")
    again = api.start("quick", idempotency_key="order-17")
    assert again["run_id"] == first["run_id"]
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {server.token}"}) as http:
        r = http.post("/runs", json={"chain": "quick"}, headers={"Idempotency-Key": "order-17"})
        assert r.status_code == 200 and r.headers["idempotent-replayed"] == "true"
        assert r.headers["location"] == f"/runs/{first['run_id']}"
        reused = http.post("/runs", json={"chain": "payout", "context": {"base": 1, "to": "x"}},
                           headers={"Idempotency-Key": "order-17"})
        assert reused.status_code == 422 and reused.json()["error"] == "idempotency_key_reused"
        fresh = http.post("/runs", json={"chain": "quick"}, headers={"Idempotency-Key": "k2"})
        assert fresh.status_code == 201 and fresh.headers["location"].startswith("/runs/")
        # ten concurrent retries of one request: one run
        ids: list[str] = []

        def post() -> None:
            with httpx.Client(base_url=server.url, headers={
                    "Authorization": f"Bearer {server.token}"}) as c:
                ids.append(c.post("/runs", json={"chain": "quick"},
                                  headers={"Idempotency-Key": "burst"}).json()["run_id"])

        threads = [threading.Thread(target=post) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(ids) == 10 and len(set(ids)) == 1
    chosen = api.start("quick", run_id="my-run-1")
    assert chosen["run_id"] == "my-run-1" and api.start("quick", run_id="my-run-1")["run_id"] \
        == "my-run-1"
    with pytest.raises(ApiError) as clash:
        api.start("payout", {"base": 1, "to": "y"}, run_id="my-run-1")
    assert clash.value.status == 409


def test_a_key_with_a_run_id_names_one_request(server: Server) -> None:
    """Issue 36: ``POST /runs`` with an Idempotency-Key AND a run_id ignored the key: the same
    key with another run id or context started a second run."""
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {server.token}"}) as http:
        def post(body: dict[str, Any]) -> httpx.Response:
            return http.post("/runs", json=body, headers={"Idempotency-Key": "inv-9"})

        first = post({"chain": "quick", "run_id": "inv-9-run"})
        assert first.status_code == 201 and first.json()["run_id"] == "inv-9-run"
        again = post({"chain": "quick", "run_id": "inv-9-run"})
        assert again.status_code == 200 and again.json()["run_id"] == "inv-9-run"
        assert again.headers["idempotent-replayed"] == "true"
        for other in ({"chain": "quick", "run_id": "inv-9-other"},
                      {"chain": "payout", "context": {"base": 1, "to": "x"},
                       "run_id": "inv-9-run"},
                      {"chain": "quick"}, {"chain": "quick", "queue": "default"}):
            refused = post(other)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"] == "idempotency_key_reused"
            assert refused.json()["run_id"] == "inv-9-run"
        listed = [r["run_id"] for r in http.get("/runs", params={"limit": 500}).json()["runs"]]
        assert "inv-9-other" not in listed and listed.count("inv-9-run") == 1


def test_list_filters_and_pages_with_a_cursor(api: Client) -> None:
    started = [api.start("quick", wait=True)["run_id"] for _ in range(5)]
    waiting = api.start("payout", {"base": 2, "to": "z"}, wait=True)
    assert waiting["status"] == "suspended"
    page = api.runs(chain="quick", limit=2)
    seen = [r["run_id"] for r in page["runs"]]
    while page["next_cursor"]:
        page = api.runs(chain="quick", limit=2, cursor=page["next_cursor"])
        seen += [r["run_id"] for r in page["runs"]]
    assert len(seen) == len(set(seen)) and set(started) <= set(seen)
    assert all(r["chain"] == "quick" for r in api.runs(chain="quick")["runs"])
    suspended = api.runs(status="suspended")["runs"]
    assert waiting["run_id"] in [r["run_id"] for r in suspended]
    assert all(r["status"] == "suspended" for r in suspended)
    with_waiting = [r["run_id"] for r in api.runs(waiting=True)["runs"]]
    assert waiting["run_id"] in with_waiting and started[0] not in with_waiting
    api.reject(waiting["run_id"], "pay", "not today", by="carol")
    done = api.wait(waiting["run_id"])
    assert done["status"] == "failed" and done["steps"]["pay"]["status"] == "rejected"
    assert done["steps"]["pay"]["reason"] == "not today"


def test_events_paging_time_travel_and_long_poll(api: Client) -> None:
    run_id = api.start("payout", {"base": 1, "to": "tt"}, wait=True)["run_id"]
    log = api.events(run_id)
    assert log["last_seq"] == len(log["events"]) and log["next_after"] is None
    first = api.events(run_id, limit=2)
    assert [e["seq"] for e in first["events"]] == [1, 2] and first["next_after"] == 2
    rest = api.events(run_id, after=first["next_after"])
    assert [e["seq"] for e in first["events"] + rest["events"]] == \
        [e["seq"] for e in log["events"]]
    before = api.state(run_id, 1)
    assert before["at"] == 1 and before["steps"]["amount"]["status"] == "pending"
    waiting_at = next(e["seq"] for e in log["events"]
                      if e["kind"] == "step_waiting_confirmation")
    assert api.state(run_id, waiting_at)["steps"]["pay"]["status"] == "waiting_confirmation"
    assert api.state(run_id, 0)["status"] in ("running", "None")
    # a long poll on a suspended run answers at once; one that goes on, after its timeout
    assert api.wait(run_id, timeout=5)["status"] == "suspended"
    api.approve(run_id, "pay")
    assert api.wait(run_id, timeout=30)["status"] == "succeeded"


def test_resolve_an_in_doubt_step(api: Client) -> None:
    run = api.start(IN_DOUBT, {"amount": 9}, wait=True)
    run_id = run["run_id"]
    assert run["status"] == "suspended" and run["steps"]["charge"]["status"] == "in_doubt"
    [waiting] = api.confirmations(run_id)
    assert waiting["kind"] == "in_doubt" and "connection reset" in waiting["error"]
    assert list(waiting["actions"]) == ["resolve"]
    with pytest.raises(ApiError) as wrong:
        api.approve(run_id, "charge")
    assert wrong.value.status == 409 and wrong.value.error == "not_waiting"
    api.resolve(run_id, "charge", output={"receipt": "r-1"}, by="ops", note="checked")
    done = api.wait(run_id)
    assert done["status"] == "succeeded" and done["outputs"]["charge"] == {"receipt": "r-1"}
    resolved = [e for e in api.events(run_id)["events"] if e["payload"].get("resolved")]
    assert resolved[0]["payload"]["by"] == "ops"


def test_cancel_rollback_and_fork(api: Client, workdir: Path) -> None:
    run_id = api.start(BOOKING, {"room": "12"}, wait=True)["run_id"]
    assert api.get(run_id)["steps"]["room"]["status"] == "succeeded"
    plan = api.fork(run_id, context={"room": "14"}, plan_only=True)
    assert plan["parent"] == run_id and {r["step"] for r in plan["steps"]} == {"room", "ok"}
    assert next(r for r in plan["steps"] if r["step"] == "room")["decision"] == "confirm"
    cancelled = api.cancel(run_id)
    assert cancelled["run_id"] == run_id
    done = api.wait(run_id)
    assert done["status"] in ("cancelled", "rolled_back"), done
    mine = [e["kind"] for e in effects(workdir) if e["run_id"] == run_id]
    assert mine == ["book", "unbook"]  # cancelled, then compensated
    with pytest.raises(ApiError) as again:
        api.cancel(run_id)
    assert again.value.status == 409

    second = api.start(BOOKING, {"room": "20"}, wait=True)["run_id"]
    api.approve(second, "ok")
    assert api.wait(second)["status"] == "succeeded"
    api.rollback(second)
    rolled = api.wait(second)
    assert rolled["status"] == "rolled_back", rolled
    assert [e["kind"] for e in effects(workdir) if e["run_id"] == second] == \
        ["book", "pay", "unbook"]

    fork = api.fork(second, context={"room": "21"})
    assert fork["run_id"] != second and fork["lineage"]["forked_from"] == second
    forked = api.wait(fork["run_id"])
    assert forked["status"] == "suspended"  # a side effect to run again waits for a person


def test_the_inbox_lists_what_waits_across_runs(api: Client) -> None:
    a = api.start("payout", {"base": 1, "to": "inbox-a"}, wait=True)["run_id"]
    b = api.start(IN_DOUBT, {"amount": 1}, wait=True)["run_id"]
    items = {(w["run_id"], w["step_id"]): w for w in api.approvals()}
    assert items[(a, "pay")]["kind"] == "confirm" and items[(b, "charge")]["kind"] == "in_doubt"
    assert items[(a, "pay")]["actions"]["approve"] == f"/runs/{a}/steps/pay/approve"
    sinces = [w["since"] for w in api.approvals()]
    assert sinces == sorted(sinces)  # oldest first


def test_the_openapi_document_describes_every_endpoint(api: Client) -> None:
    spec: dict[str, Any] = api.request("GET", "/openapi.json")
    assert spec["openapi"].startswith("3.1")
    ops = {(m, p) for p, o in spec["paths"].items() for m in o}
    assert ("post", "/runs/{run_id}/steps/{step_id}/approve") in ops
    assert ("get", "/runs/{run_id}/stream") in ops
    approve = spec["paths"]["/runs/{run_id}/steps/{step_id}/approve"]["post"]
    body = approve["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body == "#/components/schemas/Approve"
    assert "409" in approve["responses"] and "422" in approve["responses"]
    assert set(spec["components"]["schemas"]["Approve"]["properties"]) == \
        {"args", "budget", "note", "by", "grant"}
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_a_step_whose_id_has_a_slash_is_approved_over_http(api: Client) -> None:
    """A sub-chain's step (``sub/pay``) or an agent's call (``help/1.2``) has a ``/`` in its
    id: the step routes take it whole, from the Client as from curl."""
    nest = {"name": "nest", "steps": [
        {"id": "sub", "tool": "chain:payout", "args": {"base": 1, "to": "slash"}}]}
    run = api.start(nest, wait=True)
    run_id = run["run_id"]
    assert run["status"] == "suspended", run
    assert [w["step_id"] for w in api.confirmations(run_id)] == ["sub/pay"]
    api.approve(run_id, "sub/pay", note="fine")
    done = api.wait(run_id, timeout=30)
    assert done["status"] == "succeeded", done
    assert done["steps"]["sub/pay"]["status"] == "succeeded"
