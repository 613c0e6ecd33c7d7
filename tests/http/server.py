"""A real ``chainlab serve`` in a subprocess on a loopback port (never an in-memory
transport: it would buffer the SSE stream), and what the tests need around it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chainlab.http import Client

HERE = Path(__file__).parent
CHAINS = HERE / "chains"
TOOLS = "served_tools:toolbox"


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CHAINLAB_", "OPENAI_"))}
    e.update(PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1]),
                                         e.get("PYTHONPATH", "")]),
             PYTHONIOENCODING="utf-8", NO_COLOR="1")
    e.update(extra)
    return e


class Server:
    """``chainlab serve`` in ``cwd`` (effects.jsonl lands there) on the store ``db``."""

    def __init__(self, cwd: Path, *, db: Path | str | None = None, args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None, tools: str = TOOLS,
                 chains: Path | None = CHAINS):
        self.cwd = cwd
        self.tools = tools
        self.chains = chains
        self.extra_env = extra_env or {}
        self.db = db or cwd / "runs.db"
        self.token_file = cwd / "token"
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.lines: list[str] = []

    def start(self, timeout: float = 90.0) -> Server:
        cmd = [sys.executable, "-m", "chainlab.cli", "serve", "--tools", self.tools,
               *(("--chains", str(self.chains)) if self.chains else ()),
               "--db", str(self.db), "--port", "0",
               "--token-file", str(self.token_file), *self.args]
        self.lines = []
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=env(**self.extra_env),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        found = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if "listening on " in line and not found.is_set():
                    self.url = line.split("listening on ", 1)[1].split()[0]
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start:\n{self.log()}")
        return self

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def client(self, **options: Any) -> Client:
        return Client(self.url, token=self.token, **options)

    def log(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy (generous: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


def effects(cwd: Path) -> list[dict[str, Any]]:
    import json

    path = cwd / "effects.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]
