"""The HTTP defects of issue 36, against a real ``chainlab serve``: the contract points where
the OpenAPI document and the server disagreed, a stream of a run rolled back after it
succeeded, and a client that opens a stream and never reads."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chainlab.http.stream import STREAM_PIECE
from tests.http.server import Server, wait_for

SERVE_ARGS = ("--stream-send-timeout", "3")


@pytest.fixture(scope="module")
def document(http: httpx.Client) -> dict[str, Any]:
    return http.get("/openapi.json").json()  # type: ignore[no-any-return]


def _waiting(http: httpx.Client) -> str:
    run = http.post("/runs", json={"chain": "payout", "context": {"base": 1, "to": "x"}})
    run_id = str(run.json()["run_id"])
    wait_for(lambda: http.get(f"/runs/{run_id}").json()["status"] == "suspended",
             what="the payout run to wait for its approval")
    return run_id


def test_405_says_which_methods_the_path_takes(http: httpx.Client) -> None:
    got = http.delete("/runs")
    assert got.status_code == 405 and got.json()["error"] == "method_not_allowed"
    assert got.headers["Allow"] == "GET, HEAD, POST"  # /runs: list (GET) and start (POST)
    got = http.get("/runs/x/cancel")
    assert got.status_code == 405 and got.headers["Allow"] == "POST"


def test_the_document_says_which_bodies_are_required(http: httpx.Client,
                                                     document: dict[str, Any]) -> None:
    paths = document["paths"]
    reject = paths["/runs/{run_id}/steps/{step_id}/reject"]["post"]
    assert reject["requestBody"]["required"] is True  # (it said optional)
    assert paths["/runs"]["post"]["requestBody"]["required"] is True
    assert paths["/runs/{run_id}/steps/{step_id}/approve"]["post"]["requestBody"][
        "required"] is False
    run_id = _waiting(http)
    got = http.post(f"/runs/{run_id}/steps/pay/reject")  # no body: 400, as documented
    assert got.status_code == 400 and "reason" in got.json()["message"]
    for path in ("/runs/{run_id}/resume", "/runs/{run_id}/rollback", "/runs/{run_id}/cancel"):
        assert {"400", "413", "415"} <= set(paths[path]["post"]["responses"]), path


def test_confirmations_kind_outside_its_enum_is_a_400(http: httpx.Client) -> None:
    run_id = _waiting(http)
    assert http.get(f"/runs/{run_id}/confirmations?kind=confirm").json()["waiting"]
    got = http.get(f"/runs/{run_id}/confirmations?kind=confrm")
    assert got.status_code == 400 and "did you mean 'confirm'" in got.json()["message"]


def test_resolve_on_a_step_not_in_doubt_is_409_before_its_output_is_checked(
        http: httpx.Client) -> None:
    run_id = _waiting(http)  # pay waits for a confirmation: it is not in doubt
    got = http.post(f"/runs/{run_id}/steps/pay/resolve", json={"output": "not a dict"})
    assert got.status_code == 409 and got.json()["error"] == "not_waiting", got.text


def test_the_stream_is_described_as_server_sent_events(document: dict[str, Any]) -> None:
    ok = document["paths"]["/runs/{run_id}/stream"]["get"]["responses"]["200"]
    assert ok["content"]["text/event-stream"]["schema"] == {
        "$ref": "#/components/schemas/EventStream"}
    stream = document["components"]["schemas"]["EventStream"]  # (one event of the stream)
    assert set(stream["properties"]) == {"event", "id", "retry", "data"}
    assert "`end`" in stream["description"] and "Last-Event-ID" in stream["description"]


def _frames(http: httpx.Client, run_id: str, after: int = 0) -> list[tuple[str, str]]:
    """(event, id) of every frame of a stream read to its end."""
    out: list[tuple[str, str]] = []
    event = seq = ""
    with http.stream("GET", f"/runs/{run_id}/stream?after={after}") as response:
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                seq = line[3:].strip()
            elif line == "" and event:
                out.append((event, seq))
                event = seq = ""
    return out


def test_a_rolled_back_run_streams_its_rollback_to_the_end(http: httpx.Client) -> None:
    run = http.post("/runs/wait", json={"chain": {"name": "booking", "steps": [
        {"id": "b", "tool": "book", "args": {"room": "r1"}}]}}).json()
    assert run["status"] == "succeeded"
    back = http.post(f"/runs/{run['run_id']}/rollback", json={})
    assert back.status_code == 200, back.text
    wait_for(lambda: http.get(f"/runs/{run['run_id']}").json()["status"] == "rolled_back",
             what="the rollback to end")
    kinds = [kind for kind, _ in _frames(http, run["run_id"])]
    assert kinds.index("run_succeeded") < kinds.index("compensation_succeeded") \
        < kinds.index("run_rolled_back"), kinds  # (it stopped at run_succeeded)
    assert kinds[-1] == "end"
    with http.stream("GET", f"/runs/{run['run_id']}/stream") as response:
        last = [line for line in response.iter_lines() if line.startswith("data:")][-1]
    assert '"status":"rolled_back"' in last  # (end named the first end)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _settled(pid: int) -> float:
    """The server's RSS once it stopped moving (it writes what the sockets take)."""
    last, still = _rss_mb(pid), 0
    for _ in range(200):
        time.sleep(0.1)
        now = _rss_mb(pid)
        still = still + 1 if abs(now - last) < 0.5 else 0
        last = now
        if still >= 10:
            break
    return last


