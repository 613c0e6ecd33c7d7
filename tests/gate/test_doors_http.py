"""Hostile values through each door of a real ``chainlab serve`` (uvicorn in a subprocess):
request bodies, query values and the headers the API reads. Every answer is a success or a
4xx JSON error naming the problem, never a 500 (and no traceback in the server's log). The
values are sent as a hostile client sends them: JSON text with NaN literals, ``\\ud800``
escapes, 5,000-digit integers, 200,000-deep nesting (chainlab.testing.hostile.json_text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainlab.testing.hostile import hostile_json, hostile_text, json_text, text_refusal
from tests.gate.doors import Tally
from tests.http.server import Server, wait_for

EXAMPLES = 100
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])
OK = {200, 201}
CLIENT_ERRORS = {400, 404, 409, 413, 415, 422}


SERVE_ARGS: tuple[str, ...] = ()


def deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


#: query texts: hostile text, JSON of hostile values, digits a parser trips on
query_texts = st.one_of(
    hostile_text(max_size=20),
    hostile_json(max_leaves=6, large=False).map(json_text),
    st.sampled_from(["²", "1" * 5000, "-1", "0", "+3", " 7", "1e3", "0x10", "९",
                     deep_text(3000), "%00", "a" * 9000]),
)


def answered(response: httpx.Response, tally: Tally) -> None:
    """A success, or a 4xx JSON error that names the problem; never a 5xx."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code in OK:
        tally.taken()
        return
    assert response.status_code in CLIENT_ERRORS, response.status_code
    body = response.json()
    assert body["error"] and body["message"], body
    tally.refused()


