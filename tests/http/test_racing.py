"""Two clients approve the same step at once: one 200, one 409 saying who decided, and
the payment happens once. 40 trials on runs this server drives, and a few on runs nobody
drives (started by `chainlab run`, which exits when the run suspends: the winning
decision takes the run over)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from chainlab.http import ApiError, Client
from tests.http.server import CHAINS, TOOLS, Server, effects, env

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(300)]


def race(server: Server, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    """Two clients POST approve on ``pay`` released by one barrier; (status, body) each."""
    barrier = threading.Barrier(2)
    out: list[tuple[int, dict[str, Any]]] = []

    def approve(who: str) -> None:
        with server.client() as client:
            client.health()  # connect first: the race is between the two requests
            barrier.wait()
            try:
                out.append((200, client.approve(run_id, "pay", by=who)))
            except ApiError as exc:
                out.append((exc.status, {"error": exc.error, **exc.extra}))

    threads = [threading.Thread(target=approve, args=(f"client-{i}",)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def check_one_winner(api: Client, workdir: Path, run_id: str,
                     results: list[tuple[int, dict[str, Any]]]) -> None:
    assert sorted(code for code, _ in results) == [200, 409], results
    winner = next(body for code, body in results if code == 200)
    loser = next(body for code, body in results if code == 409)
    assert loser["error"] == "not_waiting", loser
    assert loser["decided"]["action"] == "approved"
    assert loser["decided"]["by"] == winner["by"]  # the 409 says who decided
    done = api.wait(run_id, timeout=60)
    assert done["status"] == "succeeded", done
    assert [e["kind"] for e in effects(workdir) if e["run_id"] == run_id] == ["pay"]
    assert "in_doubt" not in str(done["steps"])


@pytest.mark.parametrize("trial", range(40))
def test_two_clients_approve_one_step_at_once_one_wins_and_it_pays_once(
        server: Server, api: Client, workdir: Path, trial: int) -> None:
    run_id = api.start("payout", {"base": trial, "to": f"t{trial}"})["run_id"]
    assert api.wait(run_id, timeout=60)["status"] == "suspended"
    check_one_winner(api, workdir, run_id, race(server, run_id))


@pytest.mark.parametrize("trial", range(4))
def test_racing_approvals_on_a_run_nobody_drives_take_it_over_once(
        server: Server, api: Client, workdir: Path, trial: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chainlab.cli", "run", str(CHAINS / "payout.yaml"),
         "--tools", TOOLS, "--db", str(server.db), "--quiet", "--json",
         "--context", f'{{"base": {trial}, "to": "cli"}}'],
        cwd=workdir, env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr  # suspended, and the process left
    import json

    run_id = json.loads(done.stdout)["run_id"]
    check_one_winner(api, workdir, run_id, race(server, run_id))
