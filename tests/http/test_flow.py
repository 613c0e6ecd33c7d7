"""The main path over HTTP against a real server: start a run, stream it, approve over
HTTP, the SAME run goes on and succeeds; a stream cut mid-run and reopened with
Last-Event-ID (or by the Client on its own) gets every event exactly once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from chainlab.http import ApiError, Client
from tests.http.proxy import CuttableProxy
from tests.http.server import Server, effects, wait_for

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(240)]


def all_seqs(api: Client, run_id: str) -> list[int]:
    return [e["seq"] for e in api.events(run_id, limit=5000)["events"]]


def test_start_stream_approve_over_http_and_the_same_run_succeeds(
        api: Client, workdir: Path) -> None:
    run = api.start("payout", {"base": 40, "to": "bob"})
    run_id = run["run_id"]
    seen: list[int] = []
    kinds: list[str] = []
    end: dict[str, Any] = {}
    for ev in api.stream(run_id):
        if ev.event == "end":
            end = ev.data
            break
        assert ev.seq is not None and ev.data["seq"] == ev.seq and ev.data["kind"] == ev.event
        seen.append(ev.seq)
        kinds.append(ev.event)
        if ev.event == "step_waiting_confirmation":
            [waiting] = api.confirmations(run_id)
            assert waiting["step_id"] == "pay" and waiting["args"] == {"to": "bob", "amount": 42}
            assert waiting["preview"] == "pay 42 to bob"
            assert api.approve(run_id, "pay", by="alice", note="ok")["outcome"] == "applied"
    assert end["status"] == "succeeded"
    assert seen == all_seqs(api, run_id) == list(range(1, len(seen) + 1))
    assert kinds[0] == "run_started" and kinds[-1] == "run_succeeded"
    assert "step_approved" in kinds  # the same run went on: no second run_started
    assert kinds.count("run_started") == 1
    view = api.get(run_id)
    assert view["run_id"] == run_id and view["status"] == "succeeded"
    assert view["outputs"]["pay"] == {"paid": 42, "to": "bob"}
    approved = [e for e in api.events(run_id)["events"] if e["kind"] == "step_approved"]
    assert approved[0]["payload"]["by"] == "alice" and approved[0]["payload"]["note"] == "ok"
    assert [e["kind"] for e in effects(workdir) if e["run_id"] == run_id] == ["pay"]


def _raw_stream(server: Server, run_id: str, headers: dict[str, str], stop_at: str | None
                ) -> list[tuple[str, str | None]]:
    """(event, id) pairs read from one connection until ``stop_at`` (then the connection
    is dropped) or the end."""
    got: list[tuple[str, str | None]] = []
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(30, read=60),
                      headers={"Authorization": f"Bearer {server.token}", **headers}) as http, \
            connect_sse(http, "GET", f"/runs/{run_id}/stream") as source:
        assert source.response.status_code == 200
        for sse in source.iter_sse():
            if not sse.data:
                continue  # a keep-alive comment: httpx-sse hands it out with the last id
            # (an SSE client keeps the last id for events without one: end and metadata
            # carry none of their own)
            own_id = sse.id if sse.event not in ("metadata", "end") else None
            got.append((sse.event, own_id or None))
            if sse.event in ("end", stop_at):
                break
    return got


def test_a_stream_cut_mid_run_and_reopened_with_last_event_id_gets_every_event_once(
        server: Server, api: Client, workdir: Path) -> None:
    flag = workdir / "cut.flag"
    flag.write_text("1")
    run_id = api.start("crash", {"flag": str(flag)})["run_id"]
    first = _raw_stream(server, run_id, {}, stop_at="step_started")
    assert first[0] == ("metadata", None)
    ids = [int(i) for e, i in first if i is not None]
    # the run goes on while nobody listens
    wait_for(lambda: (workdir / "cut.flag.holding").exists(), what="the hold step to start")
    flag.unlink()
    assert api.wait(run_id, timeout=60)["status"] == "succeeded"
    rest = _raw_stream(server, run_id, {"Last-Event-ID": str(ids[-1])}, stop_at=None)
    assert rest[0][0] == "metadata" and rest[-1] == ("end", None)
    ids += [int(i) for e, i in rest if i is not None]
    assert ids == all_seqs(api, run_id)  # nothing lost, nothing twice, in order
    # ?after= is the same as the header, for clients that cannot set headers
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer {server.token}"}) as http, \
            connect_sse(http, "GET", f"/runs/{run_id}/stream",
                        params={"after": ids[-3]}) as source:
        tail = [int(s.id) for s in source.iter_sse() if s.event != "end" and s.id and s.data]
    assert tail == ids[-2:]


def test_the_client_reconnects_from_the_last_seq_by_itself(server: Server, api: Client,
                                                           workdir: Path) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    proxy = CuttableProxy(host, int(port))
    flag = workdir / "reconnect.flag"
    flag.write_text("1")
    try:
        with Client(proxy.url, token=server.token) as through:
            run_id = through.start("crash", {"flag": str(flag)})["run_id"]
            got: list[int] = []
            end: dict[str, Any] = {}
            for ev in through.stream(run_id, backoff_s=0.1):
                if ev.event == "end":
                    end = ev.data
                    break
                assert ev.seq is not None
                got.append(ev.seq)
                if ev.event == "step_started" and ev.data["step_id"] == "wait":
                    def release() -> None:
                        wait_for(lambda: (workdir / "reconnect.flag.holding").exists())
                        proxy.cut()  # the stream drops mid-run...
                        flag.unlink()  # ...and the run goes on meanwhile
                    threading.Thread(target=release, daemon=True).start()
        assert end["status"] == "succeeded"
        assert proxy.cuts == 1 and proxy.connections >= 2  # the stream was opened again
        assert got == all_seqs(api, run_id)
    finally:
        proxy.close()
        flag.unlink(missing_ok=True)


def test_the_stream_starts_with_metadata_keeps_alive_filters_kinds_and_ends(
        server: Server, api: Client, workdir: Path) -> None:
    flag = workdir / "meta.flag"
    flag.write_text("1")
    run_id = api.start("crash", {"flag": str(flag)})["run_id"]
    lines: list[str] = []
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(30, read=60),
                      headers={"Authorization": f"Bearer {server.token}"}) as http, \
            http.stream("GET", f"/runs/{run_id}/stream",
                        params={"kinds": "step_succeeded,run_succeeded"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith(": ping") and flag.exists():
                flag.unlink()  # the keep-alive came while the run waited: let it go on
            if line == "event: end":
                break
    text = "\n".join(lines)
    assert lines[0] == "event: metadata" or lines[0].startswith("event: metadata")
    assert "retry: 3000" in text
    assert ": ping" in text  # keep-alive comment (every 0.5 s in these tests, 15 s by default)
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[0] == "metadata" and events[-1] == "end"
    assert set(events[1:-1]) == {"step_succeeded", "run_succeeded"}
    assert events[1:-1].count("step_succeeded") == 3


def test_a_budget_stop_is_decided_over_http_with_a_raised_budget(api: Client) -> None:
    # a budget of a microsecond: the first step would cross it, so the run stops for a person
    run = api.start("payout", {"base": 1, "to": "carol"},
                    options={"budget": {"max_duration_s": 0.000001}}, wait=True)
    assert run["status"] == "suspended"
    [waiting] = run["waiting"]
    assert waiting["step_id"] == "amount" and waiting["kind"] == "confirm"
    assert waiting["preview"].startswith("budget exceeded: time: ")
    done = api.approve(run["run_id"], "amount", budget={"max_duration_s": 3600})
    assert done["outcome"] == "applied"
    view = wait_for(lambda: (v := api.get(run["run_id"]))["waiting"] and
                    v["waiting"][0]["step_id"] == "pay" and v)
    assert view["steps"]["amount"]["status"] == "succeeded"
    approved = [e for e in api.events(run["run_id"])["events"] if e["kind"] == "step_approved"]
    assert approved[0]["payload"]["budget"] == {"max_duration_s": 3600.0}


PAYOUTS = {"name": "payouts", "steps": [
    {"id": "pay", "tool": "pay", "for_each": "{{ context.to }}",
     "args": {"to": "{{ item }}", "amount": "{{ index }}"}}]}


def test_approve_all_instances_of_a_for_each_step_over_http(api: Client,
                                                            workdir: Path) -> None:
    """``POST /runs/{id}/steps/{step}/approve-all`` approves every waiting instance, each
    recorded as its own approval with its own args; each pays exactly once; a second call
    finds nothing waiting (409)."""
    run_id = api.start(PAYOUTS, {"to": ["ann", "bo", "cy"]}, wait=True)["run_id"]
    waiting = api.confirmations(run_id)
    assert sorted((w["step_id"], w["args"]["to"]) for w in waiting) == [
        ("pay[0]", "ann"), ("pay[1]", "bo"), ("pay[2]", "cy")]
    assert api.approve_all(run_id, "pay", note="all three", by="alice") == [
        "pay[0]", "pay[1]", "pay[2]"]
    wait_for(lambda: api.get(run_id)["status"] == "succeeded", what="the run's end")
    view = api.get(run_id)
    assert view["outputs"]["pay"] == [{"paid": 0, "to": "ann"}, {"paid": 1, "to": "bo"},
                                      {"paid": 2, "to": "cy"}]
    approved = [e for e in api.events(run_id)["events"] if e["kind"] == "step_approved"]
    assert sorted(e["step_id"] for e in approved) == ["pay[0]", "pay[1]", "pay[2]"]
    assert {(e["payload"]["by"], e["payload"]["note"]) for e in approved} == {
        ("alice", "all three")}
    paid = sorted((e["to"], e["amount"]) for e in effects(workdir)
                  if e["run_id"] == run_id and e["kind"] == "pay")
    assert paid == [("ann", 0), ("bo", 1), ("cy", 2)]
    with pytest.raises(ApiError) as refused:
        api.approve_all(run_id, "pay")
    assert refused.value.status == 409 and "nothing waits" in str(refused.value)
