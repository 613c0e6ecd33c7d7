"""A client's bad input gets one clear 4xx JSON body (error, message, fix, problems) and
never a traceback, in the answer or in the server's log."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from chainlab.http import Client
from tests.http.server import Server

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(240)]


@pytest.fixture
def http(server: Server) -> Any:
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {server.token}"}) as client:
        yield client


def error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["error"] == code and body["message"], body
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body  # type: ignore[no-any-return]


def suspended_run(api: Client) -> str:
    run_id = api.start("payout", {"base": 1, "to": "x"})["run_id"]
    assert api.wait(run_id, timeout=60)["status"] == "suspended"
    return run_id  # type: ignore[no-any-return]


def test_malformed_json(http: httpx.Client) -> None:
    body = error(http.post("/runs", content=b'{"chain": "payout",',
                           headers={"Content-Type": "application/json"}), 400, "bad_request")
    assert "not valid JSON" in body["message"] and "line 1" in body["message"]
    error(http.post("/runs", content=b"[1, 2]"), 400, "bad_request")
    error(http.post("/runs", content=b"\xff\xfe"), 400, "bad_request")


def test_a_body_that_is_not_json(http: httpx.Client) -> None:
    body = error(http.post("/runs", content=b"chain=payout",
                           headers={"Content-Type": "application/x-www-form-urlencoded"}),
                 415, "unsupported_media_type")
    assert "application/json" in body["fix"]


def test_unknown_fields_and_wrong_types(http: httpx.Client) -> None:
    body = error(http.post("/runs", json={"chain": "payout", "contxt": {}}), 400,
                 "bad_request")
    assert body["problems"][0]["field"] == "contxt"
    assert body["problems"][0]["message"] == "unknown field"
    body = error(http.post("/runs", json={"chain": "payout", "context": [1]}), 400,
                 "bad_request")
    assert body["problems"][0]["field"] == "context"
    error(http.post("/runs", json={"chain": "payout", "run_id": "no spaces"}), 400,
          "bad_request")


def test_unknown_chain_run_step_and_route(http: httpx.Client, api: Client) -> None:
    body = error(http.post("/runs", json={"chain": "payuot"}), 404, "not_found")
    assert "did you mean 'payout'" in body["message"]
    error(http.get("/chains/nope"), 404, "not_found")
    run_id = suspended_run(api)
    body = error(http.get(f"/runs/{run_id[:-1]}"), 404, "not_found")
    assert "did you mean" in body["message"]
    for path in ("", "/events", "/stream", "/confirmations", "/wait?timeout=0"):
        error(http.get(f"/runs/no-such-run{path}"), 404, "not_found")
    body = error(http.post(f"/runs/{run_id}/steps/pya/approve", json={}), 404, "not_found")
    assert "did you mean 'pay'" in body["message"]
    error(http.post("/runs/no-such-run/steps/pay/approve", json={}), 404, "not_found")
    error(http.get("/nope"), 404, "not_found")
    error(http.delete("/runs"), 405, "method_not_allowed")


def test_an_oversized_body(http: httpx.Client) -> None:
    big = {"chain": "payout", "context": {"blob": "x" * (1 << 20)}}
    body = error(http.post("/runs", json=big), 413, "body_too_large")
    assert "--max-body" in body["fix"]

    def chunks() -> Any:  # no Content-Length: counted as it arrives
        yield b'{"chain": "payout", "context": {"blob": "'
        for _ in range(1100):
            yield b"x" * 1024
        yield b'"}}'

    error(http.post("/runs", content=chunks(), headers={"Content-Type": "application/json"}),
          413, "body_too_large")


def test_invalid_args_of_an_approval_and_an_invalid_resolution(http: httpx.Client,
                                                              api: Client) -> None:
    run_id = suspended_run(api)
    body = error(http.post(f"/runs/{run_id}/steps/pay/approve",
                           json={"args": {"to": "x", "amount": "lots"}}), 422,
                 "invalid_decision")
    assert body["field"] == "args" and "amount" in body["message"]
    assert api.get(run_id)["status"] == "suspended"  # nothing changed
    body = error(http.post(f"/runs/{run_id}/steps/pay/resolve", json={"retry": True,
                                                                     "fail": True}),
                 400, "bad_request")
    body = error(http.post(f"/runs/{run_id}/steps/pay/resolve", json={"retry": True}),
                 409, "not_waiting")
    assert "waiting_confirmation" in body["message"] and body["decided"] is None
    error(http.post(f"/runs/{run_id}/steps/pay/reject", json={}), 400, "bad_request")


def test_an_inline_chain_is_validated_and_limited_to_the_served_tools(
        http: httpx.Client) -> None:
    chain = {"name": "evil", "steps": [
        {"id": "a", "tool": "os.system", "args": {"cmd": "rm -rf /"}},
        {"id": "b", "tool": "add", "args": {"a": "{{ steps.zz.output }}", "b": 1}}]}
    body = error(http.post("/runs", json={"chain": chain}), 422, "invalid_chain")
    codes = {p["code"] for p in body["problems"]}
    assert {"unknown_tool", "unknown_reference"} <= codes, body
    assert any(p["step_id"] == "a" for p in body["problems"])
    body = error(http.post("/runs", json={"chain": "payout"}), 422, "invalid_chain")
    assert any("base" in p["message"] for p in body["problems"])  # context keys missing
    body = error(http.post("/runs", json={"chain": "payout", "context": {"base": 1, "to": "x"},
                                          "options": {"max_concurrency": 0}}),
                 422, "invalid_chain")
    assert body["problems"][0]["field"] == "options.max_concurrency"


def test_bad_query_parameters(http: httpx.Client, api: Client) -> None:
    run_id = suspended_run(api)
    error(http.get("/runs", params={"limit": "many"}), 400, "bad_request")
    error(http.get("/runs", params={"limit": 0}), 400, "bad_request")
    error(http.get("/runs", params={"status": "done"}), 400, "bad_request")
    error(http.get("/runs", params={"cursor": "garbage!"}), 400, "bad_request")
    error(http.get("/runs", params={"waiting": "perhaps"}), 400, "bad_request")
    error(http.get(f"/runs/{run_id}/state", params={"at": -1}), 400, "bad_request")
    error(http.get(f"/runs/{run_id}/state", params={"at": ""}), 400, "bad_request")
    error(http.get("/runs", params=[("limit", "5"), ("limit", "6")]), 400, "bad_request")
    # (past the last event: the run as it is now, and `at` says which event that is)
    now = http.get(f"/runs/{run_id}/state", params={"at": 10_000}).json()
    assert now["at"] == now["last_seq"] < 10_000
    error(http.get(f"/runs/{run_id}/wait", params={"timeout": "nan"}), 400, "bad_request")
    error(http.get(f"/runs/{run_id}/stream", params={"kinds": "step_sucess"}), 400,
          "bad_request")
    error(http.get(f"/runs/{run_id}/stream", headers={"Last-Event-ID": "x"}), 400,
          "bad_request")


def test_the_server_log_has_no_traceback_for_any_of_it(server: Server) -> None:
    assert "Traceback" not in server.log(), server.log()
    assert " 4" in server.log()  # (the access log shows the 4xx lines)
