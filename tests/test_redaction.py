"""Redaction (DESIGN §24, chainlab.redaction): the redactors, and ONE place on the write path
(``RunCore.emit``) that applies them to every event of every kind, while the tools see the
real values; a redactor that fails stores nothing and fails the step naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from chainlab import Chain, Toolbox
from chainlab.errors import RedactionError, ToolDefinitionError
from chainlab.events import EventKind, read_run
from chainlab.redaction import mask_keys, mask_pattern, redact_payload, redact_value
from chainlab.runtime import Runtime
from chainlab.store import MemoryStore
from chainlab.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
SECRET = "sk-live-4242424242"
MASK = mask_pattern(r"sk-live-\d+")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ---------------------------------------------------------------------------- redactors
def test_mask_pattern_masks_every_string_at_any_depth_and_keeps_keys() -> None:
    value = {"a": [f"x {SECRET} y", {SECRET: SECRET}], "n": 3}
    assert MASK(value) == {"a": ["x [redacted] y", {SECRET: "[redacted]"}], "n": 3}
    clean = {"a": ["nothing"], "n": 3}
    assert MASK(clean) is clean  # unchanged: the value itself (nothing marked)


def test_mask_keys_masks_the_values_under_the_keys() -> None:
    redact = mask_keys("card", mask="****")
    assert redact({"order": 1, "pay": {"card": "4111"}}) == {"order": 1, "pay": {"card": "****"}}


def test_redact_payload_marks_what_it_changed_and_skips_identities() -> None:
    payload = {"args": {"t": SECRET}, "tool": "sk-live-1", "idempotency_key": "k", "note": "ok"}
    out = redact_payload(payload, [MASK], "a")
    assert out == {"args": {"t": "[redacted]"}, "tool": "sk-live-1", "idempotency_key": "k",
                   "note": "ok", "redacted": ["args"]}
    assert payload["args"] == {"t": SECRET}  # the engine's own payload is untouched
    assert redact_payload({"note": "ok"}, [MASK]) is None


def test_a_redactor_that_raises_names_itself_never_the_value() -> None:
    def leaky(value: Any) -> Any:
        raise ValueError(f"cannot mask {value}")

    with pytest.raises(RedactionError) as err:
        redact_value({"t": SECRET}, leaky, field="args", step_id="a")
    assert err.value.redactor.endswith("leaky") and err.value.field == "args"
    assert "leaky" in str(err.value) and "ValueError" in str(err.value)
    assert SECRET not in str(err.value)


def test_a_redactor_that_returns_no_json_is_refused() -> None:
    with pytest.raises(RedactionError, match=r"returned a set .*return JSON data"):
        redact_value("x", lambda v: {v}, field="output")


def test_a_toolbox_redact_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="redact must be a function"):
        Toolbox("t", redact="mask")  # type: ignore[arg-type]


async def test_a_runtime_without_its_own_redactor_takes_its_toolbox_s() -> None:
    tb = Toolbox("t", redact=MASK)
    tb.tool(name="lookup")(lambda user: {"token": SECRET})
    store = MemoryStore()
    async with Runtime(tb, store) as rt:
        run = await rt.start(Chain.from_dict({"name": "p", "steps": [
            {"id": "look", "tool": "lookup", "args": {"user": "ann"}}]}))
        await run.wait()
    assert SECRET not in json.dumps([ev.payload for ev in store.load_events(run.run_id)])


def test_a_tool_redact_that_is_not_callable_is_refused() -> None:
    tb = Toolbox("t")
    with pytest.raises(ToolDefinitionError, match="redact must be a function"):
        tb.tool(redact="card", name="card")(lambda card: card)


# ---------------------------------------------------------------------------- the write path
def _toolbox(seen: list[Any]) -> Toolbox:
    tb = Toolbox("redact")

    @tb.tool
    def lookup(user: str) -> dict[str, Any]:
        return {"user": user, "token": SECRET}

    @tb.tool(side_effects=True, requires_confirmation=True,
             preview=lambda args: f"pay with {args['token']}")
    def pay(token: str, amount: int) -> dict[str, Any]:
        seen.append(token)  # the tool sees the real value
        return {"paid": amount, "receipt": f"paid with {token}"}

    @tb.tool(redact=mask_keys("pin"))
    def card(last4: str) -> dict[str, Any]:
        seen.append("9876")
        return {"pin": "9876", "ok": True}  # (a value the tool makes: never in the plan)

    @tb.tool
    def card2(token: str) -> str:
        seen.append(token)
        return "ok"

    @tb.tool
    def explode(token: str) -> None:
        raise ValueError(f"the server refused {token}")

    return tb


def _chain() -> Chain:
    return Chain.from_dict({"name": "r", "options": {"on_failure": "continue"}, "steps": [
        {"id": "look", "tool": "lookup", "args": {"user": "{{ context.user }}"}},
        {"id": "pay", "tool": "pay", "args": {"token": "{{ steps.look.output.token }}",
                                              "amount": 5}},
        {"id": "card", "tool": "card", "args": {"last4": "1111"}},
        {"id": "boom", "tool": "explode", "args": {"token": "{{ steps.look.output.token }}"}},
    ]})


async def test_every_event_leaves_redacted_while_the_tools_see_real_values(
        tmp_path: Path) -> None:
    seen: list[Any] = []
    store = SQLiteStore(tmp_path / "r.db")
    async with Runtime(_toolbox(seen), store, redact=MASK) as rt:
        run = await rt.start(_chain(), {"user": f"ann {SECRET}"})
        heard: list[Any] = []
        run.subscribe(heard.append)
        await run.wait()
        assert run.waiting() == {"pay": "waiting_confirmation"}
        assert run.state.steps["pay"].args == {"token": "[redacted]", "amount": 5}
        await run.approve("pay")  # bound to the REAL args (the engine's), not the mask
        result = await run.wait()
    assert str(result.status) == "failed"  # (boom fails: its error is redacted too)
    assert sorted(seen) == ["9876", SECRET]  # both tools got the real values
    assert heard and all(SECRET not in json.dumps(ev.payload) for ev in heard)
    record, events, state = read_run(store, run.run_id)
    text = json.dumps([ev.payload for ev in events]) + json.dumps(record.context)
    assert SECRET not in text and "9876" not in text
    assert record.context == {"user": "ann [redacted]"}
    outputs = {ev.step_id: ev.payload for ev in events if ev.kind == EventKind.STEP_SUCCEEDED}
    assert outputs["look"]["output"] == {"user": "ann [redacted]", "token": "[redacted]"}
    assert outputs["look"]["redacted"] == ["output"]
    assert outputs["pay"]["output"]["receipt"] == "paid with [redacted]"
    assert outputs["card"]["output"] == {"pin": "[redacted]", "ok": True}  # its own redactor
    failed = next(ev for ev in events if ev.kind == EventKind.STEP_FAILED)
    assert failed.payload["error"].endswith("the server refused [redacted]")
    waiting = next(ev for ev in events if ev.kind == EventKind.STEP_WAITING_CONFIRMATION)
    assert waiting.payload["preview"] == "pay with [redacted]"
    assert set(waiting.payload["redacted"]) == {"args", "preview"}
    assert state.redacted["look"] == {"args", "output"}  # the fold knows what is a mask
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in raw and b"9876" not in raw  # not even in the WAL


async def test_without_a_redactor_nothing_changes_and_nothing_is_marked() -> None:
    tb = Toolbox("plain")
    tb.tool(name="lookup")(lambda user: {"user": user, "token": SECRET})
    store = MemoryStore()
    async with Runtime(tb, store) as rt:
        run = await rt.start(Chain.from_dict({"name": "p", "steps": [
            {"id": "look", "tool": "lookup", "args": {"user": "ann"}}]}))
        await run.wait()
        assert run._kernel is not None and run._kernel.shown is None  # no second fold
    events = store.load_events(run.run_id)
    assert all("redacted" not in ev.payload for ev in events)
    assert events[-2].payload["output"]["token"] == SECRET


@pytest.mark.parametrize("kind", ["raises", "not_json"])
async def test_a_failing_redactor_stores_nothing_and_fails_the_step_naming_it(
        kind: str) -> None:
    def bad(value: Any) -> Any:
        if SECRET in json.dumps(value):
            if kind == "raises":
                raise RuntimeError(f"no mask for {value}")
            return {1, 2}
        return value

    seen: list[Any] = []
    store = MemoryStore()
    async with Runtime(_toolbox(seen), store, redact=bad) as rt:
        run = await rt.start(Chain.from_dict({"name": "p", "steps": [
            {"id": "look", "tool": "lookup", "args": {"user": "ann"}},
            {"id": "after", "tool": "lookup", "args": {"user": "{{ steps.look.output.user }}"}},
        ]}))
        result = await run.wait()
    events = store.load_events(run.run_id)
    assert SECRET not in json.dumps([ev.payload for ev in events])
    assert str(result.status) == "failed"
    st = run.state.steps
    assert str(st["look"].status) == "failed" and str(st["after"].status) == "skipped"
    assert "bad" in (st["look"].error or "") and "the value was not stored" in st["look"].error
    failed = next(ev for ev in events if ev.kind == EventKind.STEP_FAILED)
    assert failed.payload["redactor"].endswith("bad")


# ---------------------------------------------------------------------------- a resumed run
async def _paused(run: Any) -> None:
    """Until the run stops at its breakpoint (wait() waits past a pause)."""
    with anyio.fail_after(10):
        while not run.paused:
            await anyio.sleep(0.01)


async def _stopped_before_use(tb: Toolbox, db: Path, chain: Chain,
                              context: dict[str, Any] | None) -> str:
    """A run of ``chain`` whose process ends before step ``use`` runs; its id."""
    async with Runtime(tb, SQLiteStore(db), redact=MASK) as rt:
        run = await rt.start(chain, context)
        run.set_breakpoints(["use"])
        await _paused(run)
        return run.run_id


async def _resumed(rt: Runtime, run_id: str) -> Any:
    """``run_id`` resumed in ``rt`` (a new process), continued and waited for."""
    run = await rt.resume(run_id)
    if run.paused:
        await run.unpause()
    await run.wait()
    return run


def _resume_chain(confirm: bool) -> Chain:
    return Chain.from_dict({"name": "resume", "steps": [
        {"id": "look", "tool": "lookup", "args": {"user": "ann"}},
        {"id": "use", "tool": "pay" if confirm else "card2",
         "args": {"token": "{{ steps.look.output.token }}", "amount": 5} if confirm
         else {"token": "{{ steps.look.output.token }}"}},
    ]})


async def test_a_resumed_run_waits_for_a_person_instead_of_running_with_a_mask(
        tmp_path: Path) -> None:
    """The process that recorded the secret is gone: its step waiting for approval has
    only masked args now; it waits again naming them, an approval without args does not
    run it, an approval with the real args does."""
    seen: list[Any] = []
    db = tmp_path / "r.db"
    async with Runtime(_toolbox(seen), SQLiteStore(db), redact=MASK) as rt:
        run = await rt.start(_resume_chain(confirm=True))
        await run.wait()
        assert run.waiting() == {"use": "waiting_confirmation"}
        run_id = run.run_id
    # a new process: the log holds the mask only
    async with Runtime(_toolbox(seen), SQLiteStore(db), redact=MASK) as rt:
        run = await rt.resume(run_id)
        await run.approve("use")  # what was approved before the restart, without args
        await run.wait()
        st = run.state.steps["use"]
        assert str(st.status) == "waiting_confirmation" and st.reason == "redacted"
        assert seen == []  # never called with the mask
        events = rt.store.load_events(run_id)
        asked = [ev for ev in events if ev.kind == EventKind.STEP_WAITING_CONFIRMATION][-1]
        assert asked.payload["masked"] == ["the args of step 'use'"]
        assert "the real ones did not survive the restart" in asked.payload["preview"]
        await run.approve("use", {"token": SECRET, "amount": 5})
        result = await run.wait()
    assert str(result.status) == "succeeded" and seen == [SECRET]
    assert SECRET not in json.dumps([ev.payload for ev in SQLiteStore(db).load_events(run_id)])


async def test_a_resumed_step_that_reads_a_masked_output_waits_naming_it(
        tmp_path: Path) -> None:
    seen: list[Any] = []
    tb = _toolbox(seen)

    db = tmp_path / "r.db"
    run_id = await _stopped_before_use(tb, db, _resume_chain(confirm=False), None)
    async with Runtime(tb, SQLiteStore(db), redact=MASK) as rt:
        run = await _resumed(rt, run_id)
        st = run.state.steps["use"]
        assert str(st.status) == "waiting_confirmation" and st.reason == "redacted", st
        events = rt.store.load_events(run_id)
        asked = [ev for ev in events if ev.kind == EventKind.STEP_WAITING_CONFIRMATION][-1]
        assert asked.payload["masked"] == ["the output of step 'look'"]
        assert seen == []
        await run.reject("use", "no key")
        await run.wait()
    assert seen == []


async def test_a_redacted_context_is_marked_and_a_resumed_step_reading_it_waits(
        tmp_path: Path) -> None:
    seen: list[Any] = []
    tb = _toolbox(seen)

    chain = Chain.from_dict({"name": "ctx", "steps": [
        {"id": "use", "tool": "card2", "args": {"token": "{{ context.token }}"}}]})
    db = tmp_path / "r.db"
    run_id = await _stopped_before_use(tb, db, chain, {"token": SECRET})
    assert seen == []
    async with Runtime(tb, SQLiteStore(db), redact=MASK) as rt:
        run = await _resumed(rt, run_id)
        st = run.state.steps["use"]
        assert st.reason == "redacted" and seen == []
        await run.approve("use", {"token": SECRET})
        assert str((await run.wait()).status) == "succeeded"
    assert seen == [SECRET]