def encoded(text: str) -> str:
    """``text`` percent-encoded as UTF-8 (a surrogate as the bytes Python would write)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def test_body_door(http: httpx.Client) -> None:
    tally = Tally("HTTP bodies (POST /runs context)")

    @SETTINGS
    @given(hostile_json(large=False))  # (megabytes are the body limit's: 413)
    def one(value: Any) -> None:
        body = '{"chain": {"name": "door", "steps": [{"id": "s", "tool": "tick", ' \
               '"args": {"n": 1}}]}, "context": {"v": ' + json_text(value) + "}}"
        response = http.post("/runs", content=body.encode("utf-8", "surrogatepass"),
                             headers={"Content-Type": "application/json"})
        answered(response, tally)
        why = text_refusal(body)  # (the door takes the body as one value, as text)
        if response.status_code in OK:
            assert why is None, f"took a context it must refuse ({why})"
        else:
            assert why is not None, response.text[:300]

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_deep_bodies_are_a_400(http: httpx.Client) -> None:
    deep = '{"chain": "quick", "context": {"v": ' + deep_text(200_000) + "}}"
    response = http.post("/runs", content=deep, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "nested too deeply" in response.json()["message"]
    response = http.post("/chains/validate", params={"context": deep_text(3000)},
                         content="name: x\nsteps: []\n",
                         headers={"Content-Type": "application/yaml"})
    assert response.status_code == 400, response.text


@pytest.fixture(scope="module")
def waiting(http: httpx.Client) -> str:
    """A run whose pay step waits for approval (the approve door is probed with args that
    never fit, so it keeps waiting)."""
    run = http.post("/runs", json={"chain": "payout", "context": {"base": 1, "to": "x"}})
    run_id = run.json()["run_id"]
    wait_for(lambda: http.get(f"/runs/{run_id}").json()["status"] == "suspended",
             what="the payout run to wait for its approval")
    return str(run_id)


def test_approve_body_door(http: httpx.Client, waiting: str) -> None:
    tally = Tally("HTTP approve args")

    @SETTINGS
    @given(hostile_json(large=False))
    def one(value: Any) -> None:
        body = '{"args": {"to": ' + json_text(value) + ', "amount": "not a number"}}'
        response = http.post(f"/runs/{waiting}/steps/pay/approve",
                             content=body.encode("utf-8", "surrogatepass"),
                             headers={"Content-Type": "application/json"})
        assert response.status_code in (400, 422), (response.status_code, response.text)
        assert response.json()["message"]
        why = text_refusal(body)
        assert (response.status_code == 400) == (why is not None), response.text[:300]
        if response.status_code == 400:
            tally.refused()
        else:
            tally.taken()  # (past the gate; the tool refused the args: 422)

    one()
    tally.check(minimum=EXAMPLES // 2)
    assert http.get(f"/runs/{waiting}").json()["status"] == "suspended"


@pytest.fixture(scope="module")
def ended(http: httpx.Client) -> str:
    run = http.post("/runs/wait", json={"chain": "quick"})
    assert run.json()["status"] == "succeeded"
    return str(run.json()["run_id"])


QUERIES = [
    ("GET", "/runs", "cursor"), ("GET", "/runs", "status"), ("GET", "/runs", "chain"),
    ("GET", "/runs", "limit"), ("GET", "/runs", "waiting"),
    ("GET", "/runs/{run}/events", "after"), ("GET", "/runs/{run}/events", "limit"),
    ("GET", "/runs/{run}/state", "at"), ("GET", "/runs/{run}/wait", "timeout"),
    ("GET", "/runs/{run}/stream", "after"), ("GET", "/runs/{run}/stream", "kinds"),
    ("GET", "/runs/{run}/confirmations", "kind"), ("POST", "/chains/validate", "context"),
]


def test_query_door(http: httpx.Client, ended: str) -> None:
    tally = Tally("HTTP query values")

    @SETTINGS
    @given(st.sampled_from(QUERIES), query_texts)
    def one(where: tuple[str, str, str], text: str) -> None:
        method, path, name = where
        url = path.format(run=ended) + f"?{name}={encoded(text)}"
        if name == "timeout":
            url += "&"  # (a huge timeout is refused; a good one answers at once: it ended)
        response = http.request(method, url, content=b"name: x\nsteps: []\n"
                                if method == "POST" else None,
                                headers={"Content-Type": "application/yaml"})
        answered(response, tally)

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_header_door(http: httpx.Client, ended: str) -> None:
    tally = Tally("HTTP headers (Last-Event-ID, Idempotency-Key)")

    @SETTINGS
    @given(st.sampled_from(["Last-Event-ID", "Idempotency-Key"]), query_texts)
    def one(header: str, text: str) -> None:
        # (what HTTP/1.1 can carry in a header: no control bytes, no whitespace at the ends)
        raw = bytes(c for c in text.encode("utf-8", "surrogatepass")
                    if c >= 0x20 and c != 0x7F).strip(b" ")
        if header == "Last-Event-ID":
            response = http.get(f"/runs/{ended}/stream", headers={header: raw})
        else:
            response = http.post("/runs", json={"chain": "quick"}, headers={header: raw})
        answered(response, tally)

    one()
    tally.check(minimum=EXAMPLES // 2)


def test_the_reported_500s_are_4xx_now(http: httpx.Client, ended: str,
                                       waiting: str) -> None:
    """The issue's reproductions, each once, by name."""
    for header in ("²", "1" * 5000):
        got = http.get(f"/runs/{ended}/stream", headers={"Last-Event-ID": header.encode()})
        assert got.status_code == 400, got.text
        got = http.get(f"/runs/{ended}/stream?after={encoded(header)}")
        assert got.status_code == 400, got.text
    got = http.post("/runs", content=b'{"chain": "quick", "context": {"who": "\\ud800"}}',
                    headers={"Content-Type": "application/json"})
    assert got.status_code == 400 and got.json()["problems"][0]["field"] == "context.who"
    got = http.post(f"/runs/{waiting}/steps/pay/approve",
                    content=b'{"args": {"to": "a\\udfff", "amount": 1}}',
                    headers={"Content-Type": "application/json"})
    assert got.status_code == 400 and "args.to" in got.json()["message"], got.text
    cursor = json.dumps([1, "x"]).encode()
    import base64

    for bad in (deep_text(3000).encode(), b"[1e999, \"x\"]", b"[" + b"9" * 400 + b", 1]"):
        text = base64.urlsafe_b64encode(bad).decode()
        got = http.get(f"/runs?cursor={text}")
        assert got.status_code == 400, got.text
    assert http.get(f"/runs?cursor={base64.urlsafe_b64encode(cursor).decode()}"
                    ).status_code == 200


def test_server_log_has_no_traceback(served: Server, tmp_path: Path) -> None:
    assert "Traceback" not in served.log()
