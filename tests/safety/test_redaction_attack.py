"""Attack on redaction (DESIGN §24): one secret goes everywhere a value can be -- a run's
context, a tool's args, its output, its error message, its confirmation preview, a model's
answer (its text and its tool call's arguments) and the next request that carries them --
and must appear NOWHERE outside the process: not in the store's files (WAL included), the
events subscribers hear, the export-test fixture and test file, the JSON view, ``chainlab
show`` (a real subprocess), nor the HTTP API's event stream and run view (real uvicorn),
while the tools and the model are handed the real value."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chainlab import Agent, Chain, Toolbox
from chainlab.redaction import mask_pattern
from chainlab.render.json import run_dict
from chainlab.runtime import Runtime
from chainlab.store.sqlite import SQLiteStore
from chainlab.testing.export import export_test
from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

pytestmark = pytest.mark.anyio
SECRET = "sk-live-7f3a9c2e11"
MASK = mask_pattern(r"sk-live-[0-9a-f]+")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _toolbox(server: FakeOpenAI, handed: list[Any]) -> Toolbox:
    tb = Toolbox("attack")

    @tb.tool
    def fetch_key(user: str) -> dict[str, Any]:
        """The user's API key."""
        handed.append(("fetch_key", user))
        return {"user": user, "key": SECRET}

    @tb.tool(side_effects=True, idempotent=True, requires_confirmation=True,
             preview=lambda args: f"store key {args['key']} for {args['user']}")
    def store_key(user: str, key: str) -> str:
        """Keep the key."""
        handed.append(("store_key", key))
        return f"stored {key}"

    @tb.tool
    def check(key: str) -> str:
        """Check a key (the server refuses it, quoting it)."""
        handed.append(("check", key))
        raise ValueError(f"key {key} is revoked")

    tb.add_agent(Agent("helper", "You help with keys.", tools=["check"], model="fake",
                       base_url=server.base_url, api_key="test"))
    return tb


def _chain() -> Chain:
    return Chain.from_dict({"name": "keys", "options": {"on_failure": "continue"}, "steps": [
        {"id": "fetch", "tool": "fetch_key", "args": {"user": "{{ context.user }}"}},
        {"id": "keep", "tool": "store_key",
         "args": {"user": "ann", "key": "{{ steps.fetch.output.key }}"}},
        {"id": "ask", "tool": "agent:helper", "depends_on": ["keep"],
         "args": {"request": "is my key {{ steps.fetch.output.key }} still good?"}},
    ]})


def _script(server: FakeOpenAI) -> None:
    server.add(tool_calls(Call("check", {"key": SECRET}), content=f"checking {SECRET}"),
               f"Your key {SECRET} is revoked.")


def _assert_nowhere(text: str, where: str) -> None:
    assert SECRET not in text, f"the secret leaked into {where}"


async def test_a_secret_appears_nowhere_outside_the_process(tmp_path: Path) -> None:
    handed: list[Any] = []
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    with FakeOpenAI() as server:
        _script(server)
        tb = _toolbox(server, handed)
        async with Runtime(tb, store, redact=MASK) as rt:
            run = await rt.start(_chain(), {"user": f"ann ({SECRET})"})
            heard: list[Any] = []
            run.subscribe(heard.append)
            await run.wait()
            assert run.waiting() == {"keep": "waiting_confirmation"}
            waiting = run_dict(run.record, run.state)["waiting"][0]
            assert "[redacted]" in waiting["preview"]  # what the approver is shown
            await run.approve("keep")
            result = await run.wait()
            view = json.dumps(run_dict(run.record, run.state))
        sent = json.dumps([r.messages for r in server.requests])
    assert str(result.status) == "succeeded", result
    # inside the process: the tools and the model had the real value
    assert ("store_key", SECRET) in handed and ("check", SECRET) in handed
    assert SECRET in sent  # the model was asked with it (it is the model's to read)
    # outside: nowhere
    _assert_nowhere(view, "the JSON view of the live run")
    _assert_nowhere(json.dumps([ev.payload for ev in heard]), "the events subscribers hear")
    store.close()
    for path in tmp_path.iterdir():
        _assert_nowhere(path.read_bytes().decode("latin-1"), f"the store file {path.name}")
    store = SQLiteStore(db)
    out = export_test(store, run.run_id, tmp_path / "export" / "test_keys.py",
                      tools="attack_tools:toolbox", toolbox=tb, live=[])
    for path in (out.test, out.fixture):
        _assert_nowhere(Path(path).read_text(), f"the export-test file {Path(path).name}")
    store.close()
    for args in (("show", run.run_id), ("show", run.run_id, "--json")):
        shown = subprocess.run([sys.executable, "-m", "chainlab.cli", *args, "--db", str(db)],
                               capture_output=True, text=True, cwd=tmp_path, timeout=120,
                               env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1",
                                    "PYTHONPATH": str(ROOT)})
        assert shown.returncode == 0, shown.stderr
        if "--json" in args:  # (the table shows statuses, the JSON the values)
            assert "[redacted]" in shown.stdout
        _assert_nowhere(shown.stdout + shown.stderr, f"chainlab {' '.join(args[::2])}")


# ---------------------------------------------------------------------------- over HTTP
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, FakeOpenAI, list[Any]]]:
    """The HTTP API (real uvicorn, in a thread of this process: the redactor is a Python
    function of the served Runtime) over a redacting runtime."""
    import uvicorn

    from chainlab.http import create_app

    handed: list[Any] = []
    with FakeOpenAI() as server:
        app = create_app(_toolbox(server, handed), token="t0ken", db=tmp_path / "h.db",
                         runtime_options={"redact": MASK})
        port = _free_port()
        uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not uv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert uv.started
        try:
            yield f"http://127.0.0.1:{port}", server, handed
        finally:
            uv.should_exit = True
            thread.join(30)


def test_the_http_stream_and_views_carry_no_secret(
        served: tuple[str, FakeOpenAI, list[Any]]) -> None:
    from chainlab.http import Client

    url, server, handed = served
    _script(server)
    with Client(url, token="t0ken") as api:
        run_id = api.start(_chain().to_dict(), {"user": f"ann ({SECRET})"})["run_id"]
        streamed: list[str] = []
        for ev in api.stream(run_id):
            streamed.append(json.dumps(ev.data))
            if ev.event == "step_waiting_confirmation":
                assert "[redacted]" in ev.data["payload"]["preview"]
                api.approve(run_id, "keep")
            if ev.event == "end":
                break
        seen = json.dumps(api.get(run_id)) + json.dumps(api.events(run_id)) \
            + json.dumps(api.confirmations(run_id))
    assert any("run_succeeded" in line for line in streamed)
    assert ("check", SECRET) in handed  # the tool had the real value
    _assert_nowhere("\n".join(streamed), "the SSE stream")
    _assert_nowhere(seen, "the HTTP run view, events and confirmations")
