"""An ad-hoc agent's run (``chainlab agent "REQUEST"``, issue 37 item 6) approved over HTTP:
``chainlab serve`` on the same store and toolbox takes the run over (nobody drives it) and
finds the agent the run keeps; the model is not asked again for the recorded turn. Real
processes, the real ``openai`` client to a scripted server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chainlab.testing.openai_script import Call, tool_calls
from chainlab.testing.openai_server import FakeOpenAI
from tests.http.server import TOOLS, Server, effects, env


def test_the_service_approves_an_adhoc_agents_call(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakeOpenAI([tool_calls(Call("pay", {"to": "ann", "amount": 5})),
                     "Paid ann 5."]) as model:
        started = subprocess.run(
            [sys.executable, "-m", "chainlab.cli", "agent", "pay ann 5", "--tools", TOOLS,
             "--model", "fake-model", "--base-url", model.base_url, "--db", str(db),
             "--json"], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=90)
        assert started.returncode == 3, started.stderr
        run_id = json.loads(started.stdout)["run_id"]
        server = Server(tmp_path, db=db).start()
        try:
            with server.client() as api:
                outcome = api.approve(run_id, "assistant/1.1", by="reviewer")
                assert outcome["outcome"] == "applied"
                end = api.wait(run_id, timeout=60)
        finally:
            server.stop()
        assert end["status"] == "succeeded", end
        assert end["outputs"]["assistant"] == "Paid ann 5."
        assert len(model.completions) == 2  # turn 1 answered from the record
    assert [e["kind"] for e in effects(tmp_path)] == ["pay"]
    assert "Traceback" not in server.log(), server.log()
