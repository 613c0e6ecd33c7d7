"""Tools from the test MCP server as a real stdio subprocess (issue 28, item 6): a chain
mixing Python and MCP tools validates, draws and runs; the hints become retry, in_doubt and
confirmation; the server killed mid-call; bad startups; name shadowing; fingerprints."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import MCPServerError, PlanError, ToolDefinitionError
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.tools import SchemaTool
from tests.mcp.conftest import SERVER, CallLog

pytestmark = [pytest.mark.xdist_group("mcp"), pytest.mark.timeout(240)]
anyio_test = pytest.mark.anyio


def desk(call_log: CallLog, **options: Any) -> Toolbox:
    toolbox = Toolbox("mixed")

    @toolbox.tool
    def shorten(text: str, limit: int = 12) -> str:
        return text[:limit]

    toolbox.add_mcp(SERVER, env=call_log.env, **options)
    return toolbox


def chain(*steps: dict[str, Any], name: str = "t") -> Chain:
    return Chain.from_dict({"name": name, "steps": list(steps)})


async def run_chain(toolbox: Toolbox, c: Chain) -> tuple[Any, Any, Runtime]:
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(c, {})
    with anyio.fail_after(120):
        result = await run.wait()
    return run, result, runtime


# ------------------------------------------------------------------ mapping
@anyio_test
async def test_hints_map_onto_the_side_effect_contract(call_log: CallLog) -> None:
    toolbox = desk(call_log)
    got = {t.name: (t.side_effects, t.idempotent, t.requires_confirmation)
           for t in toolbox if isinstance(t, SchemaTool)}
    assert got == {
        "lookup": (False, True, False),         # readOnly
        "search": (False, True, False),         # readOnly, openWorld
        "create_ticket": (True, False, True),   # no annotations
        "add_comment": (True, False, False),    # destructive: false
        "set_status": (True, True, False),      # destructive: false, idempotent
        "delete_ticket": (True, True, True),    # destructive, idempotent
        "slow": (False, True, False),
        "slow_write": (True, False, False),
        "fail": (False, True, False),
        "crash": (True, False, False),
        "shout": (False, True, False),
        "wrong_shape": (False, True, False),
    }
    lookup = toolbox.get("lookup")
    assert lookup.origin == "MCP: chainlab-desk"
    assert lookup.hints == {"readOnlyHint": True}
    assert lookup.input_schema()["required"] == ["key"]
    assert lookup.output_schema()["required"] == ["key", "value"]
    assert toolbox.get("search").output_schema() is None
    assert toolbox.describe()[1]["origin"] == "MCP: chainlab-desk"
    await toolbox.aclose()


@anyio_test
async def test_overrides_confirm_prefix_include_and_exclude(call_log: CallLog) -> None:
    toolbox = Toolbox("o")
    tools = toolbox.add_mcp(SERVER, env=call_log.env, prefix="desk",
                            include=["lookup", "create_ticket", "add_comment"],
                            exclude=["add_comment"], confirm={"create_ticket": False},
                            overrides={"lookup": {"timeout_s": 3.0, "serial_key": "k:{key}"}})
    assert [t.name for t in tools] == ["desk__lookup", "desk__create_ticket"]
    assert toolbox.names() == ["desk__lookup", "desk__create_ticket"]
    assert toolbox.get("desk__create_ticket").requires_confirmation is False
    assert toolbox.get("desk__lookup").timeout_s == 3.0
    assert toolbox.get("desk__lookup").resolve_serial_key({"key": "a"}) == "k:a"
    with pytest.raises(MCPServerError, match="has no tool named 'nope'"):
        toolbox.add_mcp(SERVER, env=call_log.env, prefix="again", include=["nope"])
    assert toolbox.names() == ["desk__lookup", "desk__create_ticket"]
    await toolbox.aclose()


@anyio_test
async def test_a_server_cannot_shadow_a_tool_without_a_prefix(call_log: CallLog) -> None:
    toolbox = Toolbox("s")

    @toolbox.tool
    def lookup(key: str) -> str:
        return "python"

    with pytest.raises(ToolDefinitionError, match=r"would shadow the tool 'lookup'.*prefix="):
        toolbox.add_mcp(SERVER, env=call_log.env)
    assert toolbox.names() == ["lookup"]  # nothing of the server was registered
    assert toolbox.get("lookup").fn(key="x") == "python"
    toolbox.add_mcp(SERVER, env=call_log.env, prefix="mcp")
    assert {"lookup", "mcp__lookup"} <= set(toolbox.names())
    await toolbox.aclose()


# ------------------------------------------------------------------ a mixed chain
@anyio_test
async def test_a_chain_mixing_python_and_mcp_tools_validates_draws_and_runs(
        call_log: CallLog) -> None:
    from chainlab.render.dot import chain_dot

    toolbox = desk(call_log)
    c = chain(
        {"id": "look", "tool": "lookup", "args": {"key": "mcp"}},
        {"id": "short", "tool": "shorten", "args": {"text": "{{ steps.look.output.value }}"}},
        {"id": "find", "tool": "search", "args": {"query": "python"}},
        {"id": "open", "tool": "create_ticket",
         "args": {"title": "{{ steps.short.output }}", "priority": "high"}},
        {"id": "note", "tool": "add_comment",
         "args": {"ticket_id": "{{ steps.open.output.id }}", "text": "{{ steps.find.output }}"}},
    )
    c.validate(toolbox)
    dot = chain_dot(c, toolbox)
    assert "create_ticket" in dot and "lookup" in dot
    run, result, runtime = await run_chain(toolbox, c)
    assert result.waiting == {"open": "waiting_confirmation"}  # no annotations: confirm
    assert call_log.starts() == {"lookup": 1, "search": 1}
    await run.approve("open")
    with anyio.fail_after(60):
        result = await run.wait()
    assert result.ok, result.errors
    assert result.outputs["look"] == {"key": "mcp", "value": "the Model Context Protocol"}
    assert result.outputs["find"] == "python"  # no output schema: the text content
    assert result.outputs["open"] == {"id": 1, "title": "the Model Co", "priority": "high",
                                      "status": "open"}
    assert result.outputs["note"] == {"result": "comment added to #1"}
    assert call_log.starts() == {"lookup": 1, "search": 1, "create_ticket": 1,
                                 "add_comment": 1}
    codes = {a.step_id: a.code for a in run.state.attempts}
    assert codes["look"] == toolbox.get("lookup").fingerprint
    await runtime.aclose()


@anyio_test
async def test_bad_args_are_caught_before_any_call(call_log: CallLog) -> None:
    toolbox = desk(call_log)
    bad = chain(
        {"id": "look", "tool": "lookup", "args": {"key": 3, "kee": "x"}},
        {"id": "open", "tool": "create_ticket", "args": {"priority": "urgent"}},
    )
    with pytest.raises(PlanError) as info:
        bad.validate(toolbox)
    assert sorted((p.code, p.step_id, p.field) for p in info.value.problems) == [
        ("invalid_args", "look", "args.kee"),
        ("invalid_args", "look", "args.key"),
        ("invalid_args", "open", "args.priority"),
        ("invalid_args", "open", "args.title"),
    ]
    # args that only a template gives are checked at call time: invalid_input, no call
    c = chain({"id": "a", "tool": "shorten", "args": {"text": "x"}},
              {"id": "look", "tool": "set_status",
               "args": {"ticket_id": 1, "status": "{{ steps.a.output }}"}})
    run, _result, runtime = await run_chain(toolbox, c)
    assert run.state.steps["look"].status == "failed"
    [attempt] = [a for a in run.state.attempts if a.step_id == "look"]
    assert attempt.error_kind == "invalid_input"
    assert "status" in (attempt.error or "")
    assert call_log.starts() == {}  # the server was never called
    await runtime.aclose()


@anyio_test
async def test_an_is_error_result_is_a_tool_error_retried_on_a_read_only_tool(
        call_log: CallLog) -> None:
    toolbox = desk(call_log)
    c = chain({"id": "f", "tool": "fail", "args": {"message": "no such row"},
               "retry": {"max_attempts": 2, "delay_s": 0}})
    run, result, runtime = await run_chain(toolbox, c)
    assert result.status == "failed"
    attempts = [a for a in run.state.attempts if a.step_id == "f"]
    assert [a.error_kind for a in attempts] == ["execution_failed", "execution_failed"]
    assert "answered with an error" in (attempts[0].error or "")
    assert "no such row" in (attempts[0].error or "")
    assert call_log.starts() == {"fail": 2}
    await runtime.aclose()


@anyio_test
async def test_an_answer_that_does_not_fit_the_output_schema_fails_the_step(
        call_log: CallLog) -> None:
    toolbox = desk(call_log)
    [connection] = toolbox._owned
    run, result, runtime = await run_chain(toolbox, chain(
        {"id": "w", "tool": "wrong_shape", "args": {}, "retry": {"max_attempts": 1}}))
    assert result.status == "failed"
    [attempt] = run.state.attempts
    assert attempt.error_kind == "execution_failed"
    assert "cannot be used" in (attempt.error or "") and "'id' is a required" in attempt.error
    assert connection.opened == 1  # the server answered: its session is fine
    await runtime.aclose()


# ------------------------------------------------------------------ the server dies
@anyio_test
async def test_killed_mid_call_on_a_read_only_tool_it_is_restarted_and_retried(
        call_log: CallLog) -> None:
    toolbox = desk(call_log)
    c = chain({"id": "s", "tool": "slow", "args": {"seconds": 1.5},
               "retry": {"max_attempts": 3, "delay_s": 0.1}})
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(c, {})
    first = await anyio.to_thread.run_sync(call_log.kill_server_of, "slow")
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.ok, result.errors
    assert result.outputs["s"] == {"result": "slept 1.5 s"}
    attempts = [a for a in run.state.attempts if a.step_id == "s"]
    assert [a.error_kind for a in attempts] == ["transient", None]
    assert "after the request was sent" in (attempts[0].error or "")
    starts = [e["pid"] for e in call_log.entries() if e["phase"] == "start"]
    assert len(starts) == 2 and starts[0] == first and starts[1] != first  # a new process
    await runtime.aclose()


@anyio_test
async def test_killed_mid_call_on_a_non_idempotent_tool_it_is_in_doubt(
        call_log: CallLog) -> None:
    toolbox = desk(call_log)
    c = chain({"id": "w", "tool": "slow_write", "args": {"seconds": 1.5, "title": "x"},
               "retry": {"max_attempts": 3, "delay_s": 0}})
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(c, {})
    await anyio.to_thread.run_sync(call_log.kill_server_of, "slow_write")
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.waiting == {"w": "in_doubt"}
    assert call_log.starts() == {"slow_write": 1}  # never silently repeated
    await run.resolve("w", output={"result": "wrote x"}, note="checked by hand")
    with anyio.fail_after(60):
        assert (await run.wait()).ok
    assert call_log.starts() == {"slow_write": 1}
    await runtime.aclose()


@anyio_test
async def test_a_crash_leaves_its_call_in_doubt_and_the_next_call_restarts_the_server(
        call_log: CallLog) -> None:
    toolbox = desk(call_log)
    _, result, _runtime = await run_chain(toolbox, chain(
        {"id": "boom", "tool": "crash", "args": {}}))
    assert result.waiting == {"boom": "in_doubt"}  # crash is not idempotent
    await anyio.sleep(0.2)  # the session reads the dead server's end of output
    # add_comment is not idempotent either, yet it runs: the dead server was seen before
    # its request was sent, and restarted
    _run, result, runtime = await run_chain(toolbox, chain(
        {"id": "note", "tool": "add_comment", "args": {"ticket_id": 1, "text": "hi"}}))
    assert result.ok, result.errors
    pids = {e["tool"]: e["pid"] for e in call_log.entries()}
    assert pids["crash"] != pids["add_comment"]
    await runtime.aclose()


@anyio_test
async def test_timeout_cancels_the_call_on_the_server(call_log: CallLog) -> None:
    toolbox = desk(call_log)
    c = chain({"id": "s", "tool": "slow", "args": {"seconds": 30}, "timeout_s": 0.5,
               "retry": {"max_attempts": 1}})
    run, _result, runtime = await run_chain(toolbox, c)
    [attempt] = run.state.attempts
    assert attempt.error_kind == "timeout"
    # notifications/cancelled reached the server, which stopped the tool's body
    await anyio.to_thread.run_sync(call_log.wait_for, "slow", "cancelled")
    assert not [e for e in call_log.entries() if e["phase"] == "done"]
    await runtime.aclose()


@anyio_test
async def test_cancelling_the_run_cancels_the_call_on_the_server(call_log: CallLog) -> None:
    toolbox = desk(call_log)
    runtime = Runtime(toolbox, MemoryStore())
    run = await runtime.start(chain({"id": "s", "tool": "slow", "args": {"seconds": 30}}), {})
    await anyio.to_thread.run_sync(call_log.wait_for, "slow")
    await run.cancel()
    with anyio.fail_after(60):
        result = await run.wait()
    assert result.status == "cancelled"
    await anyio.to_thread.run_sync(call_log.wait_for, "slow", "cancelled")
    await runtime.aclose()


@anyio_test
async def test_the_session_is_shared_and_closed_with_the_runtime(call_log: CallLog) -> None:
    toolbox = desk(call_log)
    [connection] = toolbox._owned
    assert connection.opened == 1  # listing the tools opened it
    c = chain({"id": "a", "tool": "lookup", "args": {"key": "python"}},
              {"id": "b", "tool": "lookup", "args": {"key": "mcp"}})
    for _ in range(2):
        _, result, runtime = await run_chain(toolbox, c)
        assert result.ok
        assert connection.opened == 1  # both runs, one session
        assert len({e["pid"] for e in call_log.entries()}) == 1
    await runtime.aclose()  # closes the toolbox's sessions
    assert "closed" in repr(connection)
    _, result, runtime = await run_chain(toolbox, c)  # opens again on the next call
    assert result.ok and connection.opened == 2
    await runtime.aclose()


# ------------------------------------------------------------------ fingerprints
@anyio_test
async def test_the_fingerprint_follows_the_tool_and_the_server_version(
        call_log: CallLog) -> None:
    one, two = desk(call_log), desk(call_log)
    other = Toolbox("v2")
    other.add_mcp([*SERVER, "--version", "2.0.0"], env=call_log.env)
    assert one.get("lookup").fingerprint == two.get("lookup").fingerprint
    assert one.get("lookup").fingerprint != one.get("search").fingerprint
    assert one.get("lookup").fingerprint != other.get("lookup").fingerprint
    for toolbox in (one, two, other):
        await toolbox.aclose()


# ------------------------------------------------------------------ bad servers
@pytest.mark.parametrize("command,options,problem", [
    (["no-such-mcp-server-x"], {}, "cannot start 'no-such-mcp-server-x'"),
    ([sys.executable, "-c", "import sys; print('no config', file=sys.stderr); sys.exit(3)"],
     {}, "ended before the MCP handshake.*no config"),
    ([sys.executable, "-c", "print('hello, I am no MCP server', flush=True); "
                            "import time; time.sleep(60)"],
     {"init_timeout_s": 3}, "within 3 s; it printed what is not MCP: 'hello, I am no MCP"),
    ([sys.executable, "-c", "import time; time.sleep(60)"], {"init_timeout_s": 2},
     "did not answer the MCP handshake within 2 s"),
    ([*SERVER, "--bad-schema"], {}, r"its tool 'broken' cannot be used: .*invalid input "
                                    r"schema.*exclude=\['broken'\]"),
])
@anyio_test
async def test_a_bad_server_gives_one_clear_error_and_the_toolbox_still_works(
        command: list[str], options: dict[str, Any], problem: str, call_log: CallLog) -> None:
    toolbox = desk(call_log)
    before = toolbox.names()
    with pytest.raises(MCPServerError, match=problem) as info:
        toolbox.add_mcp(command, prefix="bad", **options)
    assert info.value.server == " ".join(command) or info.value.server.startswith(command[0])
    assert info.value.fix
    assert toolbox.names() == before
    _, result, runtime = await run_chain(toolbox, chain(
        {"id": "a", "tool": "shorten", "args": {"text": "still works"}},
        {"id": "b", "tool": "lookup", "args": {"key": "mcp"}}))
    assert result.ok
    await runtime.aclose()


@anyio_test
async def test_the_bad_schema_server_works_without_its_broken_tool(call_log: CallLog) -> None:
    toolbox = Toolbox("b")
    toolbox.add_mcp([*SERVER, "--bad-schema"], env=call_log.env, exclude=["broken"])
    assert "broken" not in toolbox and "lookup" in toolbox
    await toolbox.aclose()


# ------------------------------------------------------------------ crash and resume
@anyio_test
async def test_a_driver_crash_and_resume_with_mcp_steps_calls_nothing_twice(
        tmp_path: Path, call_log: CallLog, monkeypatch: pytest.MonkeyPatch) -> None:
    from chainlab.store.sqlite import SQLiteStore
    from chainlab.testing.driver import SubprocessDriver

    monkeypatch.setenv("CHAINLAB_MCP_LOG", str(call_log.path))
    c = chain(
        {"id": "look", "tool": "desk__lookup", "args": {"key": "mcp"}},
        {"id": "short", "tool": "shorten", "args": {"text": "{{ steps.look.output.value }}"}},
        {"id": "note", "tool": "desk__add_comment",
         "args": {"ticket_id": 1, "text": "{{ steps.short.output }}"}},
        {"id": "status", "tool": "desk__set_status", "args": {"ticket_id": 1, "status": "done"},
         "depends_on": ["note"]},
    )
    db = tmp_path / "crash.db"
    driver = SubprocessDriver(c, db=db, tools="tests.mcp.desk_tools:toolbox",
                              run_id="mcp-crash", kill_at="note", by="test",
                              env=call_log.env)
    assert driver.wait() == -9 and driver.killed, driver.output()
    assert call_log.starts() == {"lookup": 1, "add_comment": 1}
    from tests.mcp import desk_tools

    store = SQLiteStore(db)
    runtime = Runtime(desk_tools.toolbox, store)
    run = await driver.take_over(runtime)
    with anyio.fail_after(120):
        result = await run.wait()
    # the non-idempotent MCP call that was running when the driver died is not repeated
    assert result.waiting == {"note": "in_doubt"}
    assert call_log.starts() == {"lookup": 1, "add_comment": 1}
    await run.resolve("note", output={"result": "comment added to #1"}, by="test")
    with anyio.fail_after(120):
        result = await run.wait()
    assert result.ok, result.errors
    assert call_log.starts() == {"lookup": 1, "add_comment": 1, "set_status": 1}
    await runtime.aclose()
    store.close()


@anyio_test
async def test_a_fork_reuses_mcp_steps_and_reruns_those_whose_tool_changed(
        call_log: CallLog) -> None:
    store = MemoryStore()
    old = desk(call_log)
    c = chain({"id": "look", "tool": "lookup", "args": {"key": "mcp"}},
              {"id": "short", "tool": "shorten", "args": {"text": "{{ steps.look.output.value }}"}})
    runtime = Runtime(old, store)
    run = await runtime.start(c, {})
    with anyio.fail_after(60):
        assert (await run.wait()).ok
    same = await runtime.fork_plan(run.run_id)
    assert same.decisions == {"look": "reuse", "short": "reuse"}
    await runtime.aclose()
    await old.aclose()
    new = Toolbox("mixed")
    new.add(old.get("shorten"))
    new.add_mcp([*SERVER, "--version", "2.0.0"], env=call_log.env)  # the server was upgraded
    runtime = Runtime(new, store)
    plan = await runtime.fork_plan(run.run_id)
    assert plan.decisions["look"] == "rerun"
    assert plan.row("look").reason == (f"tool code changed ({old.get('lookup').fingerprint} -> "
                                       f"{new.get('lookup').fingerprint})")
    fork = await runtime.fork(run.run_id)
    with anyio.fail_after(60):
        assert (await fork.wait()).ok
    assert call_log.starts() == {"lookup": 2}
    await runtime.aclose()
    await new.aclose()


def test_a_label_names_the_server_in_errors() -> None:
    with pytest.raises(MCPServerError, match="MCP server 'notes': cannot start") as info:
        Toolbox("x").add_mcp(["no-such-mcp-server-y"], label="notes")
    assert info.value.server == "notes"
