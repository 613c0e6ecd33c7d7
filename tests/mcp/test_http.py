"""The test MCP server over streamable HTTP on a loopback port (a real subprocess): the same
mapping and run semantics as over stdio; a server killed mid-call; a server that went away
and came back is reconnected."""

from __future__ import annotations

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from tests.mcp.conftest import CallLog, HTTPServer

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("mcp"), pytest.mark.timeout(240)]


def toolbox_for(server: HTTPServer) -> Toolbox:
    toolbox = Toolbox("http")

    @toolbox.tool
    def shorten(text: str, limit: int = 12) -> str:
        return text[:limit]

    toolbox.add_mcp(url=server.url, prefix="desk")
    return toolbox


def one_step(step_id: str, tool: str, args: dict, **extra: object) -> Chain:
    return Chain.from_dict({"name": "h", "steps": [
        {"id": step_id, "tool": tool, "args": args, **extra}]})


async def test_a_mixed_chain_runs_over_http(http_server: HTTPServer, call_log: CallLog) -> None:
    toolbox = toolbox_for(http_server)
    assert toolbox.get("desk__lookup").origin == "MCP: chainlab-desk"
    assert toolbox.get("desk__create_ticket").requires_confirmation is True
    c = Chain.from_dict({"name": "h", "steps": [
        {"id": "look", "tool": "desk__lookup", "args": {"key": "chainlab"}},
        {"id": "short", "tool": "shorten", "args": {"text": "{{ steps.look.output.value }}"}},
        {"id": "open", "tool": "desk__create_ticket",
         "args": {"title": "{{ steps.short.output }}"}},
    ]})
    c.validate(toolbox)
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(c, {})
    with anyio.fail_after(60):
        assert (await run.wait()).waiting == {"open": "waiting_confirmation"}
    await run.approve("open")
    with anyio.fail_after(60):
        result = await run.wait()
    assert result.ok, result.errors
    assert result.outputs["open"]["title"] == "chains of to"
    assert call_log.starts() == {"lookup": 1, "create_ticket": 1}
    await runtime.aclose()


async def test_killed_mid_call_read_only_is_retried_once_the_server_is_back(
        http_server: HTTPServer, call_log: CallLog) -> None:
    toolbox = toolbox_for(http_server)
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(one_step("s", "desk__slow", {"seconds": 1.0},
                                       retry={"max_attempts": 20, "delay_s": 0.5}), {})
    await anyio.to_thread.run_sync(call_log.wait_for, "slow")
    http_server.kill()
    await anyio.to_thread.run_sync(http_server.start)  # the same port, a new process
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.ok, result.errors
    attempts = [a for a in run.state.attempts if a.step_id == "s"]
    assert attempts[0].error_kind == "transient"
    assert "after the request was sent" in (attempts[0].error or "")
    assert len({e["pid"] for e in call_log.entries() if e["tool"] == "slow"}) == 2
    await runtime.aclose()


async def test_killed_mid_call_non_idempotent_is_in_doubt(http_server: HTTPServer,
                                                        call_log: CallLog) -> None:
    toolbox = toolbox_for(http_server)
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(one_step("w", "desk__slow_write",
                                       {"seconds": 1.0, "title": "x"},
                                       retry={"max_attempts": 5, "delay_s": 0}), {})
    await anyio.to_thread.run_sync(call_log.kill_server_of, "slow_write")
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.waiting == {"w": "in_doubt"}
    assert call_log.starts() == {"slow_write": 1}
    await runtime.aclose()


async def test_a_server_that_went_away_is_reconnected_before_an_unsafe_call(
        http_server: HTTPServer, call_log: CallLog) -> None:
    toolbox = toolbox_for(http_server)
    http_server.kill()
    runtime = Runtime(toolbox, MemoryStore())
    # not idempotent: the server is down, so nothing is sent and the attempt is retried
    run = await runtime.start(one_step("c", "desk__add_comment", {"ticket_id": 1, "text": "x"},
                                       retry={"max_attempts": 40, "delay_s": 0.5}), {})
    with anyio.fail_after(30):
        while not [a for a in run.state.attempts if a.error_kind]:
            await anyio.sleep(0.05)
    first = run.state.attempts[0]
    assert first.error_kind == "transient" and "not available" in (first.error or "")
    await anyio.to_thread.run_sync(http_server.start)
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.ok, result.errors
    assert call_log.starts() == {"add_comment": 1}
    await runtime.aclose()
