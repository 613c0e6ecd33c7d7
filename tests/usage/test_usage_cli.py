"""Usage and budgets on the command line (issue 31): `chainlab show` has the tokens and
cost of each step and the run's totals, `--json` the usage of the run, each step and
attempt; a run stopped by its budget continues with `chainlab approve --budget`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import chainlab, write

pytestmark = pytest.mark.xdist_group("usage-cli")

TOOLS = '''
from chainlab import CallContext, Toolbox

toolbox = Toolbox("paid")


@toolbox.tool
def ask(n: int, ctx: CallContext) -> int:
    ctx.report_usage(input_tokens=1000, output_tokens=234, cost=0.125)
    return n
'''

CHAIN = '''
name: paid
options: {budget: {max_cost: 0.2}}
steps:
  - {id: s1, tool: ask, args: {n: 1}}
  - {id: s2, tool: ask, args: {n: 2}, depends_on: [s1]}
  - {id: s3, tool: ask, args: {n: 3}, depends_on: [s2]}
'''


def test_show_usage_and_raise_a_budget(tmp_path: Path) -> None:
    write(tmp_path / "paid_tools.py", TOOLS)
    write(tmp_path / "paid.yaml", CHAIN)
    first = chainlab("run", "paid.yaml", "--tools", "paid_tools:toolbox", "--db", "runs.db",
                     cwd=tmp_path)
    assert first.code == 3, first.err  # s3 would cross the budget: it waits for a person
    run_id = first.run_id()
    assert "2,468 tokens (2,000 in, 468 out) · cost 0.25" in first.out
    assert "budget exceeded: cost: 0.25 spent + 0 expected > max_cost=0.2" in first.out

    shown = chainlab("show", run_id, "--db", "runs.db", cwd=tmp_path)
    assert "tokens" in shown.out and "cost" in shown.out
    [s1] = [line for line in shown.out.splitlines() if line.lstrip().startswith("s1 ")]
    assert [c for c in s1.split() if c != "│"][-2:] == ["1,234", "0.125"]
    data = chainlab("show", run_id, "--db", "runs.db", "--json", cwd=tmp_path).json
    assert data["usage"] == {"input_tokens": 2000, "output_tokens": 468, "tokens": 2468,
                             "cost": 0.25}
    assert data["steps"]["s2"]["attempts"][0]["usage"]["cost"] == 0.125
    assert data["waiting"][0]["step_id"] == "s3"

    bad = chainlab("approve", run_id, "s3", "--budget", '{"max_cost": "lots"}', "--db",
                   "runs.db", cwd=tmp_path)
    assert bad.code == 2 and "is not a budget" in bad.err
    done = chainlab("approve", run_id, "s3", "--budget", '{"max_cost": 1}', "--db", "runs.db",
                    cwd=tmp_path)
    assert done.code == 0, done.err
    assert "3,702 tokens (3,000 in, 702 out) · cost 0.375" in done.out
