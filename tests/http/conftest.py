from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.server import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for a module's tests (each test starts its own runs)."""
    srv = Server(tmp_path_factory.mktemp("served"), args=("--keepalive", "0.5")).start()
    yield srv
    srv.stop()
    assert "Traceback" not in srv.log(), srv.log()


@pytest.fixture
def api(server: Server) -> Iterator[object]:
    with server.client() as client:
        yield client


@pytest.fixture
def workdir(server: Server) -> Path:
    return server.cwd
