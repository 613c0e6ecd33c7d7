"""Issue 40, item 6: the command line at any width. A run id or a step id is the value a
person copies for ``show`` and ``approve``: it is never cut; other columns are dropped
first, and an id that does not fit even alone wraps. ``show`` of a run that waits says how
long the run took until it waited, not until it was shown."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from .helpers import TOOLS, chainlab, write

LONG = "reconcile_the_ledger_of_customer_accounts"  # a step id of 41 characters
PAYOUT = f"""
name: payout-with-a-rather-long-chain-name
steps:
  - {{id: {LONG}, tool: charge, args: {{amount: 3}}}}
  - id: send
    tool: transfer
    depends_on: [{LONG}]
    args: {{to: "{{{{ context.to }}}}", amount: 100}}
"""


@pytest.fixture
def suspended(tmp_path: Path) -> str:
    chain = write(tmp_path / "payout.yaml", PAYOUT)
    r = chainlab("run", str(chain), "--tools", TOOLS, "--context", '{"to": "alice"}',
                 cwd=tmp_path)
    assert r.code == 3, r.out + r.err
    return r.run_id()


def first_column(text: str) -> str:
    """The first column of a table's body, its lines joined: an id wrapped over several
    lines reads whole again."""
    body = [line for line in text.splitlines() if "│" in line]
    return "".join(line.split("│")[0].strip() for line in body)


@pytest.mark.parametrize("columns", ["80", "60", "40", "24"])
def test_runs_never_cuts_the_run_id(tmp_path: Path, suspended: str, columns: str) -> None:
    r = chainlab("runs", cwd=tmp_path, COLUMNS=columns)
    assert r.code == 0, r.err
    assert "…" not in r.out.splitlines()[2]  # the run's row: nothing in it is cut
    assert "suspended" in r.out  # the status stays
    if int(columns) >= 40:
        assert suspended in r.out  # whole, on one line
        assert max(len(line) for line in r.out.splitlines()) <= int(columns)
    else:
        assert suspended in first_column(r.out)  # wrapped, every character kept
    if columns == "80":  # the chain's name fits; the times went first
        assert "payout-with-a-rather-long-chain-name" in r.out and "updated" not in r.out


@pytest.mark.parametrize("columns", ["80", "50"])
def test_show_never_cuts_a_step_id(tmp_path: Path, suspended: str, columns: str) -> None:
    r = chainlab("show", suspended, cwd=tmp_path, COLUMNS=columns)
    assert r.code in (0, 3), r.err
    assert LONG in r.out or LONG in first_column(r.out)
    assert "…" not in first_column(r.out)
    rows = [line for line in r.out.splitlines() if "waiting_confirmation" in line]
    assert rows and rows[0].split()[0] == "send"


def test_show_says_how_long_the_run_took_until_it_waited(tmp_path: Path,
                                                          suspended: str) -> None:
    db = sqlite3.connect(tmp_path / ".chainlab" / "chainlab.db")
    started, waited = db.execute(
        "SELECT min(ts), max(ts) FROM events WHERE run_id = ? AND kind IN "
        "('run_started', 'step_waiting_confirmation')", (suspended,)).fetchone()
    db.close()
    r = chainlab("show", suspended, cwd=tmp_path)
    m = re.search(r"suspended after ([\d.]+) (ms|s)", r.out)
    assert m, r.out
    shown = float(m[1]) / (1000 if m[2] == "ms" else 1)
    # the time until the confirmation was asked (its last activity), not until now
    assert shown == pytest.approx(waited - started, abs=0.002), (shown, waited - started)
