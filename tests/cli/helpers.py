"""Run the ``chainlab`` command line in a subprocess, in a test's own directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TOOLS = "example_tools:toolbox"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)

    def run_id(self) -> str:
        """The run id from a human-readable report (``run ID (chain) status ...``)."""
        match = re.search(r"^run (\S+) \(", self.out, re.M)
        assert match, f"no run line in:\n{self.out}\n{self.err}"
        return match.group(1)


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("CHAINLAB_", "OPENAI_")) and k not in ("COLUMNS", "LINES")}
    e.update(PYTHONPATH=os.pathsep.join([str(HERE), e.get("PYTHONPATH", "")]),
             COLUMNS="200", NO_COLOR="1", TERM="dumb", PYTHONIOENCODING="utf-8")
    e.update(extra)
    return e


def chainlab(*args: str, cwd: Path, timeout: float = 90, stdin: str | None = None,
             **extra_env: str) -> Result:
    """``python -m chainlab.cli ARGS`` in ``cwd`` (stdin: the text typed, else nothing, never
    a terminal); never a traceback on stderr."""
    proc = subprocess.run([sys.executable, "-m", "chainlab.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env(**extra_env), input=stdin or "")
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return result


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def ledger(cwd: Path) -> list[dict[str, Any]]:
    path = cwd / "ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@contextmanager
def worker(tools: str, db: str, *, cwd: Path, **extra_env: str
           ) -> Iterator[subprocess.Popen[str]]:
    """A ``chainlab worker --tools TOOLS --db DB`` process (polling every 50 ms) for the
    block, terminated after it; its output is appended to an AssertionError raised inside."""
    proc = subprocess.Popen([sys.executable, "-m", "chainlab.cli", "worker", "--tools", tools,
                             "--db", db, "--poll", "0.05"], cwd=cwd, env=env(**extra_env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    except AssertionError as exc:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        raise AssertionError(f"{exc}\n--- the worker said:\n{out}") from None
    proc.terminate()
    proc.communicate(timeout=60)


def until_status(db: str, run_id: str, status: str, proc: subprocess.Popen[str],
                 timeout: float = 90) -> None:
    """Wait (polling the store) until run ``run_id`` has ``status``, while ``proc`` lives."""
    from chainlab.store import SQLiteStore

    deadline = time.monotonic() + timeout
    with SQLiteStore(db) as store:
        while store.get_run(run_id).status != status:
            assert time.monotonic() < deadline, f"run {run_id} is not {status} in time"
            assert proc.poll() is None, "the worker exited"
            time.sleep(0.05)
