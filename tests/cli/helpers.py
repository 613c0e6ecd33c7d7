"""Run the ``chainlab`` command line in a subprocess, in a test's own directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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
