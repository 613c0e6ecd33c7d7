"""A real ``chainlab serve`` for the HTTP door and defect tests: one per module, started
with the module's ``SERVE_ARGS``; its log must hold no traceback when it stops."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.http.server import Server


@pytest.fixture(scope="module")
def server_and_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                      ) -> Iterator[tuple[Server, httpx.Client]]:
    args = ("--keepalive", "0.5", *getattr(request.module, "SERVE_ARGS", ()))
    srv = Server(tmp_path_factory.mktemp("served"), args=args).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=120,
                          headers={"Authorization": f"Bearer {srv.token}"}) as client:
            yield srv, client
    finally:
        srv.stop()
    assert "Traceback" not in srv.log(), srv.log()[-4000:]


@pytest.fixture(scope="module")
def served(server_and_client: tuple[Server, httpx.Client]) -> Server:
    return server_and_client[0]


@pytest.fixture(scope="module")
def http(server_and_client: tuple[Server, httpx.Client]) -> httpx.Client:
    return server_and_client[1]
