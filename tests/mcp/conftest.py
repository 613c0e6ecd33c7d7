"""Shared by the MCP tests: the test server (``python -m chainlab.testing.mcp_server``) as a
real subprocess over stdio or streamable HTTP on a loopback port, and its call log."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="chainlab[mcp] is part of the dev install")

SERVER = [sys.executable, "-m", "chainlab.testing.mcp_server"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CallLog:
    """The server's call log (``CHAINLAB_MCP_LOG``): one JSON line per call start/end."""

    def __init__(self, path: Path):
        self.path = path

    @property
    def env(self) -> dict[str, str]:
        return {"CHAINLAB_MCP_LOG": str(self.path)}

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def starts(self) -> Counter[str]:
        return Counter(e["tool"] for e in self.entries() if e["phase"] == "start")

    def wait_for(self, tool: str, phase: str = "start", timeout: float = 30.0
                 ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.entries():
                if entry["tool"] == tool and entry["phase"] == phase:
                    return entry
            time.sleep(0.02)
        raise AssertionError(f"no {tool} {phase} in the server's log: {self.entries()}")

    def kill_server_of(self, tool: str) -> int:
        """SIGKILL the server process that logged ``tool``'s start (mid-call)."""
        pid = self.wait_for(tool)["pid"]
        os.kill(pid, signal.SIGKILL)
        return pid


@pytest.fixture
def call_log(tmp_path: Path) -> CallLog:
    return CallLog(tmp_path / "mcp-calls.jsonl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HTTPServer:
    """The test server over streamable HTTP on 127.0.0.1 (a real subprocess)."""

    def __init__(self, log: CallLog):
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        env = {**os.environ, **self.log.env}
        self.process = subprocess.Popen([*SERVER, "--http", str(self.port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the HTTP server exited: {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the HTTP server did not listen within 60 s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def http_server(call_log: CallLog) -> Iterator[HTTPServer]:
    server = HTTPServer(call_log)
    server.start()
    yield server
    server.kill()
