"""``chainlab agent "REQUEST"`` (issue 37 item 6): an AD-HOC agent, made from the toolbox and
``--model`` / ``--base-url``, asked one request. The run keeps the agent's definition (never
the API key), so ``chainlab approve`` in another process finds the agent and finishes the
run without asking the model again for the turn already recorded. Real subprocesses, the
real ``openai`` client over HTTP to a scripted server (FakeOpenAI)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainlab.testing.openai_script import Call, Reply, tool_calls
from chainlab.testing.openai_server import FakeOpenAI

from .helpers import chainlab, env, write

SHOP = '''
from chainlab import Agent, Toolbox

toolbox = Toolbox("shop")

@toolbox.tool
def lookup(order: int) -> dict:
    """Find an order."""
    return {"order": order, "status": "damaged", "total": 40}

@toolbox.tool(side_effects=True, requires_confirmation=True,
              compensate=("unrefund", {"order": "{{ input.order }}"}))
def refund(order: int, amount: int) -> dict:
    """Refund part of an order."""
    with open("refunds.txt", "a") as f:
        f.write(f"{order}:{amount}\\n")
    return {"order": order, "refunded": amount}

@toolbox.tool(side_effects=True, idempotent=True)
def unrefund(order: int) -> None:
    """Take a refund back (refund's compensation: never offered to an ad-hoc agent)."""

toolbox.add_agent(Agent("support", "You help customers.", ["lookup"], model="m",
                        base_url="http://127.0.0.1:9/v1"))

empty = Toolbox("empty")
only_agents = Toolbox("only_agents")
only_agents.add(toolbox.get("lookup"))
only_agents.add_agent(Agent("helper", "You help.", ["lookup"], model="m",
                            base_url="http://127.0.0.1:9/v1"))
'''

SECRET = "sk-test-never-stored-3141592"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    write(tmp_path / "shop_tools.py", SHOP)
    return tmp_path


def _stored_text(db: str) -> str:
    """Everything the SQLite file holds, as text (what a secret must not be found in)."""
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(repr(row) for t in tables for row in con.execute(f"SELECT * FROM {t}"))
    finally:
        con.close()


def test_an_adhoc_agent_runs_a_lookup_and_a_refund_approved_in_another_process(
        shop: Path) -> None:
    db = str(shop / "runs.db")
    script = [tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7,
                                                                     "amount": 15})),
              "Refunded 15 on order 7."]
    with FakeOpenAI(script) as server:
        url = server.base_url
        r = chainlab("agent", "order 7 arrived broken, refund 15", "--tools",
                     "shop_tools:toolbox", "--model", "fake-model", "--base-url",
                     server.base_url, "--db", db, "--json", cwd=shop,
                     PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)
        assert r.code == 3, r.err  # suspended: the refund waits for a person
        view = r.json
        run_id = view["run_id"]
        assert view["chain"] == "agent-assistant"
        assert [w["step_id"] for w in view["waiting"]] == ["assistant/1.2"]
        assert view["steps"]["assistant"]["turns"][0]["calls"] == [
            {"step_id": "assistant/1.1", "tool": "lookup", "status": "succeeded"},
            {"step_id": "assistant/1.2", "tool": "refund", "status": "waiting_confirmation"}]
        first = server.completions[0]
        # every plain tool, not the registered agent, not refund's compensation
        offered = sorted(t["function"]["name"] for t in first.body["tools"])
        assert offered == ["lookup", "refund"]
        assert first.model == "fake-model"
        assert "Look things up before you act" in first.messages[0]["content"]
        assert first.headers["authorization"] == f"Bearer {SECRET}"  # from the environment
        assert not (shop / "refunds.txt").exists()
        # approved in ANOTHER process, which has no --tools, --model or --base-url: the run
        # keeps its toolbox and its agent
        r = chainlab("approve", run_id, "assistant/1.2", "--db", db, cwd=shop,
                     PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)
        assert r.code == 0, r.err
        # turn 1 was answered from the record: the model was asked once more, for turn 2
        assert len(server.completions) == 2
        assert server.completions[1].model == "fake-model"
    assert (shop / "refunds.txt").read_text() == "7:15\n"
    r = chainlab("show", run_id, "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop))
    assert r.json["status"] == "succeeded"
    assert r.json["outputs"]["assistant"] == "Refunded 15 on order 7."
    stored = _stored_text(db)
    assert SECRET not in stored
    meta = json.loads(sqlite3.connect(db).execute(
        "SELECT meta FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])
    assert meta["adhoc_agent"] == {
        "name": "assistant", "instructions": meta["adhoc_agent"]["instructions"],
        "tools": ["lookup", "refund"], "model": "fake-model", "base_url": url}


def test_an_adhoc_agent_takes_its_name_and_instructions_from_the_options(shop: Path) -> None:
    db = str(shop / "runs.db")
    with FakeOpenAI(["Order 7 is damaged."]) as server:
        r = chainlab("agent", "how is order 7?", "--tools", "shop_tools:toolbox", "--name",
                     "clerk", "--instructions", "Answer in one line.", "--model", "m2",
                     "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop),
                     OPENAI_BASE_URL=server.base_url)  # the server from the environment
        assert r.code == 0, r.err
        assert r.json["outputs"]["clerk"] == "Order 7 is damaged."
        assert server.completions[0].messages[0]["content"].startswith("Answer in one line.")
        assert server.completions[0].model == "m2"


SHOP_TOOLS = ["--tools", "shop_tools:toolbox"]
AT = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1"]  # (nothing is asked: refused first)


@pytest.mark.parametrize(("argv", "says"), [
    (["   ", *SHOP_TOOLS, *AT], "the request is empty"),
    (["support", "", *SHOP_TOOLS], "the request is empty"),
    (["hello", *SHOP_TOOLS, "--model", "m", "--base-url", "ftp://models.example/v1"],
     "--base-url 'ftp://models.example/v1' is not an http(s) URL"),
    (["hello", *SHOP_TOOLS, "--model", "m", "--base-url", "http://me:key@127.0.0.1:9/v1"],
     "--base-url carries a credential (user-info before '@')"),
    (["suport", "hello", *SHOP_TOOLS], "did you mean 'agent:support'"),
    (["suport", "hello", *SHOP_TOOLS, "--model", "m"], "did you mean 'agent:support'"),
    (["support", *SHOP_TOOLS, *AT], 'chainlab agent support "REQUEST"'),  # no request
    (["support", "hello", *SHOP_TOOLS, "--model", "m"], "set them on Agent('support'"),
    (["hello", *SHOP_TOOLS, *AT, "--name", "support"], "has a registered agent 'support'"),
    (["hello", *SHOP_TOOLS, *AT, "--name", "a b"], "letters, digits"),
    (["hello", "--tools", "shop_tools:empty", *AT], "has no tool an ad-hoc agent can call"),
    (["hello", *SHOP_TOOLS, "--base-url", "http://127.0.0.1:9/v1"],
     "pass --model M, or set OPENAI_MODEL"),
    (["hello", *SHOP_TOOLS, "--model", "m"], "set OPENAI_API_KEY"),  # nowhere to ask
    # bytes that are not UTF-8 on the command line arrive as lone surrogates: refused before
    # the run keeps them (the store would refuse the whole run later)
    (["hello", *SHOP_TOOLS, *AT, "--instructions", "be \udcff nice"],
     "--instructions: text with a lone surrogate"),
    (["hello", *SHOP_TOOLS, "--model", "m\udcff", "--base-url", "http://127.0.0.1:9/v1"],
     "--model: text with a lone surrogate"),
])
def test_bad_input_is_a_usage_error_naming_the_fix(shop: Path, argv: list[str],
                                                   says: str) -> None:
    r = chainlab("agent", *argv, "--db", str(shop / "runs.db"), cwd=shop,
                 PYTHONPATH=str(shop))
    assert r.code == 2, (r.out, r.err)
    assert says in r.err, r.err
    db = shop / "runs.db"  # nothing started
    assert not db.exists() or sqlite3.connect(db).execute(
        "SELECT count(*) FROM runs").fetchone() == (0,)


def test_an_adhoc_agent_is_offered_the_tools_but_not_the_agents(shop: Path) -> None:
    with FakeOpenAI(["ok"]) as server:
        r = chainlab("agent", "hello", "--tools", "shop_tools:only_agents", "--model", "m",
                     "--base-url", server.base_url, "--db", str(shop / "runs.db"), "--json",
                     cwd=shop, PYTHONPATH=str(shop))
        assert r.code == 0, r.err
        assert [t["function"]["name"] for t in server.completions[0].body["tools"]] == \
            ["lookup"]


def test_an_adhoc_agent_enqueued_is_run_by_a_worker_that_restores_it(shop: Path) -> None:
    """``chainlab agent "REQUEST" --enqueue``: a worker of the fleet (another process, with
    only ``--tools``) claims the run, finds its ad-hoc agent in the run, asks the model; the
    refund waits; ``chainlab approve`` records the decision, the worker applies it; the model
    is asked once per turn."""
    from chainlab.store import SQLiteStore

    from .helpers import until_status, worker

    db = str(shop / "q.db")
    SQLiteStore(db).close()  # (a worker's database: an enqueue is refused without one)
    script = [tool_calls(Call("lookup", {"order": 7}), Call("refund", {"order": 7,
                                                                     "amount": 15})),
              "Refunded 15 on order 7."]
    with FakeOpenAI(script) as server:
        r = chainlab("agent", "order 7 arrived broken, refund 15", "--tools",
                     "shop_tools:toolbox", "--model", "fake-model", "--base-url",
                     server.base_url, "--db", db, "--enqueue", "--key", "ask-1", cwd=shop,
                     PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)
        assert r.code == 0, r.err
        run_id = r.out.strip()
        assert "queued run" in r.err and server.completions == []  # nothing asked here
        again = chainlab("agent", "order 7 arrived broken, refund 15", "--tools",
                         "shop_tools:toolbox", "--model", "fake-model", "--base-url",
                         server.base_url, "--db", db, "--enqueue", "--key", "ask-1",
                         cwd=shop, PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)
        assert again.out.strip() == run_id  # the same request: the same run
        with worker("shop_tools:toolbox", db, cwd=shop, PYTHONPATH=str(shop),
                    OPENAI_API_KEY=SECRET) as proc:
            until_status(db, run_id, "suspended", proc)  # the refund waits
            assert len(server.completions) == 1
            r = chainlab("approve", run_id, "assistant/1.2", "--db", db, cwd=shop,
                         PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)
            assert r.code == 0, r.err
            until_status(db, run_id, "succeeded", proc)
        assert len(server.completions) == 2  # once per turn
    assert (shop / "refunds.txt").read_text() == "7:15\n"
    assert SECRET not in _stored_text(db)


def test_a_key_in_a_base_url_is_refused_at_every_door_and_shown_nowhere(shop: Path) -> None:
    """``?api-key=`` (the way Azure-style endpoints and gateways take a key), user-info, a
    key in OPENAI_BASE_URL or in a registered Agent's base_url: refused with exit 2 before
    a run is made, the message naming OPENAI_API_KEY and never the key; what the runs show
    (``chainlab runs --json``, the JSON view ``show --json``, which the HTTP service hands
    out too, an exported test, the database) holds it nowhere."""
    db = str(shop / "runs.db")
    write(shop / "keyed_tools.py", SHOP.replace('base_url="http://127.0.0.1:9/v1"',
                                                f'base_url="http://127.0.0.1:9/v1?key={SECRET}"'))
    with FakeOpenAI(["Order 7 is damaged."] * 2) as server:
        keyed = f"{server.base_url}?api-version=1&api-key={SECRET}"
        doors = [  # (argv, env, what the message names)
            (["agent", "hello", *SHOP_TOOLS, "--model", "m", "--base-url", keyed], {},
             "--base-url carries a credential (the query parameter 'api-key')"),
            (["agent", "hello", *SHOP_TOOLS, "--model", "m", "--base-url",
              server.base_url.replace("//", f"//me:{SECRET}@")], {},
             "--base-url carries a credential (user-info before '@')"),
            (["agent", "hello", *SHOP_TOOLS, "--model", "m"], {"OPENAI_BASE_URL": keyed},
             "OPENAI_BASE_URL carries a credential (the query parameter 'api-key')"),
            (["agent", "support", "hello", "--tools", "keyed_tools:toolbox"], {},
             "base_url carries a credential (the query parameter 'key')"),
        ]
        for argv, extra, says in doors:
            r = chainlab(*argv, "--db", db, cwd=shop, PYTHONPATH=str(shop), **extra)
            assert r.code == 2, (argv, r.out, r.err)
            assert says in r.err and "OPENAI_API_KEY" in r.err, r.err
            assert SECRET not in r.out + r.err
        # the safe way: the key in the environment
        r = chainlab("agent", "how is order 7?", *SHOP_TOOLS, "--model", "m", "--base-url",
                     server.base_url, "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop),
                     OPENAI_API_KEY=SECRET)
        assert r.code == 0, r.err
        run_id = r.json["run_id"]
        assert server.completions[0].headers["authorization"] == f"Bearer {SECRET}"
    shown = [chainlab("runs", "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop)),
             chainlab("show", run_id, "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop)),
             chainlab("export-test", run_id, "--output", str(shop / "test_exported.py"),
                      "--db", db, cwd=shop, PYTHONPATH=str(shop), OPENAI_API_KEY=SECRET)]
    assert [r.code for r in shown] == [0, 0, 0], [r.err for r in shown]
    assert [run["run_id"] for run in shown[0].json] == [run_id]  # nothing refused was kept
    exported = "".join(p.read_text() for p in shop.glob("test_exported*"))
    assert "Order 7 is damaged." in exported
    for text in (*(r.out + r.err for r in shown), exported, _stored_text(db)):
        assert SECRET not in text


def test_chainlab_agent_prints_the_answer_as_it_comes(shop: Path) -> None:
    """The ad-hoc agent streams: its text is on stderr piece by piece while the model still
    writes (read from the live process before the server sent the last piece), and the
    final answer is printed whole when the run ends."""
    text = "Order 7 looks damaged; I would refund 15."  # 6 pieces of 7 characters
    with FakeOpenAI([Reply(text, gap_s=0.4)]) as server:
        proc, seen = _agent_until_first_piece(shop, server, text)
        sent_then = len(server.pieces)
        out, err = proc.communicate(timeout=60)
    assert sent_then < 6  # the first piece was printed before the model finished
    assert proc.returncode == 0, err
    assert f"… assistant turn 1: {text}\n" in (seen + err).decode()
    assert text in out.decode()


def _agent_until_first_piece(shop: Path, server: FakeOpenAI, text: str
                             ) -> tuple[subprocess.Popen[bytes], bytes]:
    """``chainlab agent`` in a subprocess, once its stderr shows the answer's first piece."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "chainlab.cli", "agent", "what about order 7?", "--tools",
         "shop_tools:toolbox", "--model", "fake-model", "--base-url", server.base_url,
         "--db", str(shop / "runs.db")], cwd=shop, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env(PYTHONPATH=str(shop), OPENAI_API_KEY="test"))
    assert proc.stderr is not None and proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"assistant turn 1: " + text[:7].encode() not in seen:
        assert time.monotonic() < deadline, seen
        seen += proc.stderr.read1(100)  # type: ignore[attr-defined]
    return proc, seen


def test_a_driver_killed_mid_stream_loses_only_the_pieces(shop: Path) -> None:
    """SIGKILL while the answer streams: the log holds no piece and no answer for the turn;
    the resumed run asks the turn again and records the whole new answer."""
    first = "I was about to say something long when I was cut off."
    second = "Order 7: refund 15."
    db = str(shop / "runs.db")
    with FakeOpenAI([Reply(first, gap_s=0.5), Reply(second, gap_s=0.01)]) as server:
        proc, _ = _agent_until_first_piece(shop, server, first)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        with sqlite3.connect(db) as con:
            run_id, = con.execute("SELECT run_id FROM runs").fetchone()
            kinds = [k for (k,) in con.execute(
                "SELECT kind FROM events WHERE run_id = ? ORDER BY seq", (run_id,))]
        assert kinds[-1] == "step_started" and "model_delta" not in kinds
        r = chainlab("resume", run_id, "--db", db, "--force", cwd=shop,
                     PYTHONPATH=str(shop), OPENAI_API_KEY="test")
        assert r.code == 0, r.err
        assert len(server.completions) == 2  # the turn in flight was asked again
    r = chainlab("show", run_id, "--db", db, "--json", cwd=shop, PYTHONPATH=str(shop))
    assert r.json["outputs"]["assistant"] == second
    with sqlite3.connect(db) as con:
        assert not con.execute("SELECT 1 FROM events WHERE kind = 'model_delta'").fetchall()
