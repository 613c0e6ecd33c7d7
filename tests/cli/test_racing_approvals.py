"""Two `chainlab approve RUN STEP` at the same time (issue 13, defect 5): one approval wins
and finishes the run, the payment happens exactly once, nothing is left in doubt, and the
loser prints one line (no traceback) and exits non-zero."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import TOOLS, chainlab, env, ledger, write

PAYOUT = """
name: racing
steps:
  - id: amount
    tool: add
    args: {a: 40, b: 2}
  - id: pay
    tool: payout
    args: {amount: "{{ steps.amount.output }}"}
"""

pytestmark = pytest.mark.xdist_group("durability-processes")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("trial", range(6))
def test_two_racing_approvals_pay_once_and_the_loser_says_one_line(tmp_path: Path,
                                                                   trial: int) -> None:
    chain = write(tmp_path / "racing.yaml", PAYOUT)
    r = chainlab("run", str(chain), "--tools", TOOLS, cwd=tmp_path)
    assert r.code == 3, r.out + r.err  # suspended: waiting for the approval
    run_id = r.run_id()
    cmd = [sys.executable, "-m", "chainlab.cli", "approve", run_id, "pay"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    for _code, _out, err in results:
        assert "Traceback" not in err and "ExceptionGroup" not in err, err
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0, results
    assert codes[1] != 0, results
    loser_err = next(err for code, _, err in results if code != 0)
    assert len([line for line in loser_err.splitlines() if line.strip()]) <= 2, loser_err
    assert [e["entry"] for e in ledger(tmp_path)] == ["payout"]
    shown = chainlab("show", run_id, "--json", cwd=tmp_path)
    state = json.loads(shown.out)
    assert state["status"] == "succeeded", state
    assert "in_doubt" not in json.dumps(state["steps"])
