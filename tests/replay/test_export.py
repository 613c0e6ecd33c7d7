"""``chainlab export-test`` (issue 31): the exported test runs under pytest in a subprocess
and passes; after a deliberate change to a tool it fails with a readable diff; bad input is
a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import chainlab, write

pytestmark = pytest.mark.xdist_group("export-test")

TOOLS = '''
from chainlab import Toolbox, TransientError
import json, pathlib

toolbox = Toolbox("shop")
_calls = {"fetch": 0}


def effect(entry):
    with pathlib.Path("effects.jsonl").open("a") as fh:
        fh.write(json.dumps(entry) + "\\n")


@toolbox.tool(retry={"max_attempts": 2, "delay_s": 0})
def fetch_prices(items: list[str]) -> dict[str, int]:
    _calls["fetch"] += 1
    if _calls["fetch"] == 1:
        raise TransientError("price service busy")
    return {item: 10 * (i + 1) for i, item in enumerate(items)}


@toolbox.tool
def total(prices: dict[str, int]) -> int:
    return sum(prices.values())


@toolbox.tool(side_effects=True, requires_confirmation=True)
def charge(amount: int) -> dict:
    effect({"charge": amount})
    return {"charged": amount}
'''

CHAIN = '''
name: checkout
steps:
  - id: prices
    tool: fetch_prices
    args: {items: "{{ context.items }}"}
  - id: total
    tool: total
    args: {prices: "{{ steps.prices.output }}"}
  - id: charge
    tool: charge
    args: {amount: "{{ steps.total.output }}"}
'''


def pytest_in(cwd: Path, test: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAINLAB_", "PYTEST_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p",
                           "no:cacheprovider", "-q", str(test)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def recorded_run(tmp_path: Path) -> str:
    write(tmp_path / "shop_tools.py", TOOLS)
    write(tmp_path / "checkout.yaml", CHAIN)
    first = chainlab("run", "checkout.yaml", "--tools", "shop_tools:toolbox", "--db", "runs.db",
                     "--context", '{"items": ["tea", "milk"]}', cwd=tmp_path)
    assert first.code == 3, first.err  # charge waits for approval
    run_id = first.run_id()
    done = chainlab("approve", run_id, "charge", "--db", "runs.db", cwd=tmp_path)
    assert done.code == 0, done.err
    return run_id


def test_the_exported_test_passes_then_fails_with_a_diff_after_a_change(
        tmp_path: Path) -> None:
    run_id = recorded_run(tmp_path)
    exported = chainlab("export-test", run_id, "-o", "tests/test_checkout.py", "--db",
                        "runs.db", cwd=tmp_path)
    assert exported.code == 0, exported.err
    assert "live: total" in exported.out
    test = tmp_path / "tests" / "test_checkout.py"
    fixture = json.loads((tmp_path / "tests" / "test_checkout.replay.json").read_text())
    assert fixture["expected"]["confirmations"] == ["charge"]
    assert [c["fate"] for c in fixture["calls"] if c["step_id"] == "prices"] == [
        "retry", "succeeded"]
    text = test.read_text()
    assert "LIVE = ['total']" in text and "TOOLS = 'shop_tools:toolbox'" in text
    effects = (tmp_path / "effects.jsonl").read_text()

    ok = pytest_in(tmp_path, test)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 passed" in ok.stdout
    assert (tmp_path / "effects.jsonl").read_text() == effects  # charge was not called

    # a deliberate change: total now adds a fee
    source = (tmp_path / "shop_tools.py").read_text()
    write(tmp_path / "shop_tools.py", source.replace("return sum(prices.values())",
                                                     "return sum(prices.values()) + 1"))
    bad = pytest_in(tmp_path, test)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    out = bad.stdout
    assert f"the replay of run '{run_id}' differs from the recording" in out
    assert "-total: succeeded 30" in out and "+total: succeeded 31" in out
    assert "step 'charge' waits for approval of args the recording never approved" in out
    assert "E           -amount: 30\nE           +amount: 31\n" in out
    assert (tmp_path / "effects.jsonl").read_text() == effects

    write(tmp_path / "shop_tools.py", source)  # fixed again: green
    assert pytest_in(tmp_path, test).returncode == 0


def test_export_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    run_id = recorded_run(tmp_path)
    unknown = chainlab("export-test", "nope", "-o", "tests/test_x.py", "--db", "runs.db",
                       cwd=tmp_path)
    assert unknown.code == 2 and "nope" in unknown.err
    named = chainlab("export-test", run_id, "-o", "tests/checkout.py", "--db", "runs.db",
                     cwd=tmp_path)
    assert named.code != 0 and "name the test file test_NAME.py" in named.err
    live = chainlab("export-test", run_id, "-o", "tests/test_x.py", "--live", "nosuch",
                    "--db", "runs.db", cwd=tmp_path)
    assert live.code != 0 and "--live nosuch: no such tool" in live.err
    # the chain no longer validates: the tool it calls is gone
    write(tmp_path / "shop_tools.py", TOOLS.replace("def total(", "def total_price("))
    gone = chainlab("export-test", run_id, "-o", "tests/test_x.py", "--db", "runs.db",
                    cwd=tmp_path)
    assert gone.code != 0 and "no longer validates against toolbox 'shop'" in gone.err
    assert "total" in gone.err
    assert not (tmp_path / "tests" / "test_x.py").exists()