def _silent_streams(served: Server, run_id: str, n: int) -> list[socket.socket]:
    """``n`` clients that ask for the stream and then never read a byte."""
    host, port = served.url.split("//")[1].rsplit(":", 1)
    socks = []
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(f"GET /runs/{run_id}/stream HTTP/1.1\r\nHost: x\r\nAuthorization: "
                     f"Bearer {served.token}\r\n\r\n".encode())
        socks.append(sock)
    return socks


def test_a_client_that_never_reads_costs_one_piece_not_the_log(
        http: httpx.Client, served: Server) -> None:
    steps = [{"id": f"s{i}", "tool": "record", "args": {"label": "{{ context.label }}"}}
             for i in range(120)]
    got = http.post("/runs/wait?timeout=240", json={"chain": {"name": "big", "steps": steps},
                                                    "context": {"label": "x" * 100_000}},
                    timeout=300)
    run = got.json()
    assert run.get("status") == "succeeded", got.text[:500]
    log_mb = sum(len(frame) for frame in _read_all(http, run["run_id"])) / 2**20
    assert log_mb > 20  # (each step's label is in its args and in its output)
    pid = served.proc.pid  # type: ignore[union-attr]
    closed = served.log().count("its stream is closed")
    sockets_before = _sockets(pid)
    before = _settled(pid)
    socks = _silent_streams(served, run["run_id"], 1)
    # the first stream of the run opens its feed: the log read once, kept as events and as
    # their frames for every stream of the run
    feed = _settled(pid) - before
    socks += _silent_streams(served, run["run_id"], 7)
    per_stream = (_settled(pid) - before - feed) / 7
    # each stream held its whole log and a fold of it before (8 streams of this run: +338
    # MB); now a stream holds a piece of STREAM_PIECE bytes
    assert feed < log_mb * 3, (feed, log_mb)
    assert per_stream < 2, (per_stream, feed, log_mb)
    # it is closed after --stream-send-timeout (3 s) without a byte taken: the client
    # then reads what the server had written, and the end of the connection
    wait_for(lambda: served.log().count("its stream is closed") >= closed + 8,
             what="the server to close the 8 silent streams")
    for sock in socks:
        got = _drain(sock)
        assert STREAM_PIECE <= got < log_mb * 2**20 / 2, got
    # and the server let go of them: their connections are closed on its side too (the
    # memory they held went with them; how much of it the allocator hands back to the
    # system is not a thing to assert)
    wait_for(lambda: _sockets(pid) <= sockets_before, what="the server to close them")


def _sockets(pid: int) -> int:
    """How many sockets the process has open."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            count += str(fd.readlink()).startswith("socket:")
    return count


def _read_all(http: httpx.Client, run_id: str) -> list[bytes]:
    with http.stream("GET", f"/runs/{run_id}/stream") as response:
        return list(response.iter_bytes())


def _drain(sock: socket.socket) -> int:
    """Read until the server closes the connection (60 s at most)."""
    sock.settimeout(60)
    total = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            total += len(chunk)
    sock.close()
    return total
